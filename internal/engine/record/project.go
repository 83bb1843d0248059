package record

import (
	"time"

	"github.com/cmdq-dev/cmdq/cmdqtype"
)

// Apply folds one event into the projection s. The projection is derived from
// the events only: replaying a command's events from a zero cmdqtype.Status (with ID,
// Type, CorrelationID and Queue set) yields its stored status.
func Apply(s *cmdqtype.Status, e cmdqtype.Event) {
	t := e.Time.UTC()
	switch e.Kind {
	case cmdqtype.EventCreated:
		s.State = cmdqtype.StatePending
		s.CreatedAt = t
		s.Attempts, s.Step, s.LastError = 0, 0, ""
		s.RunAt = runAt(e)
	case cmdqtype.EventStarted:
		s.State = cmdqtype.StateRunning
		if e.Attempt > 0 {
			s.Attempts = e.Attempt
		} else {
			s.Attempts++
		}
	case cmdqtype.EventStepCompleted:
		if e.Step > s.Step {
			s.Step = e.Step
		}
		if !s.State.Final() {
			s.State = cmdqtype.StateRunning
		}
	case cmdqtype.EventFailed:
		s.State = cmdqtype.StateRetrying
		s.LastError = e.Error
		if e.Attempt > s.Attempts {
			s.Attempts = e.Attempt
		}
		if !e.RunAt.IsZero() {
			s.RunAt = runAt(e) // the next attempt's due time
		}
	case cmdqtype.EventCompleted:
		s.State = cmdqtype.StateCompleted
		s.LastError = ""
		if e.Attempt > s.Attempts {
			s.Attempts = e.Attempt
		}
	case cmdqtype.EventPoisoned:
		s.State = cmdqtype.StatePoisoned
		if e.Error != "" {
			s.LastError = e.Error
		}
	case cmdqtype.EventRequeued:
		s.State = cmdqtype.StatePending
		s.Attempts = 0
		s.LastError = ""
		if !e.RunAt.IsZero() {
			s.RunAt = runAt(e) // run-now: due from then
		}
	case cmdqtype.EventDiscarded:
		s.State = cmdqtype.StateDiscarded
	case cmdqtype.EventCancelled:
		s.State = cmdqtype.StateCancelled
	case cmdqtype.EventLeaseLost:
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
func runAt(e cmdqtype.Event) time.Time {
	if e.RunAt.IsZero() {
		return time.Time{}
	}
	return ms(e.RunAt)
}
