package cmdq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// sleepUntil waits until t: what a test observes at a point in time
// (not a synchronisation).
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// TestScheduledDelay: a command issued with a delay of 3 s is scheduled
// (its status carries runAt, read by this Client and by another process)
// until then, and its handler starts after runAt, never before: the
// started event's time and the handler's own clock are at or after it.
func TestScheduledDelay(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newTuned(t, s.st, s.prefix, fast(), tuning.Switches{})
		starts := recordStarts(t, c)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		res, err := c.Issue(ctx, greet{Name: "later"}, cmdq.After(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		sleepUntil(before.Add(time.Second))
		st, err := c.Get(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != cmdq.StateScheduled {
			t.Fatalf("at 1 s the command is %s, want scheduled", st.State)
		}
		if d := st.RunAt.Sub(st.CreatedAt); d < 3*time.Second-time.Millisecond || d > 3*time.Second+time.Millisecond {
			t.Fatalf("runAt %s is %s after createdAt %s, want 3s", st.RunAt, d, st.CreatedAt)
		}
		other := newTuned(t, otherProcess(t, s), s.prefix, cmdq.Config{}, tuning.Switches{})
		if ost, err := other.Get(ctx, res.ID); err != nil || ost.State != cmdq.StateScheduled || !ost.RunAt.Equal(st.RunAt) {
			t.Fatalf("another process reads %+v %v, want scheduled with runAt %s", ost, err, st.RunAt)
		}
		page, err := c.ListCommands(ctx, cmdq.CommandQuery{State: cmdq.StateScheduled})
		if err != nil || len(page.Commands) != 1 || page.Commands[0].ID != res.ID {
			t.Fatalf("listing scheduled commands: %+v %v, want the one", page.Commands, err)
		}
		done, err := c.Wait(ctx, res.ID)
		if err != nil || done.State != cmdq.StateCompleted {
			t.Fatalf("wait: %+v %v", done, err)
		}
		if !done.RunAt.Equal(st.RunAt) {
			t.Fatalf("the completed status has runAt %s, want %s", done.RunAt, st.RunAt)
		}
		evs, err := c.Events(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if evs[0].Kind != cmdq.EventCreated || !evs[0].RunAt.Equal(st.RunAt) {
			t.Fatalf("created event %+v, want runAt %s", evs[0], st.RunAt)
		}
		for _, ev := range evs {
			if ev.Kind == cmdq.EventStarted && ev.Time.Before(st.RunAt) {
				t.Fatalf("started at %s, before runAt %s", ev.Time, st.RunAt)
			}
		}
		got := starts.of(res.ID)
		if len(got) != 1 || got[0].Before(st.RunAt) {
			t.Fatalf("the handler began at %v, want once, at or after %s", got, st.RunAt)
		}
	})
}

// TestScheduledHop: a command due later than the queue's longest
// visibility delay hops: with the horizon shortened to 3 s (the 7 days
// of a real queue), a command due in 8 s (about 19 days) shows up at 3 s,
// is put back (it is due in more than the 2 s a message is held for) and
// shows up again at 6 s or later, due in at most 2 s: one hop
// (Stats.Hops) whenever the first delivery comes before 6 s (a loaded
// machine's queue may be seconds late), then held until its time, and
// starts at or after its runAt as attempt 1, from what its issue's
// message carries (no read: the fast path).
func TestScheduledHop(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newTuned(t, s.st, s.prefix, fast(), tuning.Switches{HopHorizon: 3 * time.Second})
		starts := recordStarts(t, c)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, greet{Name: "nineteen days"}, cmdq.After(8*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		done, err := c.Wait(ctx, res.ID)
		if err != nil || done.State != cmdq.StateCompleted || done.Attempts != 1 {
			t.Fatalf("wait: %+v %v, want completed in attempt 1", done, err)
		}
		if got := starts.of(res.ID); len(got) != 1 || got[0].Before(done.RunAt) {
			t.Fatalf("the handler began at %v, want once, at or after %s", got, done.RunAt)
		}
		stats := c.Stats()
		if stats.Hops != 1 {
			t.Fatalf("%d hops, want 1", stats.Hops)
		}
		if stats.FastPath != 1 {
			t.Fatalf("fast path %d, want 1 (the hop keeps what the issue's message carries)", stats.FastPath)
		}
		evs, err := c.Events(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if k := kinds(evs); len(k) != 3 || k[1] != cmdq.EventStarted || k[2] != cmdq.EventCompleted {
			t.Fatalf("events %v, want created, started, completed (a hop writes nothing)", k)
		}
	})
}

// TestScheduledBadInput: a run-at time more than 2 years ahead, a negative
// delay, and a run-at time together with a delay are refused with
// ErrInvalidSchedule, and nothing is stored.
func TestScheduledBadInput(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newTuned(t, s.st, s.prefix, fast(), tuning.Switches{})
		cases := []struct {
			name string
			raw  cmdq.Raw
		}{
			{"3 years ahead", cmdq.Raw{Type: "greet", RunAt: time.Now().Add(3 * 365 * 24 * time.Hour)}},
			{"negative delay", cmdq.Raw{Type: "greet", Delay: -time.Second}},
			{"both", cmdq.Raw{Type: "greet", RunAt: time.Now().Add(time.Hour), Delay: time.Hour}},
			{"delay over 2 years", cmdq.Raw{Type: "greet", Delay: 3 * 365 * 24 * time.Hour}},
		}
		for _, tc := range cases {
			tc.raw.ID = cmdq.NewID()
			if _, err := c.IssueRaw(ctx, tc.raw); !errors.Is(err, cmdq.ErrInvalidSchedule) {
				t.Fatalf("%s: %v, want ErrInvalidSchedule", tc.name, err)
			}
			if _, err := c.Get(ctx, tc.raw.ID); !errors.Is(err, cmdq.ErrNotFound) {
				t.Fatalf("%s: the command was stored (%v)", tc.name, err)
			}
		}
		if _, err := c.Issue(ctx, greet{}, cmdq.After(-time.Minute)); !errors.Is(err, cmdq.ErrInvalidSchedule) {
			t.Fatalf("After(-1m): %v, want ErrInvalidSchedule", err)
		}
		// A time in the past is due at once (its runAt kept).
		past := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
		res, err := c.Issue(ctx, greet{}, cmdq.At(past))
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.Get(ctx, res.ID); err != nil || st.State != cmdq.StatePending || !st.RunAt.Equal(past) {
			t.Fatalf("a command at a past time: %+v %v, want pending with runAt %s", st, err, past)
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

// TestSelfWake: a processor that polls at most every minute (its poll
// interval starts at 30 s) still starts a retry when its delay ends and a
// scheduled command issued by its own Client when it is due: it wakes
// itself then, instead of waiting for its next poll.
func TestSelfWake(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.MinPollInterval, cfg.MaxPollInterval = 30*time.Second, time.Minute
		c := newTuned(t, s.st, s.prefix, cfg, tuning.Switches{})
		var calls atomic.Int64
		if err := cmdq.RegisterWith(c, func(ctx context.Context, g greet, run *cmdq.Attempt) error {
			if g.Name == "fail once" && run.Number() == 1 {
				calls.Add(1)
				return errors.New("once")
			}
			return nil
		}, cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: time.Second, Jitter: cmdq.NoJitter}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		// The processor's first poll found nothing: its next is 30 s away.
		waitUntil(t, time.Minute, "the first poll", func() bool { return c.Health().State == cmdq.ProcessorIdle })
		res, err := c.Issue(ctx, greet{Name: "fail once"})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if st, err := c.Wait(wctx, res.ID); err != nil || st.State != cmdq.StateCompleted || st.Attempts != 2 {
			t.Fatalf("the retried command: %+v %v, want completed in attempt 2 well before the next poll", st, err)
		}
		sched, err := c.Issue(ctx, greet{Name: "in 2 s"}, cmdq.After(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.Wait(wctx, sched.ID); err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("the scheduled command: %+v %v, want completed well before the next poll", st, err)
		}
	})
}

// TestScheduledCost: scheduled commands cost what plain ones do: the
// delay rides on the issue's enqueue, and each runs from what its issue's
// message carries (no point read): the calls are the issue's batch and
// enqueue, the dequeues, and each one's final batch and delete.
func TestScheduledCost(t *testing.T) {
	ctx := ctxT(t)
	env := testenv.Open(t, "embedded")
	counting := env.Store // counts every call (and takes the two-call path: issue batch, then enqueue)
	c := newTuned(t, counting, env.Prefix, fast(), tuning.Switches{})
	starts := recordStarts(t, c)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cmds := make([]cmdq.Command, 32)
	for i := range cmds {
		cmds[i] = cmdq.WithOptions(greet{Name: "batch"}, cmdq.After(time.Second))
	}
	counting.Reset()
	results, err := c.IssueMany(ctx, cmds...)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "32 completions", func() bool { return c.Stats().Completed == 32 })
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	counts := counting.Counts()
	if counts["Get"] != 0 {
		t.Fatalf("%d point reads (%s), want none: every scheduled command runs from its message", counts["Get"], counting)
	}
	if fp := c.Stats().FastPath; fp != 32 {
		t.Fatalf("fast path %d of 32", fp)
	}
	for _, r := range results {
		if got := starts.of(r.ID); len(got) != 1 {
			t.Fatalf("%s ran %d times", r.ID, len(got))
		}
	}
	t.Logf("32 scheduled commands: %s", counting)
}
