package cmdq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
)

// TestRunFor: a time-boxed run through the client returns in time with what
// it did.
func TestRunFor(t *testing.T) {
	t.Parallel()
	s := openStore(t, "embedded")
	ctx := ctxT(t)
	c := newClient(t, s, fast())
	if _, err := c.RunFor(ctx, time.Second); !errors.Is(err, cmdq.ErrNoHandlers) {
		t.Fatalf("RunFor without handlers: %v", err)
	}
	if err := cmdq.Register(c, func(context.Context, greet, *cmdq.Attempt) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.Issue(ctx, greet{Name: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	sum, err := c.RunFor(ctx, 2*time.Second)
	if err != nil || sum.Completed != 3 || time.Since(start) > 2*time.Second {
		t.Fatalf("RunFor: %+v %v after %s", sum, err, time.Since(start))
	}
	if st := c.Stats(); st.Completed != 3 || st.Running {
		t.Fatalf("stats after RunFor %+v", st)
	}
}

// TestDeleteStorage: the prefix's queues and tables go, another prefix's
// stay, and the client works again afterwards.
func TestDeleteStorage(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newClient(t, s, cmdq.Config{})
		res, err := c.Issue(ctx, resize{URL: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Issue(ctx, greet{Name: "y"}); err != nil {
			t.Fatal(err)
		}
		other, err := cmdq.New(s.st, cmdq.Config{Prefix: s.prefix + "x"}) // shares the "<prefix>" start
		if err != nil {
			t.Fatal(err)
		}
		kept, err := other.Issue(ctx, greet{Name: "z"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteStorage(ctx); err != nil {
			t.Fatal(err)
		}
		if qs, err := s.st.Queues(ctx, s.prefix+"-"); err != nil || len(qs) != 0 {
			t.Fatalf("queues left %q %v", qs, err)
		}
		ts, err := s.st.Tables(ctx, s.prefix)
		dayTable := s.prefix + "xcommands" + time.Now().UTC().Format("20060102") // the other prefix's day table
		if err != nil || !slices.Equal(ts, []string{s.prefix + "xcommands", dayTable, s.prefix + "xpoison"}) {
			t.Fatalf("tables left %q %v; want only the other prefix's", ts, err)
		}
		if _, err := other.Get(ctx, kept.ID); err != nil {
			t.Fatalf("the other prefix's command: %v", err)
		}
		if s.driver == "azure" {
			return // Azure refuses the deleted names for about 30 s
		}
		if _, err := c.Get(ctx, res.ID); !errors.Is(err, cmdq.ErrNotFound) {
			t.Fatalf("Get after DeleteStorage: %v", err)
		}
		if _, err := c.Issue(ctx, greet{Name: "again"}); err != nil {
			t.Fatalf("Issue after DeleteStorage: %v", err)
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
