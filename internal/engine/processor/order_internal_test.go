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
