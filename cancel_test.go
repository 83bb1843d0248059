package cmdq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
)

// TestCancelPending: a pending command that is cancelled becomes
// cancelled (a cancelled event by who cancelled it) and never runs: when a
// processor starts, it deletes the command's message without running the
// handler. A second cancel changes nothing (Already); a completed command
// cannot be cancelled (ErrNotCancellable), an unknown one is not found.
func TestCancelPending(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newTuned(t, s.st, s.prefix, fast(), tuning.Switches{})
		var ran atomic.Int64
		if err := cmdq.Register(c, func(ctx context.Context, g greet, _ *cmdq.Attempt) error {
			ran.Add(1)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, greet{Name: "never"})
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Cancel(ctx, res.ID, "test:alice")
		if err != nil {
			t.Fatal(err)
		}
		if got.Already || got.Status.State != cmdq.StateCancelled {
			t.Fatalf("cancel: %+v, want cancelled, not already", got)
		}
		again, err := c.Cancel(ctx, res.ID, "test:bob")
		if err != nil || !again.Already || again.Status.State != cmdq.StateCancelled {
			t.Fatalf("second cancel: %+v %v, want already cancelled", again, err)
		}
		evs, err := c.Events(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if k := kinds(evs); len(k) != 2 || k[1] != cmdq.EventCancelled || evs[1].By != "test:alice" {
			t.Fatalf("events %v (by %q), want created, cancelled by test:alice", k, evs[len(evs)-1].By)
		}

		// The processor finds the message and deletes it unrun; a command
		// issued after it runs (so the queue was polled past the cancelled
		// one's message).
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		q, err := c.StorageQueue(ctx, cmdq.DefaultQueue)
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, time.Minute, "the cancelled command's message is deleted", func() bool {
			n, err := q.ApproximateCount(ctx)
			return err == nil && n == 0
		})
		done, err := c.Issue(ctx, greet{Name: "after"})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.Wait(ctx, done.ID); err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("the next command: %+v %v", st, err)
		}
		if n := ran.Load(); n != 1 {
			t.Fatalf("the handler ran %d times, want once (the cancelled command never)", n)
		}
		if _, err := c.Cancel(ctx, done.ID, "test"); !errors.Is(err, cmdq.ErrNotCancellable) {
			t.Fatalf("cancel of a completed command: %v, want ErrNotCancellable", err)
		}
		if _, err := c.Cancel(ctx, cmdq.NewID(), "test"); !errors.Is(err, cmdq.ErrNotFound) {
			t.Fatalf("cancel of an unknown command: %v, want ErrNotFound", err)
		}
		if st, err := c.Get(ctx, res.ID); err != nil || st.State != cmdq.StateCancelled {
			t.Fatalf("the cancelled command is %+v %v", st, err)
		}
	})
}

// TestCancelRunningInProcess: a command whose handler runs in the
// cancelling Client's process has its handler's context cancelled at once
// (cause ErrCancelled, ErrSuperseded); whatever the handler returns
// afterwards, the command stays cancelled and nothing more is recorded.
func TestCancelRunningInProcess(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newTuned(t, s.st, s.prefix, fast(), tuning.Switches{})
		started, cause, release := make(chan struct{}, 1), make(chan error, 1), make(chan struct{})
		if err := cmdq.Register(c, func(ctx context.Context, _ greet, _ *cmdq.Attempt) error {
			started <- struct{}{}
			<-ctx.Done()
			cause <- context.Cause(ctx)
			<-release
			return nil // a handler that claims success after its cancel
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, greet{Name: "runner"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, started, "the handler starts")
		if _, err := c.Cancel(ctx, res.ID, "test"); err != nil {
			t.Fatal(err)
		}
		got := waitFor(t, cause, "the handler's context ends")
		if !errors.Is(got, cmdq.ErrCancelled) || !errors.Is(got, cmdq.ErrSuperseded) {
			t.Fatalf("the handler's context cause is %v, want ErrCancelled and ErrSuperseded", got)
		}
		close(release)
		st, err := c.Wait(ctx, res.ID)
		if err != nil || st.State != cmdq.StateCancelled {
			t.Fatalf("status %+v %v, want cancelled", st, err)
		}
		waitUntil(t, time.Minute, "the handler's message is deleted", func() bool { return c.Health().InFlight == 0 })
		evs, err := c.Events(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Kind == cmdq.EventCompleted {
				t.Fatalf("a completed event after the cancel: %v", kinds(evs))
			}
		}
	})
}

// TestCancelRaceDecidedByETag: a cancel and a completion race on the
// command row's ETag, in both orders, with the handler blocked on a
// channel and the processor in another "process" (a store handle that
// only meets the cancelling Client through storage). Cancel stored first:
// the command stays cancelled although its handler then returns success
// (its completion's conditional write conflicts, and nothing more is
// recorded). Completion stored first (the handler is released while the
// cancel waits between its read and its write): the cancel's conditional
// write conflicts and Cancel fails with ErrNotCancellable; the command
// stays completed.
func TestCancelRaceDecidedByETag(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.StartedWriteDelay = time.Hour // no started write of its own: the final batch is the first write
		worker := newTuned(t, s.st, s.prefix, cfg, tuning.Switches{})
		started := make(chan string, 2)
		releases := map[string]chan struct{}{"cancel-first": make(chan struct{}), "complete-first": make(chan struct{})}
		if err := cmdq.Register(worker, func(ctx context.Context, g greet, _ *cmdq.Attempt) error {
			started <- g.Name
			<-releases[g.Name] // ignores its context: only the ETag decides
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := worker.Start(ctx); err != nil {
			t.Fatal(err)
		}

		// Cancel first.
		var release chan struct{}
		var completeFirst string
		canceller := newTuned(t, otherProcess(t, s), s.prefix, fast(), tuning.Switches{BeforeCancelWrite: func(string) {
			if release != nil {
				close(release) // the handler returns while the cancel is between its read and its write
				waitUntil(t, time.Minute, "the completion is stored", func() bool {
					st, err := worker.Get(ctx, completeFirst)
					return err == nil && st.State == cmdq.StateCompleted
				})
			}
		}})
		first, err := worker.Issue(ctx, greet{Name: "cancel-first"})
		if err != nil {
			t.Fatal(err)
		}
		if name := waitFor(t, started, "the first handler starts"); name != "cancel-first" {
			t.Fatalf("started %s", name)
		}
		if _, err := canceller.Cancel(ctx, first.ID, "test"); err != nil {
			t.Fatal(err)
		}
		close(releases["cancel-first"])
		if st, err := worker.Wait(ctx, first.ID); err != nil || st.State != cmdq.StateCancelled {
			t.Fatalf("cancel first: %+v %v, want cancelled", st, err)
		}
		waitUntil(t, time.Minute, "the first handler's attempt ends", func() bool { return worker.Health().InFlight == 0 })
		if evs, _ := worker.Events(ctx, first.ID); hasKind(evs, cmdq.EventCompleted) {
			t.Fatalf("cancel first: a completed event was written: %v", kinds(evs))
		}

		// Completion first.
		second, err := worker.Issue(ctx, greet{Name: "complete-first"})
		if err != nil {
			t.Fatal(err)
		}
		completeFirst = second.ID
		if name := waitFor(t, started, "the second handler starts"); name != "complete-first" {
			t.Fatalf("started %s", name)
		}
		release = releases["complete-first"]
		if _, err := canceller.Cancel(ctx, second.ID, "test"); !errors.Is(err, cmdq.ErrNotCancellable) {
			t.Fatalf("complete first: cancel returned %v, want ErrNotCancellable", err)
		}
		if st, err := worker.Get(ctx, second.ID); err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("complete first: %+v %v, want completed", st, err)
		}
		if evs, _ := worker.Events(ctx, second.ID); hasKind(evs, cmdq.EventCancelled) {
			t.Fatalf("complete first: a cancelled event was written: %v", kinds(evs))
		}
	})
}

func hasKind(evs []cmdq.Event, k cmdq.EventKind) bool {
	for _, e := range evs {
		if e.Kind == k {
			return true
		}
	}
	return false
}

// TestCancelRunningElsewhere: a command whose handler runs in another
// process (another Client on its own store handle: on Azure two Clients
// on one Azurite account) has its handler's context cancelled by its next
// lease renewal, which reads the command row: the handler's started event
// is written first (the renewal's read, not a conflict of the lazy
// started write, is what finds the cancel).
func TestCancelRunningElsewhere(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.StartedWriteDelay = 10 * time.Millisecond
		worker := newTuned(t, s.st, s.prefix, cfg, tuning.Switches{})
		started, cause := make(chan struct{}, 1), make(chan error, 1)
		if err := cmdq.RegisterWith(worker, func(ctx context.Context, _ greet, _ *cmdq.Attempt) error {
			started <- struct{}{}
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		}, cmdq.HandlerOptions{Lease: 6 * time.Second}); err != nil { // renewals every 3 s find the cancel; one a loaded Azurite answers late does not end the lease

			t.Fatal(err)
		}
		if err := worker.Start(ctx); err != nil {
			t.Fatal(err)
		}
		canceller := newTuned(t, otherProcess(t, s), s.prefix, fast(), tuning.Switches{})
		res, err := worker.Issue(ctx, greet{Name: "elsewhere"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, started, "the handler starts")
		waitUntil(t, time.Minute, "the started event is stored", func() bool {
			st, err := canceller.Get(ctx, res.ID)
			return err == nil && st.State == cmdq.StateRunning
		})
		if _, err := canceller.Cancel(ctx, res.ID, "test"); err != nil {
			t.Fatal(err)
		}
		got := waitFor(t, cause, "the handler's context ends")
		if !errors.Is(got, cmdq.ErrCancelled) {
			t.Fatalf("the handler's context cause is %v, want ErrCancelled", got)
		}
		if st, err := worker.Wait(ctx, res.ID); err != nil || st.State != cmdq.StateCancelled {
			t.Fatalf("status %+v %v, want cancelled", st, err)
		}
		waitUntil(t, time.Minute, "the handler's message is deleted", func() bool { return worker.Health().InFlight == 0 })
		evs, err := worker.Events(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if k := kinds(evs); len(k) != 3 || k[1] != cmdq.EventStarted || k[2] != cmdq.EventCancelled {
			t.Fatalf("events %v, want created, started, cancelled", k)
		}
	})
}

// TestRunNowScheduled: run-now of a scheduled command (from another
// process, as the HTTP API's server would be) makes it due at once: it
// completes long before its time, with a requeued event by who asked and
// runAt = when; its old message, when it shows up at the old time, is
// deleted without running (the handler runs once). Run-now of a command
// that is not waiting (pending, completed) is ErrNotWaiting, of an unknown
// one ErrNotFound.
func TestRunNowScheduled(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newTuned(t, s.st, s.prefix, fast(), tuning.Switches{})
		starts := recordStarts(t, c)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, greet{Name: "soon"}, cmdq.After(4*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		op := newTuned(t, otherProcess(t, s), s.prefix, cmdq.Config{}, tuning.Switches{})
		asked := time.Now()
		st, err := op.RunNow(ctx, res.ID, "test:ops")
		if err != nil {
			t.Fatal(err)
		}
		if st.State != cmdq.StatePending || st.RunAt.Before(asked.Add(-time.Second)) || st.RunAt.After(time.Now()) {
			t.Fatalf("after run-now: %+v, want pending, due now", st)
		}
		done, err := c.Wait(ctx, res.ID)
		if err != nil || done.State != cmdq.StateCompleted {
			t.Fatalf("wait: %+v %v", done, err)
		}
		evs, err := c.Events(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if k := kinds(evs); len(k) != 4 || k[1] != cmdq.EventRequeued || evs[1].By != "test:ops" || evs[1].RunAt.IsZero() {
			t.Fatalf("events %v (%+v), want created, requeued by test:ops with runAt, started, completed", k, evs[1])
		}
		if started := evs[2].Time; started.After(asked.Add(4 * time.Second)) {
			t.Fatalf("started at %s, not before its old time", started)
		}
		// The old message shows up at the old time and is deleted unrun.
		q, err := c.StorageQueue(ctx, cmdq.DefaultQueue)
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, time.Minute, "the old message is gone", func() bool {
			n, err := q.ApproximateCount(ctx)
			return err == nil && n == 0
		})
		if n := len(starts.of(res.ID)); n != 1 {
			t.Fatalf("the handler ran %d times, want once", n)
		}
		if _, err := op.RunNow(ctx, res.ID, "test"); !errors.Is(err, cmdq.ErrNotWaiting) {
			t.Fatalf("run-now of a completed command: %v, want ErrNotWaiting", err)
		}
		if _, err := op.RunNow(ctx, cmdq.NewID(), "test"); !errors.Is(err, cmdq.ErrNotFound) {
			t.Fatalf("run-now of an unknown command: %v, want ErrNotFound", err)
		}
		plain, err := op.IssueRaw(ctx, cmdq.Raw{Type: "greet", Params: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := op.RunNow(ctx, plain.ID, "test"); !errors.Is(err, cmdq.ErrNotWaiting) {
			t.Fatalf("run-now of a pending command: %v, want ErrNotWaiting", err)
		}
	})
}

// TestRunNowRetrying: a command whose first attempt failed waits an hour
// for its retry (retrying, runAt in an hour); run-now makes it due at
// once: it completes in attempt 1 of its requeue.
func TestRunNowRetrying(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newTuned(t, s.st, s.prefix, fast(), tuning.Switches{})
		var calls atomic.Int64
		if err := cmdq.RegisterWith(c, func(ctx context.Context, _ greet, run *cmdq.Attempt) error {
			if calls.Add(1) == 1 {
				return errors.New("not yet")
			}
			return nil
		}, cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: time.Hour, Max: time.Hour, Jitter: cmdq.NoJitter}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, greet{Name: "retry me"})
		if err != nil {
			t.Fatal(err)
		}
		var st cmdq.Status
		waitUntil(t, time.Minute, "the first attempt failed", func() bool {
			st, err = c.Get(ctx, res.ID)
			return err == nil && st.State == cmdq.StateRetrying
		})
		if d := time.Until(st.RunAt); d < 50*time.Minute || d > time.Hour {
			t.Fatalf("retrying with runAt %s (in %s), want in about an hour", st.RunAt, d)
		}
		if _, err := c.RunNow(ctx, res.ID, "test:ops"); err != nil {
			t.Fatal(err)
		}
		done, err := c.Wait(ctx, res.ID)
		if err != nil || done.State != cmdq.StateCompleted || done.Attempts != 1 {
			t.Fatalf("wait: %+v %v, want completed in attempt 1 after the requeue", done, err)
		}
		if n := calls.Load(); n != 2 {
			t.Fatalf("the handler ran %d times, want 2", n)
		}
	})
}

// TestCancelScheduled: a cancelled scheduled command never runs: its
// message is deleted when it shows up at its time.
func TestCancelScheduled(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newTuned(t, s.st, s.prefix, fast(), tuning.Switches{})
		starts := recordStarts(t, c)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, greet{Name: "never"}, cmdq.After(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		op := newTuned(t, otherProcess(t, s), s.prefix, cmdq.Config{}, tuning.Switches{})
		got, err := op.Cancel(ctx, res.ID, "test:ops")
		if err != nil || got.Status.State != cmdq.StateCancelled {
			t.Fatalf("cancel: %+v %v", got, err)
		}
		q, err := c.StorageQueue(ctx, cmdq.DefaultQueue)
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, time.Minute, "the cancelled command's message is gone", func() bool {
			n, err := q.ApproximateCount(ctx)
			return err == nil && n == 0
		})
		if n := len(starts.of(res.ID)); n != 0 {
			t.Fatalf("the cancelled command ran %d times", n)
		}
	})
}
