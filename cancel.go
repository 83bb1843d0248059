package cmdq

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq/cmdqtype"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/storage"
)

// Cancel cancels a command that has not ended (pending, scheduled,
// retrying or running): a cancelled event (By = by) makes it final
// (StateCancelled). It never runs again: its queue message is deleted
// when a processor next sees it, at no extra call. A handler of it that
// runs in this process has its context cancelled at once; one that runs
// in another process, no later than its next lease renewal (which reads
// the command) or its next write. The cause of that context
// (context.Cause) wraps ErrCancelled and ErrSuperseded; nothing more is
// recorded for that attempt. The command row's ETag decides a race with
// the attempt's own outcome: a command whose completion (or poisoning) is
// stored first stays completed and Cancel fails with ErrNotCancellable;
// one whose cancel is stored first stays cancelled, whatever its handler
// returns.
//
// The result says whether it was cancelled before (Already: nothing
// written). A command that ended otherwise (completed, poisoned,
// discarded) → an error wrapping ErrNotCancellable (Discard a poisoned
// one); an unknown ID → ErrNotFound.
//
// Cost: one point read and one batch. A pending command issued less than
// about half its type's lease ago could still be started by a processor
// from its issue's own message without reading it (the first delivery's
// fast path): Cancel then first marks its queue's control row (one
// upsert), tells this process's processors at once and, on a store that
// processors of other processes share (Azure), waits until every
// processor has read the control rows since (at most ControlInterval, 9
// s, and no longer than the command stays that young) before it stores the
// cancel, so that none starts the command afterwards (docs/lifecycle.md,
// "Cancelling").
func (c *Client) Cancel(ctx context.Context, id, by string) (CancelResult, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return CancelResult{}, err
	}
	marked := false
	prepare := func(ctx context.Context, rec *record.Record) error {
		if c.tune.BeforeCancelWrite != nil {
			c.tune.BeforeCancelWrite(rec.ID)
		}
		if marked {
			return nil
		}
		until, young := c.fastPathUntil(rec)
		if !young {
			return nil
		}
		// The mark comes first: a processor that starts (or reads the
		// control rows) after it sees it; those of this process that run
		// already are told at once.
		if _, err := r.MarkCancelling(ctx, rec.Queue); err != nil {
			return err
		}
		marked = true
		for _, p := range processor.Local(c.st) {
			p.Cancelling(rec.ID)
		}
		if storage.IsExclusive(c.st) {
			return nil // no processor of another process to wait for
		}
		// Every processor that may start the command from its message
		// without reading it reads the control rows at least once per
		// ControlInterval: after that long, each has seen the mark.
		if all := time.Now().Add(c.controlInterval() + controlMargin); all.Before(until) {
			until = all
		}
		if d := time.Until(until); d > 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return fmt.Errorf("cmdq: cancel %s: waiting for the processors to learn of it (at most %s): %w", rec.ID, c.controlInterval(), ctx.Err())
			}
		}
		return nil
	}
	rec, already, err := r.Store.Cancel(ctx, id, by, prepare)
	if err != nil {
		return CancelResult{}, err
	}
	if !already {
		for _, p := range processor.Local(c.st) {
			p.Cancelled(id)
		}
	}
	return CancelResult{Status: rec.Status, Already: already}, nil
}

// controlMargin is added to a cancel's wait for the processors' reads of
// the control rows (100 ms).
const controlMargin = 100 * time.Millisecond

// controlInterval is the processors' ControlInterval as this Client
// assumes it.
func (c *Client) controlInterval() time.Duration {
	return cmp.Or(c.tune.ControlInterval, cmdqtype.ControlInterval)
}

// fastPathUntil reports whether a processor could still start command rec
// from its issue's own message without reading it (pending, never
// started, issued within the fast path's age limit of its type's lease,
// with the clock skew a processor allows and as much again for this
// machine's), and until when at most. For a type this Client does not
// know the lease is unknown: young, until the processors have read the
// control rows.
func (c *Client) fastPathUntil(rec *record.Record) (until time.Time, young bool) {
	if rec.Status.State != cmdqtype.StatePending || rec.Attempts != 0 {
		return time.Time{}, false
	}
	def, ok := c.reg.Lookup(rec.Type)
	if !ok {
		return time.Now().Add(c.controlInterval() + controlMargin), true
	}
	until = rec.CreatedAt.Add(processor.FastPathAge(cmp.Or(def.Lease, cmdqtype.DefaultLease)) + 2*processor.MaxClockSkew)
	return until, time.Now().Before(until)
}
