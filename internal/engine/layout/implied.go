package layout

import (
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// ImpliedCreated returns the created event that command row e holds
// instead of an event row (CreatedInRowProp), or ok false.
func ImpliedCreated(e storage.Entity) (created model.Event, ok bool) {
	if !BoolProp(e, CreatedInRowProp) {
		return model.Event{}, false
	}
	return CreatedEvent(TimeProp(e, "IssuedAt")), true
}

// CreatedEvent is the created event of a command issued at issued without
// a run-at time.
func CreatedEvent(issued time.Time) model.Event {
	return model.Event{Seq: 1, Kind: model.EventCreated, Time: issued}
}

// ImpliedEvents returns the started and completed events that command row
// e holds instead of an event row (StartedAtProp, StartedSeqProp), or ok
// false when it holds none.
func ImpliedEvents(e storage.Entity) (started, completed model.Event, ok bool) {
	st := model.Status{
		State:     model.State(StrProp(e, "Status")),
		Attempts:  int(IntProp(e, "Attempts")),
		Worker:    StrProp(e, "Worker"),
		UpdatedAt: TimeProp(e, "UpdatedAt"),
	}
	return Implied(&st, IntProp(e, "EventSeq"), StrProp(e, "Owner"), IntProp(e, StartedSeqProp), TimeProp(e, StartedAtProp))
}

// Implied returns the started and completed events a command row with
// projection st, last event number eventSeq and owner holds when it
// carries startedSeq and startedAt (StartedSeqProp, StartedAtProp), or ok
// false when these do not describe its last two events.
func Implied(st *model.Status, eventSeq int64, owner string, startedSeq int64, startedAt time.Time) (started, completed model.Event, ok bool) {
	if startedSeq <= 0 || startedAt.IsZero() || startedSeq != eventSeq-1 || st.State != model.StateCompleted {
		return model.Event{}, model.Event{}, false
	}
	started = model.Event{Seq: startedSeq, Kind: model.EventStarted, Time: startedAt, Attempt: st.Attempts, Worker: st.Worker, MessageID: owner}
	completed = model.Event{Seq: eventSeq, Kind: model.EventCompleted, Time: st.UpdatedAt, Attempt: st.Attempts, Worker: st.Worker}
	return started, completed, true
}
