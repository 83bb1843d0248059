package cmdq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// waitingOf returns the reason command id waits, as Get says it.
func waitingOf(t *testing.T, c *cmdq.Client, id string) *cmdq.Waiting {
	t.Helper()
	st, err := c.Get(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return st.Waiting
}

func wantWaiting(t *testing.T, what string, got *cmdq.Waiting, reason cmdq.WaitReason) {
	t.Helper()
	if got == nil || got.Reason != reason {
		t.Fatalf("%s: waiting %+v, want %s", what, got, reason)
	}
}

// TestWaitingReasons: a command that is neither running nor final says
// why it waits: scheduled until its time, retrying at its next attempt,
// its queue paused (by whom, since when), no processor polling its queue,
// every processor of its queue busy (a slot), or due; a running or final
// one says nothing.
func TestWaitingReasons(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		front := newClient(t, s, cmdq.Config{}) // never started: no processor

		// No processor polls the queue.
		r, err := front.Issue(ctx, greet{Name: "alone"})
		if err != nil {
			t.Fatal(err)
		}
		wantWaiting(t, "no processor", waitingOf(t, front, r.ID), cmdq.WaitNoProcessor)

		// Scheduled.
		at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		r, err = front.Issue(ctx, greet{Name: "later"}, cmdq.At(at))
		if err != nil {
			t.Fatal(err)
		}
		w := waitingOf(t, front, r.ID)
		wantWaiting(t, "scheduled", w, cmdq.WaitScheduled)
		if !w.Until.Equal(at) {
			t.Fatalf("scheduled until %s, want %s", w.Until, at)
		}

		// Paused.
		if _, err := front.PauseQueue(ctx, cmdq.DefaultQueue, "ops:alice"); err != nil {
			t.Fatal(err)
		}
		w = waitingOf(t, front, r.ID)
		wantWaiting(t, "scheduled in a paused queue", w, cmdq.WaitScheduled) // its time comes first
		r, err = front.Issue(ctx, greet{Name: "paused"})
		if err != nil {
			t.Fatal(err)
		}
		w = waitingOf(t, front, r.ID)
		wantWaiting(t, "paused", w, cmdq.WaitPaused)
		if w.By != "ops:alice" || w.Since.IsZero() {
			t.Fatalf("paused %+v, want by ops:alice with a time", w)
		}
		if _, err := front.ResumeQueue(ctx, cmdq.DefaultQueue, "ops:alice"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWaitingForASlotOrDue: with a processor of one slot busy, a command
// waits for a slot; with an idle processor that has not polled yet, it is
// due; running and completed commands say nothing; a retrying one says
// when its next attempt is due.
func TestWaitingForASlotOrDue(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		// A processor in "another process" that polls once a minute: what
		// is issued after its first poll is due until its next.
		idleCfg := cmdq.Config{Worker: "idle", MinPollInterval: time.Minute, MaxPollInterval: time.Minute,
			ReconcileInterval: cmdq.NoReconcile, Doorbell: cmdq.Doorbell{Off: true}}
		polled := newObserved()
		idleCfg.Observers = []cmdq.Observer{polled}
		idle := newClient(t, store{driver: s.driver, st: otherProcess(t, s), prefix: s.prefix}, idleCfg)
		if err := cmdq.Register(idle, func(context.Context, greet, *cmdq.Attempt) error { return nil }); err != nil {
			t.Fatal(err)
		}
		front := newClient(t, s, cmdq.Config{Doorbell: cmdq.Doorbell{Off: true}})
		if err := idle.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 30*time.Second, "the idle processor listed", func() bool {
			ps, err := front.Processors(ctx)
			return err == nil && len(ps) == 1 && ps[0].Name == "idle"
		})
		polled.await(t, "the idle processor's first poll", func() bool {
			return polled.count(0, func(o cmdq.Observation) bool { return o.Kind == cmdq.ObservedPolled }) > 0
		})
		r, err := front.Issue(ctx, greet{Name: "due"})
		if err != nil {
			t.Fatal(err)
		}
		wantWaiting(t, "due, a processor with free slots polls its queue", waitingOf(t, front, r.ID), cmdq.WaitDue)
		if err := idle.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	})
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.Concurrency = 1
		c := newClient(t, s, cfg)
		release, started := make(chan struct{}), make(chan string, 10)
		fails := 0
		if err := cmdq.RegisterWith(c, func(ctx context.Context, g greet, a *cmdq.Attempt) error {
			if g.Name == "fail" && fails == 0 {
				fails++
				return errors.New("first attempt fails")
			}
			started <- a.ID()
			<-release
			return nil
		}, cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: time.Hour, Max: time.Hour, Jitter: cmdq.NoJitter}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		busy, err := c.Issue(ctx, greet{Name: "busy"})
		if err != nil {
			t.Fatal(err)
		}
		if id := waitFor(t, started, "the first handler"); id != busy.ID {
			t.Fatalf("started %s, want %s", id, busy.ID)
		}
		if w := waitingOf(t, c, busy.ID); w != nil {
			t.Fatalf("a running command waits: %+v", w)
		}
		queued, err := c.Issue(ctx, greet{Name: "queued"})
		if err != nil {
			t.Fatal(err)
		}
		wantWaiting(t, "every slot taken", waitingOf(t, c, queued.ID), cmdq.WaitSlot)
		close(release)
		if st, err := c.Wait(ctx, queued.ID); err != nil || st.State != cmdq.StateCompleted || st.Waiting != nil {
			t.Fatalf("queued: %+v %v, want completed and waiting for nothing", st, err)
		}
		// A retrying command says when its next attempt is due.
		r, err := c.Issue(ctx, greet{Name: "fail"})
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 30*time.Second, "the first attempt failed", func() bool {
			st, err := c.Get(ctx, r.ID)
			return err == nil && st.State == cmdq.StateRetrying
		})
		w := waitingOf(t, c, r.ID)
		wantWaiting(t, "retrying", w, cmdq.WaitRetrying)
		if d := time.Until(w.Until); d < 50*time.Minute {
			t.Fatalf("retrying until %s (in %s), want about an hour from now", w.Until, d)
		}
	})
}
