package cmdq

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
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
	g := &firstGuard{c: c, r: r}
	prepare := func(ctx context.Context, rec *record.Record) error {
		if c.tune.BeforeCancelWrite != nil {
			c.tune.BeforeCancelWrite(rec.ID)
		}
		return g.guard(ctx, rec)
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
	return CancelResult{Status: statusOut(rec.Status), Already: already}, nil
}

// firstGuard keeps the processors from starting a command from its
// issue's own message without reading it (the first delivery's fast
// path) once the command is about to be written by a cancel or a
// run-now: see guard.
type firstGuard struct {
	c      *Client
	r      *read.Reader
	marked bool
}

// guard is called with the loaded command rec before a cancel or run-now
// writes it. When a processor could still start rec from its issue's own
// message without reading it (fastPathUntil), it marks the command's
// queue's control row (one upsert, once), tells this process's
// processors at once and, on a store that processors of other processes
// share, waits until every processor has read the control rows since —
// at most ControlInterval, and only as long as such a start could come
// before (a scheduled command due later than that needs no wait: a
// processor starts a command only on control rows read less than
// ControlInterval ago).
func (g *firstGuard) guard(ctx context.Context, rec *record.Record) error {
	c := g.c
	if g.marked {
		return nil
	}
	until, earliest, young := c.fastPathUntil(rec)
	if !young {
		return nil
	}
	// The mark comes first: a processor that starts (or reads the
	// control rows) after it sees it; those of this process that run
	// already are told at once.
	if _, err := g.r.MarkCancelling(ctx, rec.Queue); err != nil {
		return err
	}
	g.marked = true
	for _, p := range processor.Local(c.st) {
		p.Cancelling(rec.ID)
	}
	if storage.IsExclusive(c.st) {
		return nil // no processor of another process to wait for
	}
	// Every processor that may start the command from its message
	// without reading it reads the control rows at least once per
	// ControlInterval: after that long, each has seen the mark.
	all := c.now().Add(c.controlInterval() + controlMargin)
	if !earliest.Before(all) {
		return nil // it cannot start before every processor knows
	}
	if all.Before(until) {
		until = all
	}
	if d := until.Sub(c.now()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("cmdq: command %s: waiting for the processors to learn of the change (at most %s): %w", rec.ID, c.controlInterval(), ctx.Err())
		}
	}
	return nil
}

// controlMargin is added to a cancel's wait for the processors' reads of
// the control rows (100 ms).
const controlMargin = 100 * time.Millisecond

// controlInterval is the processors' ControlInterval as this Client
// assumes it.
func (c *Client) controlInterval() time.Duration {
	return cmp.Or(c.tune.ControlInterval, model.ControlInterval)
}

// fastPathUntil reports whether a processor could still start command rec
// from its issue's own message without reading it (pending, never
// started, its age — counted from its run-at time when it was scheduled,
// else from its issue — within the fast path's limit for its type's
// lease, with the clock skew a processor allows and as much again for
// this machine's), until when at most, and the earliest such a start
// could come (its run-at time less the skew; now for a command due). For
// a type this Client does not know the lease is unknown: young, until the
// processors have read the control rows.
func (c *Client) fastPathUntil(rec *record.Record) (until, earliest time.Time, young bool) {
	if rec.Status.State != model.StatePending || rec.Attempts != 0 {
		return time.Time{}, time.Time{}, false
	}
	now := c.now()
	ready, earliest := rec.CreatedAt, now
	if rec.Status.RunAt.After(ready) {
		ready = rec.Status.RunAt
		if e := ready.Add(-processor.MaxClockSkew); e.After(now) {
			earliest = e
		}
	}
	def, ok := c.reg.Lookup(rec.Type)
	if !ok {
		limit := now.Add(c.controlInterval() + controlMargin)
		if l := ready.Add(model.DefaultLease); l.After(limit) {
			limit = l
		}
		return limit, earliest, true
	}
	until = ready.Add(processor.FastPathAge(cmp.Or(def.Lease, model.DefaultLease)) + 2*processor.MaxClockSkew)
	return until, earliest, now.Before(until)
}

// RunNow makes a scheduled or retrying command due now, for by (who, in
// the requeued event: "api:token:…", "cli:…", "ui:…"): a requeued event
// (By = by, RunAt = now; a retrying command's attempts count from 1
// again) and a fresh message on its queue, visible at once, which a
// processor of this Client starts at once and others at their next poll
// (within MaxPollInterval). The command's old message is deleted without
// running when it shows up (the command is started or ended by then), or,
// should it come first, claims the command as the fresh one would: the
// handler runs once. It returns the command's status after it (State
// pending).
//
// A command that is not waiting for its time — pending without a run-at
// time, running, ended, or due within MaxClockSkew (2 s) anyway — gives
// an error wrapping ErrNotWaiting; an unknown ID, ErrNotFound. If the
// fresh message cannot be enqueued, the command is due now and marked for
// the reconciler, and the error wraps ErrEnqueueFailed (its old message
// still comes at its old time).
//
// Cost: 1 point read + 1 batch + 1 enqueue. A scheduled command's issue
// message could start it without reading it when it comes due (the first
// delivery's fast path): RunNow then first marks its queue's control row
// (1 upsert), as Cancel does, and on Azure waits for the processors to
// read it only when the command was due within ControlInterval (9 s)
// anyway. See docs/lifecycle.md, "Run now".
func (c *Client) RunNow(ctx context.Context, id, by string) (Status, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return Status{}, err
	}
	g := &firstGuard{c: c, r: r}
	rec, err := r.RunNow(ctx, id, by, g.guard)
	if rec == nil {
		return Status{}, err
	}
	return statusOut(rec.Status.AsOf(c.now())), err
}

// Control: cancelling commands and pausing queues (docs/lifecycle.md,
// "Cancelling" and "Paused queues").

// CancelResult is the outcome of cancelling a command (Client.Cancel).
type CancelResult struct {
	// Status is the command's status after the cancel (State
	// StateCancelled).
	Status Status `json:"status"`
	// Already is true when the command was cancelled before: nothing was
	// written (the HTTP API answers 200 instead of 202).
	Already bool `json:"already,omitempty"`
}

// QueueInfo is one logical queue as an operator sees it (Client.ListQueues,
// GET /v1/queues): its approximate depth and whether it is paused.
type QueueInfo struct {
	// Name is the logical queue name (such as "commands").
	Name string `json:"name"`
	// Depth is the approximate number of messages on the queue, visible or
	// not (storage.Queue.ApproximateCount); -1 when it could not be read.
	Depth int `json:"depth"`
	// Paused is true while the queue is paused: no processor starts its
	// commands (issuing into it still works).
	Paused bool `json:"paused"`
	// Since is when the queue was last paused or resumed (UTC; zero when
	// it never was).
	Since time.Time `json:"since,omitzero"`
	// By is who last paused or resumed it ("" when nobody did).
	By string `json:"by,omitempty"`
}

// ControlInterval is the longest a processor starts commands on what it
// last read of its queues' control rows (pause state, recent cancels): 9
// s. A processor reads them (one query for every queue) before it starts a
// command when its last read is older, so no processor starts a command of
// a paused queue later than 10 s after the pause was stored, and a busy
// processor reads them about once per ControlInterval; an idle one never
// (docs/processor.md, "Paused queues").
const ControlInterval = model.ControlInterval
