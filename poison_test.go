package cmdq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// TestRequeueWhilePoisonedAttemptEnds: a command requeued while the
// attempt that poisoned it is still ending (here its Observer is slow:
// the outcome is recorded, the message not yet deleted) starts at once.
// Before, the ending attempt still held the command, so the requeued
// message was taken for a second one and left hidden for a whole lease
// (seen beside a CPU hog, where the poisoned attempt's message delete
// came after the requeue).
func TestRequeueWhilePoisonedAttemptEnds(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		started := make(chan struct{})
		release := make(chan struct{})
		var blocked atomic.Bool
		cfg := fast()
		cfg.MinPollInterval, cfg.MaxPollInterval, cfg.PollJitter = time.Hour, time.Hour, -1
		cfg.Concurrency = 4
		cfg.Observers = []cmdq.Observer{cmdq.ObserverFunc(func(o cmdq.Observation) {
			if o.Kind == cmdq.ObservedPoisoned && blocked.CompareAndSwap(false, true) {
				// A slow observer: the poisoned attempt is not over until
				// the requeued command has started (or the test gave up).
				select {
				case <-started:
				case <-release:
				}
			}
		})}
		c := newClient(t, s, cfg)
		t.Cleanup(func() { close(release) })
		var runs atomic.Int32
		if err := cmdq.Register(c, func(ctx context.Context, cmd greet, run *cmdq.Attempt) error {
			if runs.Add(1) == 1 {
				return cmdq.Permanent(errors.New("not configured"))
			}
			close(started)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, greet{Name: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StatePoisoned {
			t.Fatalf("first attempt: %+v %v", st, err)
		}
		if err := c.Requeue(ctx, res.ID, "ops"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-time.After(20 * time.Second): // the lease is 30 s; the next poll an hour away
			t.Fatalf("the requeued command did not start while the poisoning attempt was ending (observer blocked: %v)", blocked.Load())
		}
		if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("after requeue: %+v %v", st, err)
		}
	})
}

// TestRequeueWakesProcessor: a requeued command starts at once, although
// the processor would not poll again for an hour, and although the
// poisoning attempt's failed event named a retry an hour ahead (the retry
// policy's delay, computed before the error turned out permanent): a
// requeue makes the command due now. Before that fix the requeued message
// was put back until the stale retry time (with the default policy 1 s
// after a first attempt, up to 5 minutes after later ones).
func TestRequeueWakesProcessor(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.MinPollInterval, cfg.MaxPollInterval, cfg.PollJitter = time.Hour, time.Hour, -1
		c := newClient(t, s, cfg)
		var fixed atomic.Bool
		started := make(chan time.Time, 4)
		if err := cmdq.RegisterWith(c, func(ctx context.Context, cmd greet, run *cmdq.Attempt) error {
			started <- time.Now()
			if !fixed.Load() {
				return cmdq.Permanent(errors.New("not configured"))
			}
			return nil
		}, cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: time.Hour, Max: time.Hour, Jitter: cmdq.NoJitter}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, greet{Name: "x"}) // the issue wakes the processor
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StatePoisoned {
			t.Fatalf("first attempt: %+v %v", st, err)
		}
		<-started
		fixed.Store(true)
		requeued := time.Now()
		if err := c.Requeue(ctx, res.ID, "ops"); err != nil {
			t.Fatal(err)
		}
		if st, err := c.Get(ctx, res.ID); err != nil || st.RunAt.After(time.Now()) {
			t.Fatalf("after the requeue the command is due at %s (%v), want now: %+v", st.RunAt, err, st)
		}
		select {
		case at := <-started:
			t.Logf("%s: requeued command started %s after the requeue", s.driver, at.Sub(requeued))
		case <-time.After(30 * time.Second): // the next poll, and the stale retry time, are an hour away
			t.Fatal("the requeued command did not start: the requeue did not wake the processor, or its message was put back until the stale retry time")
		}
		if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("after requeue: %+v %v", st, err)
		}
		evs, _ := c.Events(ctx, res.ID)
		for _, e := range evs {
			if e.Kind == cmdq.EventRequeued && e.By != "ops" {
				t.Fatalf("requeued by %q, want ops", e.By)
			}
		}
	})
}

// TestFinalStatusHasNoRunAt: a poisoned command (a permanent error, and
// the last attempt the ceiling allows failing) has no runAt in its status
// and its poisoning attempt's failed event names no retry: none comes.
// Before, both carried the retry delay computed before the error was
// known to poison, and the CLI showed it as "due". A completed scheduled
// command's status has none either (its run-at time stays in its created
// event).
func TestFinalStatusHasNoRunAt(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.PoisonCeiling = 1
		c := newClient(t, s, cfg)
		if err := cmdq.Register(c, func(ctx context.Context, cmd greet, run *cmdq.Attempt) error {
			switch cmd.Name {
			case "permanent":
				return cmdq.Permanent(errors.New("not configured"))
			case "spent":
				return errors.New("try again")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"permanent", "spent", "scheduled"} {
			var opts []cmdq.IssueOption
			if name == "scheduled" {
				opts = append(opts, cmdq.After(50*time.Millisecond))
			}
			res, err := c.Issue(ctx, greet{Name: name}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			st, err := c.Wait(ctx, res.ID)
			if err != nil || !st.State.Final() {
				t.Fatalf("%s: %+v %v", name, st, err)
			}
			if !st.RunAt.IsZero() {
				t.Errorf("%s: final (%s) status has runAt %s", name, st.State, st.RunAt)
			}
			if got, err := c.Get(ctx, res.ID); err != nil || !got.RunAt.IsZero() {
				t.Errorf("%s: Get: runAt %s %v", name, got.RunAt, err)
			}
			evs, err := c.Events(ctx, res.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				if e.Kind == cmdq.EventFailed && !e.RunAt.IsZero() {
					t.Errorf("%s: the poisoning attempt's failed event names a retry at %s", name, e.RunAt)
				}
			}
		}
	})
}
