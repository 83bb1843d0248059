package enqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
)

// RunNow makes command id, scheduled or retrying, due now, for by
// (docs/lifecycle.md, "Run now"): it loads the command (one point read)
// and, when it waits for its time — pending with a run-at time, or
// retrying with its next attempt's due time, more than
// model.MaxClockSkew ahead by this Enqueuer's clock — appends a
// requeued event (By = by, RunAt = now) and the projection pending, due
// now, in one batch conditional on the ETag it loaded, then enqueues a
// fresh message, visible at once, through the one enqueue path (which
// wakes an in-process processor). Cost: 1 point read + 1 batch + 1
// enqueue (+ what prepare does).
//
// Why that is safe under the duplicate-message rules: no delivery of the
// command's old message has started a handler (every delivery checks the
// due time before it starts: the old message's own, still ahead), so the
// fresh message's delivery is the only one that can; it finds the
// command pending after a requeued event and claims it with its started
// event before running (a conditional write), as does any delivery of
// the old message that comes while it is pending. The old message, when
// it shows up, finds the command started or ended and is deleted without
// running. The one exception is the issue's own message of a scheduled
// command, which may start it without reading it when it comes due (the
// first delivery's fast path): prepare, called with the loaded command
// before each write, is where the caller keeps that from happening (the
// queue's control row: cmdq.Client.RunNow).
//
// A command that is not waiting gives an error wrapping
// model.ErrNotWaiting (the command as loaded in rec); an unknown ID,
// model.ErrNotFound. A failed enqueue marks the command for the
// reconciler and gives an error wrapping model.ErrEnqueueFailed, with
// rec: the requeue is recorded and the command runs (the reconciler
// enqueues it, or its old message comes at its old time).
func (e *Enqueuer) RunNow(ctx context.Context, id, by string, prepare func(ctx context.Context, rec *record.Record) error) (*record.Record, error) {
	s := e.rec
	rec, err := s.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		if err := Waiting(rec, s.Now()); err != nil {
			return rec, err
		}
		was := rec.Status.AsOf(s.Now()).State
		if prepare != nil {
			if err := prepare(ctx, rec); err != nil {
				return nil, err
			}
		}
		now := layout.Millis(s.Now())
		err = s.Append(ctx, rec, model.Event{Kind: model.EventRequeued, By: by, RunAt: now,
			Note: fmt.Sprintf("run now: was %s, due %s", was, rec.Status.RunAt.Format(time.RFC3339))})
		if err == nil {
			break
		}
		var ce *record.ConflictError
		if !errors.As(err, &ce) || ce.Current == nil || try >= 4 {
			return nil, fmt.Errorf("cmdq: run command %s now: %w", id, err)
		}
		rec = ce.Current
	}
	if err := e.enqueue(ctx, layout.Envelope{ID: rec.ID, Type: rec.Type}, rec.Queue, 0); err != nil {
		if merr := s.MarkUnqueued(ctx, rec.ID, rec.Queue); merr != nil {
			err = errors.Join(err, merr)
		}
		return rec, fmt.Errorf("%w: command %s is due now, but its message could not be queued (the reconciler queues it; its old message still comes at its old time): %w", model.ErrEnqueueFailed, id, err)
	}
	return rec, nil
}

// Waiting returns nil when command rec waits for its time at now (RunNow
// may make it due now): pending with a run-at time, or retrying with its
// next attempt's due time, more than model.MaxClockSkew after now.
// Otherwise an error wrapping model.ErrNotWaiting that says why.
func Waiting(rec *record.Record, now time.Time) error {
	st := rec.Status
	switch {
	case st.State != model.StatePending && st.State != model.StateRetrying:
		return fmt.Errorf("%w: command %s is %s; only a scheduled or retrying command can be made due now", model.ErrNotWaiting, rec.ID, st.AsOf(now).State)
	case st.RunAt.IsZero() && st.State == model.StatePending:
		return fmt.Errorf("%w: command %s is pending (not scheduled): it starts as soon as a processor takes it", model.ErrNotWaiting, rec.ID)
	case st.RunAt.IsZero():
		return fmt.Errorf("%w: command %s is retrying, but when its next attempt is due is not recorded (it failed before this version of cmdq); it starts when its retry delay ends", model.ErrNotWaiting, rec.ID)
	case !st.RunAt.After(now.Add(model.MaxClockSkew)):
		return fmt.Errorf("%w: command %s is %s and due at %s, within %s: it starts as soon as a processor takes it", model.ErrNotWaiting, rec.ID, st.AsOf(now).State, st.RunAt.Format(time.RFC3339Nano), model.MaxClockSkew)
	}
	return nil
}

// Due reports whether a delivery may start command rec at now: it is not
// pending or retrying with a due time after now (a scheduled command, a
// retry whose delay has not ended). See docs/lifecycle.md, "Scheduled
// commands".
func Due(st model.Status, now time.Time) bool {
	if st.State != model.StatePending && st.State != model.StateRetrying {
		return true
	}
	return !st.RunAt.After(now)
}
