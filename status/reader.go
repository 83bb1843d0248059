package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// DefaultPoisonLimit is the page size of ListPoison when PoisonQuery.Limit is 0.
const DefaultPoisonLimit = 50

// MaxPoisonLimit is the largest PoisonQuery.Limit.
const MaxPoisonLimit = 1000

// ErrInvalidContinuation: a PoisonQuery.Continuation that no page returned.
var ErrInvalidContinuation = errors.New("status: invalid continuation token")

// PoisonQuery selects poison entries.
type PoisonQuery struct {
	// Type, when set, keeps only entries of this command type.
	Type string
	// Limit is the most entries in one page (0 = DefaultPoisonLimit, at most
	// MaxPoisonLimit).
	Limit int
	// Continuation resumes from a previous page's token. The token is an
	// opaque offset into the newest-first listing: entries poisoned or
	// removed between pages shift it (poison tables are small and change
	// rarely; an entry may be seen twice or skipped across pages).
	Continuation string
}

// PoisonPage is one page of poison entries, newest first.
type PoisonPage struct {
	// Entries are the page's entries, newest first (empty, not nil, when none).
	Entries []PoisonEntry `json:"entries"`
	// Continuation is "" on the last page.
	Continuation string `json:"continuation,omitempty"`
}

// Reader answers status queries and carries out operator actions on poisoned
// commands. It is safe for concurrent use.
type Reader struct {
	st    storage.Store
	names Names
	store *Store
	delay func(cmdType string) time.Duration // Options.RecoveryDelay
}

// OpenReader opens the tables named by names on st and returns a Reader.
// Requeue enqueues on st's queues.
func OpenReader(ctx context.Context, st storage.Store, names Names, opts Options) (*Reader, error) {
	s, err := Open(ctx, st, names, opts)
	if err != nil {
		return nil, err
	}
	return &Reader{st: st, names: names, store: s, delay: opts.RecoveryDelay}, nil
}

// Store returns the writer the Reader uses.
func (r *Reader) Store() *Store { return r.store }

// Get returns a command's status (one point read of its command row; the
// parameters are not decoded). Unknown ID → error wrapping ErrNotFound.
func (r *Reader) Get(ctx context.Context, id string) (Status, error) {
	e, err := r.store.getRow(ctx, id)
	if err != nil {
		return Status{}, err
	}
	return decodeStatus(e), nil
}

// Events returns a command's events, oldest first, reading every page (one
// query per 1000 events). Unknown ID → error wrapping ErrNotFound.
func (r *Reader) Events(ctx context.Context, id string) ([]Event, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	var out []Event
	q := storage.Query{PartitionKey: id, RowKeyPrefix: EventRowPrefix, Top: 1000}
	for {
		page, err := r.store.commands.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("status: events of command %s: %w", id, err)
		}
		for _, e := range page.Entities {
			out = append(out, decodeEvent(e))
		}
		if page.Continuation == "" {
			break
		}
		q.Continuation = page.Continuation
	}
	if len(out) == 0 {
		return nil, notFound(id)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

func decodeEvent(e storage.Entity) Event {
	seq, _ := strconv.ParseInt(e.RowKey[len(EventRowPrefix):], 10, 64)
	return Event{
		Seq:       seq,
		Kind:      EventKind(str(e, "Kind")),
		Time:      timeProp(e, "Time"),
		Attempt:   int(intProp(e, "Attempt")),
		Worker:    str(e, "Worker"),
		Step:      int(intProp(e, "Step")),
		Note:      str(e, "Note"),
		Error:     str(e, "Error"),
		Reason:    str(e, "Reason"),
		Detail:    str(e, "Detail"),
		MessageID: str(e, "MessageID"),
	}
}

// ListPoison lists poison entries newest first (by PoisonedAt, then command
// ID), filtered by type, one page at a time. It reads the whole poison table
// (one query per 1000 entries) and sorts in memory: poison tables are small.
func (r *Reader) ListPoison(ctx context.Context, q PoisonQuery) (PoisonPage, error) {
	limit := q.Limit
	if limit == 0 {
		limit = DefaultPoisonLimit
	}
	if limit < 0 || limit > MaxPoisonLimit {
		return PoisonPage{}, fmt.Errorf("%w: poison limit %d is outside 1..%d", storage.ErrInvalidArgument, q.Limit, MaxPoisonLimit)
	}
	offset := 0
	if q.Continuation != "" {
		n, err := strconv.Atoi(q.Continuation)
		if err != nil || n < 0 {
			return PoisonPage{}, fmt.Errorf("%w: %q; pass the continuation of the previous page unchanged", ErrInvalidContinuation, q.Continuation)
		}
		offset = n
	}
	var all []PoisonEntry
	sq := storage.Query{Top: 1000}
	for {
		page, err := r.store.poison.Query(ctx, sq)
		if err != nil {
			return PoisonPage{}, fmt.Errorf("status: list poison: %w", err)
		}
		for _, e := range page.Entities {
			p := decodePoison(e)
			if q.Type == "" || p.Type == q.Type {
				all = append(all, p)
			}
		}
		if page.Continuation == "" {
			break
		}
		sq.Continuation = page.Continuation
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].PoisonedAt.Equal(all[j].PoisonedAt) {
			return all[i].PoisonedAt.After(all[j].PoisonedAt)
		}
		return all[i].CommandID < all[j].CommandID
	})
	out := PoisonPage{Entries: []PoisonEntry{}}
	if offset >= len(all) {
		return out, nil
	}
	end := min(offset+limit, len(all))
	out.Entries = all[offset:end]
	if end < len(all) {
		out.Continuation = strconv.Itoa(end)
	}
	return out, nil
}

// GetPoison returns one poison entry (one point read). Unknown → error
// wrapping ErrNotFound.
func (r *Reader) GetPoison(ctx context.Context, id string) (PoisonEntry, error) {
	if err := validID(id); err != nil {
		return PoisonEntry{}, err
	}
	e, err := r.store.poison.Get(ctx, id, "")
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return PoisonEntry{}, fmt.Errorf("%w: no poison entry for %s (%w)", ErrNotFound, id, err)
		}
		return PoisonEntry{}, fmt.Errorf("status: get poison entry %s: %w", id, err)
	}
	return decodePoison(e), nil
}

// loadPoisoned checks that id has a poison entry and a poisoned projection.
// A stale entry (command not poisoned) is removed and ErrNotPoisoned
// returned, except, with resume, for a command that is pending and never
// started: a requeue whose enqueue failed kept its entry for a retry.
func (r *Reader) loadPoisoned(ctx context.Context, id string, resume bool) (*Record, error) {
	entry, err := r.GetPoison(ctx, id)
	if err != nil {
		return nil, err
	}
	rec, err := r.store.Load(ctx, id)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%w: poison entry %s (%s) has no stored command to act on: %w", ErrNoCommand, id, entry.Reason, err)
		}
		return nil, err
	}
	if resume && rec.Status.Status == Pending && rec.Attempts == 0 {
		return rec, nil
	}
	if rec.Status.Status != Poisoned {
		_ = r.deletePoison(ctx, id)
		return nil, fmt.Errorf("%w: command %s is %s (its stale poison entry was removed)", ErrNotPoisoned, id, rec.Status.Status)
	}
	return rec, nil
}

func (r *Reader) deletePoison(ctx context.Context, id string) error {
	err := r.store.poison.Delete(ctx, id, "", storage.IfMatchAny)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("status: remove poison entry %s: %w", id, err)
	}
	return nil
}

// MessageText returns the queue message for a command: {"id":"…","type":"…"}
// (the same text as commands.Envelope.Marshal).
func MessageText(id, cmdType string) string {
	b, _ := json.Marshal(struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}{id, cmdType})
	return string(b)
}

// Requeue puts a poisoned command back: projection → pending with a requeued
// event (Worker = by), a new message on the command's queue, the poison entry
// removed. Cost: 2 point reads + 1 batch + 1 enqueue + 1 delete.
// Not poisoned → ErrNotPoisoned; unknown → ErrNotFound; an entry with no
// stored command (a malformed message) → ErrNoCommand: there is nothing to
// run, so fix the producer and Discard it. If the enqueue fails
// the command (already pending) is marked for the reconciler, its poison
// entry is removed, and the error says so. If the marker cannot be written
// either, the entry stays and the error says to requeue again: a Requeue of
// a command that is pending and never started since (with its entry)
// enqueues it without another requeued event, its message delayed by
// Options.RecoveryDelay (the first enqueue may have landed after all; see
// docs/lifecycle.md, "Duplicate messages").
func (r *Reader) Requeue(ctx context.Context, id, by string) error {
	rec, err := r.loadPoisoned(ctx, id, true)
	if err != nil {
		return err
	}
	var delay time.Duration
	if rec.Status.Status == Poisoned {
		if err := r.store.Append(ctx, rec, Event{Kind: Requeued, Worker: by, Note: "requeued from the poison table"}); err != nil {
			return err
		}
	} else {
		delay = DefaultRecoveryDelay
		if r.delay != nil {
			if d := r.delay(rec.Type); d > 0 {
				delay = d
			}
		}
	}
	q, err := r.st.Queue(ctx, r.names.Queue(rec.Queue))
	if err == nil {
		_, err = q.Enqueue(ctx, MessageText(rec.ID, rec.Type), delay, storage.NoExpiry)
	}
	if err != nil {
		if merr := r.store.MarkUnqueued(ctx, rec.ID, rec.Queue); merr != nil {
			// Nothing would queue it: keep the entry, so that the
			// operator sees it and can requeue again.
			return fmt.Errorf("status: requeue %s: command is pending but could not be queued nor marked for the reconciler; requeue it again: %w", id, errors.Join(err, merr))
		}
		// The command is pending and marked: its poison entry goes.
		if derr := r.deletePoison(ctx, id); derr != nil {
			err = errors.Join(err, derr)
		}
		return fmt.Errorf("status: requeue %s: command is pending but its enqueue failed (the reconciler will enqueue it): %w", id, err)
	}
	return r.deletePoison(ctx, id)
}

// Discard gives up on a poisoned command: a discarded event (Worker = by),
// the poison entry removed. Cost: 2 point reads + 1 batch + 1 delete.
// Not poisoned → ErrNotPoisoned; unknown → ErrNotFound. An entry with no
// stored command (a malformed message, or one naming a command that was never
// stored) is simply removed.
func (r *Reader) Discard(ctx context.Context, id, by string) error {
	rec, err := r.loadPoisoned(ctx, id, false)
	if errors.Is(err, ErrNoCommand) {
		// A malformed message or one naming no stored command: there is no
		// command to record the discard on, only the entry to remove.
		return r.deletePoison(ctx, id)
	}
	if err != nil {
		return err
	}
	if err := r.store.Append(ctx, rec, Event{Kind: DiscardedEvent, Worker: by, Reason: "discarded by operator"}); err != nil {
		return err
	}
	return r.deletePoison(ctx, id)
}
