package record

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// Get returns a command's status as a reader sees it now (one point read
// of its command row; the parameters are not decoded): a pending command
// whose run-at time is ahead is StateScheduled (model.Status.AsOf).
// Unknown ID → error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (model.Status, error) {
	e, _, err := s.getRow(ctx, id)
	if err != nil {
		return model.Status{}, err
	}
	return DecodeStatus(e).AsOf(s.now()), nil
}

// Now returns the Store's clock (Options.Now).
func (s *Store) Now() time.Time { return s.now() }

// Events returns a command's events, oldest first, reading every page (one
// query per 1000 rows) of the ID's partition — the command row, which may
// hold the created event and the last two (layout.CreatedInRowProp,
// layout.StartedAtProp), and the event rows — in
// the ID's table, and in the base table when the command is not there
// (moved by retention). Unknown ID → error wrapping ErrNotFound (and
// model.ErrExpired past retention).
func (s *Store) Events(ctx context.Context, id string) ([]model.Event, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	day, hasDay, err := s.tables.ForRead(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("cmdq: events of command %s: %w", id, err)
	}
	// read returns the events of id's partition in tb and whether its
	// command row is there.
	read := func(tb storage.Table) (out []model.Event, cmd bool, err error) {
		q := storage.Query{PartitionKey: id, Top: 1000}
		for {
			page, err := tb.Query(ctx, q)
			if err != nil {
				return nil, false, fmt.Errorf("cmdq: events of command %s: %w", id, err)
			}
			for _, e := range page.Entities {
				switch {
				case e.RowKey == layout.RowCommand:
					cmd = true
					if created, ok := layout.ImpliedCreated(e); ok {
						out = append(out, created)
					}
					if started, completed, ok := layout.ImpliedEvents(e); ok {
						out = append(out, started, completed)
					}
				case strings.HasPrefix(e.RowKey, layout.EventRowPrefix):
					out = appendEvents(out, e)
				}
			}
			if page.Continuation == "" {
				return out, cmd, nil
			}
			q.Continuation = page.Continuation
		}
	}
	var out []model.Event
	if day != nil {
		var cmd bool
		if out, cmd, err = read(day); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return nil, err
		}
		if !cmd && s.sweepable(id) {
			// Moved commands leave their events behind until the day table
			// is dropped: the command row says where the command is.
			out = nil
		}
	}
	if len(out) == 0 {
		if out, _, err = read(s.commands); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		if hasDay {
			return nil, s.goneErr(id)
		}
		return nil, notFound(id)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

// appendEvents appends the events of event row e to out: one, or two for
// a started row that holds its attempt's completion
// (layout.CompletedAtProp).
func appendEvents(out []model.Event, e storage.Entity) []model.Event {
	ev := decodeEvent(e)
	out = append(out, ev)
	if done := layout.TimeProp(e, layout.CompletedAtProp); !done.IsZero() && ev.Kind == model.EventStarted {
		out = append(out, model.Event{Seq: ev.Seq + 1, Kind: model.EventCompleted, Time: done, Attempt: ev.Attempt, Worker: ev.Worker})
	}
	return out
}

func decodeEvent(e storage.Entity) model.Event {
	seq, _ := strconv.ParseInt(e.RowKey[len(layout.EventRowPrefix):], 10, 64)
	ev := model.Event{
		Seq:     seq,
		Kind:    model.EventKind(layout.StrProp(e, "Kind")),
		Time:    layout.TimeProp(e, "Time"),
		Attempt: int(layout.IntProp(e, "Attempt")),
		Worker:  layout.StrProp(e, "Worker"),
		Step:    int(layout.IntProp(e, "Step")),
		Note:    layout.StrProp(e, "Note"),
		Error:   layout.StrProp(e, "Error"),
		Reason:  layout.StrProp(e, "Reason"),
		Detail:  layout.StrProp(e, "Detail"),
		// MessageID names the message that owns the command (started).
		MessageID: layout.StrProp(e, "MessageID"),
		RunAt:     layout.TimeProp(e, "RunAt"),
	}
	if operatorEvent(ev.Kind) {
		ev.By, ev.Worker = ev.Worker, ""
	}
	return ev
}

// GetPoison returns one poison entry (one point read). Unknown → error
// wrapping ErrNotFound.
func (s *Store) GetPoison(ctx context.Context, id string) (model.PoisonEntry, error) {
	if err := validID(id); err != nil {
		return model.PoisonEntry{}, err
	}
	e, err := s.poisonEntity(ctx, id)
	if err != nil {
		return model.PoisonEntry{}, err
	}
	return DecodePoison(e), nil
}

// poisonEntity reads id's poison table entity (one point read). Unknown →
// error wrapping ErrNotFound.
func (s *Store) poisonEntity(ctx context.Context, id string) (storage.Entity, error) {
	e, err := s.poison.Get(ctx, id, "")
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return storage.Entity{}, fmt.Errorf("%w: no poison entry for %s (%w)", model.ErrNotFound, id, err)
		}
		return storage.Entity{}, fmt.Errorf("cmdq: get poison entry %s: %w", id, err)
	}
	return e, nil
}

// RequeueInFlight is how long after a requeue's requeued event a poison
// entry still there without the RequeueFailed mark is taken for that
// requeue still in progress (it removes the entry, then enqueues) rather
// than for one that stopped half-way (its process died): 1 minute, far
// more than a requeue takes.
const RequeueInFlight = time.Minute

// RequeueFailedProp is the property a poison entry put back by a requeue
// whose enqueue and marker both failed carries (true): the command is
// pending with no message, and the next requeue enqueues it
// (RequeueFailedEntity).
const RequeueFailedProp = "RequeueFailed"

// RequeueFailedEntity is the poison entity of entry put back by a requeue
// that could neither enqueue the command nor mark it for the reconciler.
func RequeueFailedEntity(entry model.PoisonEntry) storage.Entity {
	e := PoisonEntity(entry)
	e.Properties[RequeueFailedProp] = true
	return e
}

// LoadPoisoned checks that id has a poison entry and a poisoned projection,
// and returns both. For a command that is not poisoned it returns
// ErrNotPoisoned and removes the entry as stale, except in two cases:
//   - the command is pending and never started: a requeue in progress, or
//     one whose enqueue failed and that kept its entry for a retry (the
//     entry then carries RequeueFailedProp). Its entry stays. With resume,
//     a command whose entry has the mark, or whose requeue is older than
//     RequeueInFlight (a requeue that died half-way), is returned (Requeue
//     retries it); otherwise another requeue is still in progress (it
//     removes the entry and enqueues the command at once): ErrNotPoisoned;
//   - the command is not final and at or before the attempt the entry
//     names: a poison move in progress; its entry stays.
func (s *Store) LoadPoisoned(ctx context.Context, id string, resume bool) (*Record, model.PoisonEntry, error) {
	if err := validID(id); err != nil {
		return nil, model.PoisonEntry{}, err
	}
	ent, err := s.poisonEntity(ctx, id)
	if err != nil {
		return nil, model.PoisonEntry{}, err
	}
	entry := DecodePoison(ent)
	rec, err := s.Load(ctx, id)
	if err != nil {
		if errors.Is(err, model.ErrNotFound) {
			return nil, entry, fmt.Errorf("%w: poison entry %s (%s) has no stored command to act on: %w", model.ErrNoCommand, id, entry.Reason, err)
		}
		return nil, entry, err
	}
	if rec.Status.State == model.StatePending && rec.Attempts == 0 {
		failed, _ := ent.Properties[RequeueFailedProp].(bool)
		if resume && (failed || s.now().Sub(rec.Status.UpdatedAt) > RequeueInFlight) {
			return rec, entry, nil
		}
		if resume {
			// Another requeue wrote its requeued event and is about to
			// remove the entry and enqueue the command: taking this path
			// would remove the entry first and enqueue a recovery message,
			// delayed by a lease (docs/lifecycle.md, "Duplicate
			// messages"), and the other requeue would enqueue nothing.
			return nil, entry, fmt.Errorf("%w: command %s was requeued by someone else meanwhile", model.ErrNotPoisoned, id)
		}
		return nil, entry, fmt.Errorf("%w: command %s is pending (requeued)", model.ErrNotPoisoned, id)
	}
	if rec.Status.State != model.StatePoisoned {
		if !rec.Status.State.Final() && entry.Attempts > 0 && rec.Attempts <= entry.Attempts {
			// The entry of the attempt being poisoned now: Poison writes it
			// before the command's poisoned event, so that a poisoned
			// command is never missing from the poison table. Removing it
			// here would leave the command poisoned with no entry (a
			// requeue under load did, before this check). A move that
			// crashed half-way leaves it too, and the command's next
			// delivery poisons it again or runs an attempt past it (then
			// the entry is stale and removed).
			return nil, entry, fmt.Errorf("%w: command %s is being moved to the poison table (attempt %d); try again in a moment", model.ErrNotPoisoned, id, entry.Attempts)
		}
		_ = s.deletePoison(ctx, id)
		return nil, entry, fmt.Errorf("%w: command %s is %s (its stale poison entry was removed)", model.ErrNotPoisoned, id, rec.Status.State)
	}
	return rec, entry, nil
}

func (s *Store) deletePoison(ctx context.Context, id string) error {
	err := s.poison.Delete(ctx, id, "", storage.IfMatchAny)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("cmdq: remove poison entry %s: %w", id, err)
	}
	return nil
}

// Discard gives up on a poisoned command: a discarded event (Worker = by),
// the poison entry removed. Cost: 2 point reads + 1 batch + 1 delete.
// Not poisoned → ErrNotPoisoned; unknown → ErrNotFound. An entry with no
// stored command (a malformed message, or one naming a command that was never
// stored) is simply removed.
func (s *Store) Discard(ctx context.Context, id, by string) error {
	rec, _, err := s.LoadPoisoned(ctx, id, false)
	if errors.Is(err, model.ErrNoCommand) {
		// A malformed message or one naming no stored command: there is no
		// command to record the discard on, only the entry to remove.
		return s.deletePoison(ctx, id)
	}
	if err != nil {
		return err
	}
	if err := s.Append(ctx, rec, model.Event{Kind: model.EventDiscarded, By: by, Reason: "discarded by operator"}); err != nil {
		var ce *ConflictError
		if errors.As(err, &ce) && ce.Current != nil && ce.Current.Status.State != model.StatePoisoned {
			return fmt.Errorf("%w: command %s is %s: someone else requeued or discarded it meanwhile", model.ErrNotPoisoned, id, ce.Current.Status.State)
		}
		return err
	}
	return s.deletePoison(ctx, id)
}
