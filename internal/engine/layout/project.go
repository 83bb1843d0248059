package layout

import (
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// Apply folds one event into the projection s. The projection is derived from
// the events only: replaying a command's events from a zero model.Status (with ID,
// Type, CorrelationID and Queue set) yields its stored status.
func Apply(s *model.Status, e model.Event) {
	t := e.Time.UTC()
	if e.Kind != model.EventStepCompleted && e.Kind != model.EventLeaseLost {
		s.Deferred = false // set again below by a deferred event
	}
	switch e.Kind {
	case model.EventCreated:
		s.State = model.StatePending
		s.CreatedAt = t
		s.Attempts, s.Step, s.LastError, s.Deferrals = 0, 0, "", 0
		s.RunAt = runAt(e)
	case model.EventStarted:
		s.State = model.StateRunning
		if e.Attempt > 0 {
			s.Attempts = e.Attempt
		} else {
			s.Attempts++
		}
	case model.EventStepCompleted:
		if e.Step > s.Step {
			s.Step = e.Step
		}
		if !s.State.Final() {
			s.State = model.StateRunning
		}
	case model.EventFailed:
		s.State = model.StateRetrying
		s.LastError = e.Error
		if e.Attempt > s.Attempts {
			s.Attempts = e.Attempt
		}
		if !e.RunAt.IsZero() {
			s.RunAt = runAt(e) // the next attempt's due time
		}
	case model.EventDeferred:
		// A deferral (RetryAfter) that does not count toward the poison
		// ceiling: retrying, due at RunAt.
		s.State = model.StateRetrying
		s.LastError = e.Error
		if e.Attempt > s.Attempts {
			s.Attempts = e.Attempt
		}
		if !e.RunAt.IsZero() {
			s.RunAt = runAt(e)
		}
		s.Deferrals++
		s.Deferred = true
	case model.EventCompleted:
		s.State = model.StateCompleted
		s.LastError = ""
		if e.Attempt > s.Attempts {
			s.Attempts = e.Attempt
		}
	case model.EventPoisoned:
		s.State = model.StatePoisoned
		if e.Error != "" {
			s.LastError = e.Error
		}
	case model.EventRequeued:
		s.State = model.StatePending
		s.Attempts, s.Deferrals = 0, 0
		s.LastError = ""
		if !e.RunAt.IsZero() {
			s.RunAt = runAt(e) // run-now: due from then
		}
	case model.EventDiscarded:
		s.State = model.StateDiscarded
	case model.EventCancelled:
		s.State = model.StateCancelled
	case model.EventLeaseLost:
		// Explains a delivery without an outcome; the state stays.
	}
	if e.Worker != "" {
		s.Worker = e.Worker
	}
	if !t.IsZero() {
		s.UpdatedAt = t
	}
}

// runAt is an event's RunAt as the projection keeps it (UTC, millisecond
// precision; zero stays zero).
func runAt(e model.Event) time.Time {
	if e.RunAt.IsZero() {
		return time.Time{}
	}
	return Millis(e.RunAt)
}

// Settle folds one event into settled, the last attempt whose outcome is
// recorded (failed, deferred, completed, poisoned or lease_lost; created and requeued
// start again from 0). A delivery of attempt n whose attempts settled+1..n-1
// have no outcome records lease_lost events for them.
func Settle(settled int, e model.Event) int {
	switch e.Kind {
	case model.EventCreated, model.EventRequeued:
		return 0
	case model.EventFailed, model.EventDeferred, model.EventCompleted, model.EventPoisoned, model.EventLeaseLost:
		return max(settled, e.Attempt)
	}
	return settled
}

// Own folds one event into owner, the queue message that owns the command
// (record.Record.Owner): a started event's MessageID; none after created and
// requeued.
func Own(owner string, e model.Event) string {
	switch e.Kind {
	case model.EventCreated, model.EventRequeued:
		return ""
	case model.EventStarted:
		return e.MessageID
	}
	return owner
}
