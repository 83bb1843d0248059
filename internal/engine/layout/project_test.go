package layout_test

import (
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

func TestApply(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var s model.Status
	settled := 0
	steps := []struct {
		ev       model.Event
		state    model.State
		attempts int
		step     int
		lastErr  string
		settled  int
	}{
		{model.Event{Kind: model.EventCreated, Time: at(0)}, model.StatePending, 0, 0, "", 0},
		{model.Event{Kind: model.EventStarted, Time: at(1), Attempt: 1, Worker: "w1"}, model.StateRunning, 1, 0, "", 0},
		{model.Event{Kind: model.EventStepCompleted, Time: at(2), Attempt: 1, Step: 1}, model.StateRunning, 1, 1, "", 0},
		{model.Event{Kind: model.EventFailed, Time: at(3), Attempt: 1, Error: "boom"}, model.StateRetrying, 1, 1, "boom", 1},
		// Delivery 2 left no outcome; delivery 3 says so. The state stays.
		{model.Event{Kind: model.EventLeaseLost, Time: at(4), Attempt: 2, Note: "no outcome"}, model.StateRetrying, 1, 1, "boom", 2},
		{model.Event{Kind: model.EventStarted, Time: at(4), Attempt: 3, Worker: "w2"}, model.StateRunning, 3, 1, "boom", 2},
		{model.Event{Kind: model.EventStepCompleted, Time: at(5), Step: 3}, model.StateRunning, 3, 3, "boom", 2},
		{model.Event{Kind: model.EventStepCompleted, Time: at(5), Step: 2}, model.StateRunning, 3, 3, "boom", 2}, // never goes back
		{model.Event{Kind: model.EventFailed, Time: at(6), Attempt: 3, Error: "again"}, model.StateRetrying, 3, 3, "again", 3},
		{model.Event{Kind: model.EventPoisoned, Time: at(7), Attempt: 3, Reason: "ceiling"}, model.StatePoisoned, 3, 3, "again", 3},
		{model.Event{Kind: model.EventRequeued, Time: at(8), By: "op"}, model.StatePending, 0, 3, "", 0},
		{model.Event{Kind: model.EventStarted, Time: at(9), Attempt: 1}, model.StateRunning, 1, 3, "", 0},
		{model.Event{Kind: model.EventCompleted, Time: at(10), Attempt: 1}, model.StateCompleted, 1, 3, "", 1},
		// A delivery whose lease ended after the completion: still completed.
		{model.Event{Kind: model.EventLeaseLost, Time: at(11), Attempt: 1}, model.StateCompleted, 1, 3, "", 1},
	}
	for i, st := range steps {
		layout.Apply(&s, st.ev)
		settled = layout.Settle(settled, st.ev)
		if s.State != st.state || s.Attempts != st.attempts || s.Step != st.step || s.LastError != st.lastErr || settled != st.settled {
			t.Fatalf("after event %d (%s): got status=%s attempts=%d step=%d lastError=%q settled=%d; want %s %d %d %q %d",
				i, st.ev.Kind, s.State, s.Attempts, s.Step, s.LastError, settled, st.state, st.attempts, st.step, st.lastErr, st.settled)
		}
		if !s.UpdatedAt.Equal(st.ev.Time) {
			t.Fatalf("after event %d: UpdatedAt %v, want %v", i, s.UpdatedAt, st.ev.Time)
		}
	}
	if !s.CreatedAt.Equal(t0) || s.Worker != "w2" { // an operator's requeue names no processor
		t.Fatalf("CreatedAt %v Worker %q", s.CreatedAt, s.Worker)
	}
	var d model.Status
	layout.Apply(&d, model.Event{Kind: model.EventCreated, Time: at(0)})
	layout.Apply(&d, model.Event{Kind: model.EventPoisoned, Time: at(1)})
	layout.Apply(&d, model.Event{Kind: model.EventDiscarded, Time: at(2)})
	if d.State != model.StateDiscarded || !d.State.Final() || model.StateRetrying.Final() {
		t.Fatalf("discard: %+v", d)
	}
}

// TestApplyDeferred: a deferred event makes the command retrying, due at
// its RunAt, settles its attempt and counts one deferral; the count
// survives a failure and a lease_lost (the flag Deferred only lasts until
// the next outcome or start), and created and requeued start it again.
func TestApplyDeferred(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var s model.Status
	settled := 0
	steps := []struct {
		ev        model.Event
		state     model.State
		attempts  int
		deferrals int
		deferred  bool
		settled   int
	}{
		{model.Event{Kind: model.EventCreated, Time: at(0)}, model.StatePending, 0, 0, false, 0},
		{model.Event{Kind: model.EventStarted, Time: at(1), Attempt: 1}, model.StateRunning, 1, 0, false, 0},
		{model.Event{Kind: model.EventDeferred, Time: at(2), Attempt: 1, Error: "429", RunAt: at(32)}, model.StateRetrying, 1, 1, true, 1},
		{model.Event{Kind: model.EventLeaseLost, Time: at(33), Attempt: 2}, model.StateRetrying, 1, 1, true, 2},
		{model.Event{Kind: model.EventStarted, Time: at(34), Attempt: 3}, model.StateRunning, 3, 1, false, 2},
		{model.Event{Kind: model.EventDeferred, Time: at(35), Attempt: 3, Error: "429", RunAt: at(65)}, model.StateRetrying, 3, 2, true, 3},
		{model.Event{Kind: model.EventStarted, Time: at(66), Attempt: 4}, model.StateRunning, 4, 2, false, 3},
		{model.Event{Kind: model.EventFailed, Time: at(67), Attempt: 4, Error: "boom", RunAt: at(68)}, model.StateRetrying, 4, 2, false, 4},
		{model.Event{Kind: model.EventRequeued, Time: at(69), By: "op"}, model.StatePending, 0, 0, false, 0},
	}
	for i, st := range steps {
		layout.Apply(&s, st.ev)
		settled = layout.Settle(settled, st.ev)
		if s.State != st.state || s.Attempts != st.attempts || s.Deferrals != st.deferrals || s.Deferred != st.deferred || settled != st.settled {
			t.Fatalf("after event %d (%s): got status=%s attempts=%d deferrals=%d deferred=%v settled=%d; want %s %d %d %v %d",
				i, st.ev.Kind, s.State, s.Attempts, s.Deferrals, s.Deferred, settled, st.state, st.attempts, st.deferrals, st.deferred, st.settled)
		}
		if st.ev.Kind == model.EventDeferred && (!s.RunAt.Equal(st.ev.RunAt) || s.LastError != st.ev.Error) {
			t.Fatalf("after event %d: RunAt %v LastError %q, want the deferral's %v %q", i, s.RunAt, s.LastError, st.ev.RunAt, st.ev.Error)
		}
	}
}
