package processor

import (
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// TestNeverDelivered: only a final command with no attempt whose run-at
// time was well after it became final is taken out of its order key at
// once; one that may have a handler running elsewhere waits for a lease.
func TestNeverDelivered(t *testing.T) {
	cancelled := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name     string
		attempts int
		runAt    time.Time
		want     bool
	}{
		{"scheduled an hour ahead", 0, cancelled.Add(time.Hour), true},
		{"due within twice the clock skew", 0, cancelled.Add(2 * maxClockSkew), false},
		{"due already", 0, cancelled.Add(-time.Second), false},
		{"issued to run now", 0, time.Time{}, false},
		{"retrying an hour ahead (an attempt ran)", 1, cancelled.Add(time.Hour), false},
	} {
		st := model.Status{State: model.StateCancelled, Attempts: c.attempts, RunAt: c.runAt, UpdatedAt: cancelled}
		if got := neverDelivered(st); got != c.want {
			t.Errorf("%s: neverDelivered = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestHeadMayLeave: a waiting delivery takes a head out of its key only
// when the head is final, and — whatever the outcome (a completion or a
// poisoning that its own delivery did not hand on, landed after its lease
// ended, or a cancel) — a lease and maxClockSkew after its last write, when
// a handler of it running elsewhere has learnt of the outcome and ended.
// A completed head taken out at once let the next command of the key start
// beside a superseded duplicate of it (chaos seed 8331198227424181211).
func TestHeadMayLeave(t *testing.T) {
	lease := 5 * time.Second
	written := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		state model.State
		runAt time.Time
		ago   time.Duration
		want  bool
	}{
		{"running", model.StateRunning, time.Time{}, time.Hour, false},
		{"retrying", model.StateRetrying, time.Time{}, time.Hour, false},
		{"completed just now", model.StateCompleted, time.Time{}, 0, false},
		{"completed within a lease and the skew", model.StateCompleted, time.Time{}, lease + maxClockSkew - time.Millisecond, false},
		{"completed a lease and the skew ago", model.StateCompleted, time.Time{}, lease + maxClockSkew, true},
		{"poisoned just now", model.StatePoisoned, time.Time{}, time.Second, false},
		{"poisoned long ago", model.StatePoisoned, time.Time{}, time.Hour, true},
		{"cancelled just now", model.StateCancelled, time.Time{}, time.Second, false},
		{"cancelled before it was due (never delivered)", model.StateCancelled, written.Add(time.Hour), 0, true},
	} {
		st := model.Status{State: c.state, RunAt: c.runAt, UpdatedAt: written}
		if got := headMayLeave(st, c.ago, lease); got != c.want {
			t.Errorf("%s: headMayLeave = %v, want %v", c.name, got, c.want)
		}
	}
}
