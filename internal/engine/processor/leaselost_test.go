package processor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
)

// lostEvents returns the lease_lost events of evs.
func lostEvents(evs []model.Event) []model.Event {
	var out []model.Event
	for _, e := range evs {
		if e.Kind == model.EventLeaseLost {
			out = append(out, e)
		}
	}
	return out
}

// explains returns how many handler executions the history accounts for:
// one per attempt with a started event, plus one per lease_lost event (a
// delivery whose lease ended without its outcome, after which another
// delivery may run the handler again).
func explains(evs []model.Event) int {
	started := map[int]bool{}
	n := 0
	for _, e := range evs {
		switch e.Kind {
		case model.EventStarted:
			started[e.Attempt] = true
		case model.EventLeaseLost:
			n++
		}
	}
	return n + len(started)
}

// TestLeaseLostRecordedForDeliveryWithoutOutcome: a processor stops (or
// dies) with a handler running; its delivery leaves no outcome. The next
// delivery records a lease_lost event for it in its own first write (no
// extra call), so the second execution is explained by the history.
func TestLeaseLostRecordedForDeliveryWithoutOutcome(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var runs atomic.Int64
		blocked := make(chan struct{}, 1)
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			if runs.Add(1) == 1 {
				blocked <- struct{}{}
				<-ctx.Done() // the first processor stops with it running
				return ctx.Err()
			}
			return nil
		}, registry.Options{Lease: 5 * time.Second}) // 5 s: p2's one batch lands well inside its lease on a loaded Azurite
		cfg := e.cfg()
		cfg.DrainTimeout = time.Millisecond
		p1 := newProc(t, e.store, reg, cfg)
		stop1 := start(t, p1)
		id := e.issue(e.issuer(p1.Notify), okCmd{})
		<-blocked
		stop1()
		cfg.Worker += "-2"
		p2 := newProc(t, e.open(), reg, cfg)
		start(t, p2)
		e.waitState(id, model.StateCompleted, 30*time.Second) // after p1's lease ends
		evs := e.events(id)
		lost := lostEvents(evs)
		if len(lost) != 1 || lost[0].Attempt != 1 || lost[0].Worker != cfg.Worker || lost[0].Note == "" {
			t.Fatalf("lease_lost events %+v, want one for attempt 1 by %s (events %v)", lost, cfg.Worker, kinds(evs))
		}
		if k := kinds(evs); !equalKinds(k, model.EventCreated, model.EventLeaseLost, model.EventStarted, model.EventCompleted) {
			t.Fatalf("events %v", k)
		}
		if got := explains(evs); int(runs.Load()) > got {
			t.Fatalf("handler ran %d times, the history explains %d (%v)", runs.Load(), got, kinds(evs))
		}
		st, _ := e.reader.Get(context.Background(), id)
		if st.State != model.StateCompleted || st.Attempts != 2 {
			t.Fatalf("status %+v", st)
		}
	})
}

// TestLeaseLostWhenHandlerOutlivesLease: the first processor's renewals are
// refused (Azurite behind a fault proxy) and its handler ignores the
// cancellation, so it runs on past its lease while a second processor takes
// the message and runs the command too. Whichever of them writes first, the
// history explains both executions with a lease_lost event for attempt 1.
func TestLeaseLostWhenHandlerOutlivesLease(t *testing.T) {
	t.Parallel()
	for _, first := range []string{"second delivery", "first delivery"} {
		t.Run(first+" completes first", func(t *testing.T) {
			t.Parallel()
			e, through, px := azureBehind(t)
			const lease = 2 * time.Second
			px.Add(faultproxy.Match{Method: "PUT", Path: "/messages/"}, faultproxy.Refuse, -1)
			reg := registry.NewRegistry()
			var runs atomic.Int64
			started1, started2, done2 := make(chan struct{}), make(chan struct{}), make(chan struct{})
			var id string
			handler := func(ctx context.Context, c okCmd, run *registry.Attempt) error {
				if runs.Add(1) == 1 {
					close(started1)
					<-started2 // outlives its lease: the second delivery has begun
					if first == "second delivery" {
						<-done2
					}
					return nil
				}
				close(started2)
				if first == "first delivery" {
					eventually(t, 10*time.Second, "the first delivery's completion", func() bool {
						st, _ := e.reader.Get(context.Background(), id)
						return st.State == model.StateCompleted
					})
				}
				return nil
			}
			register(t, reg, handler, registry.Options{Lease: lease})
			// The second processor keeps its lease while it waits for the
			// first one's completion (its renewals answer late on a loaded
			// Azurite): only the first delivery's lease is lost.
			reg2 := registry.NewRegistry()
			register(t, reg2, handler, registry.Options{Lease: 30 * time.Second})
			m1 := &counts{}
			cfg := e.cfg()
			cfg.Observer = m1
			cfg.StartedWriteDelay = 100 * time.Millisecond
			// One message at a time: the first processor does not dequeue
			// again while its handler runs (that would be its own delivery,
			// which it leaves untouched, and an extra lease_lost event).
			cfg.Concurrency, cfg.BatchSize, cfg.NewBatchThreshold = 1, 1, model.NoThreshold
			p1 := newProc(t, through, reg, cfg)
			start(t, p1)
			id = e.issue(e.issuer(p1.Notify), okCmd{})
			<-started1
			cfg2 := e.cfg()
			cfg2.Worker += "-2"
			cfg2.StartedWriteDelay = time.Minute
			p2 := newProc(t, e.store, reg2, cfg2)
			start(t, p2)
			if first == "second delivery" {
				e.waitState(id, model.StateCompleted, 15*time.Second)
				close(done2)
			}
			e.waitState(id, model.StateCompleted, 15*time.Second)
			var evs []model.Event
			eventually(t, 10*time.Second, "a lease_lost event", func() bool {
				evs = e.events(id)
				return len(lostEvents(evs)) > 0
			})
			lost := lostEvents(evs)
			if len(lost) != 1 || lost[0].Attempt != 1 {
				t.Fatalf("lease_lost events %+v (events %v), want one for attempt 1", lost, kinds(evs))
			}
			if runs.Load() != 2 || explains(evs) < 2 {
				t.Fatalf("handler ran %d times, history %v explains %d", runs.Load(), kinds(evs), explains(evs))
			}
			if first == "first delivery" {
				// The first processor found its lease lost when deleting.
				eventually(t, 5*time.Second, "the lost lease to be counted", func() bool { return m1.lost.Load() == 1 })
				if lost[0].Worker != "w-azure" {
					t.Fatalf("lease_lost by %s, want the first processor", lost[0].Worker)
				}
			}
		})
	}
}

// TestLeaseLostBeforeCeilingPoison: deliveries taken by processors that died
// at once (dequeued, never handled) are each explained when the next
// delivery poisons the command over its ceiling.
func TestLeaseLostBeforeCeilingPoison(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, registry.Options{PoisonCeiling: 2})
		id := e.issue(e.issuer(nil), okCmd{})
		q := e.queue("commands")
		for range 2 {
			msgs, err := q.Dequeue(context.Background(), 1, time.Second)
			if err != nil || len(msgs) != 1 {
				t.Fatalf("dequeue: %v %d", err, len(msgs))
			}
			if _, _, err := q.UpdateVisibility(context.Background(), msgs[0].ID, msgs[0].PopReceipt, 0); err != nil {
				t.Fatal(err)
			}
		}
		p := newProc(t, e.store, reg, e.cfg())
		start(t, p)
		e.waitState(id, model.StatePoisoned, 10*time.Second)
		evs := e.events(id)
		if k := kinds(evs); !equalKinds(k, model.EventCreated, model.EventLeaseLost, model.EventLeaseLost, model.EventPoisoned) {
			t.Fatalf("events %v", k)
		}
		if evs[1].Attempt != 1 || evs[2].Attempt != 2 || evs[3].Reason != model.ReasonCeiling {
			t.Fatalf("events %+v", evs)
		}
	})
}

// TestRenewalsFailingRecordLeaseLost: the queue refuses every renewal, so
// the processor cancels the handler shortly before its lease would end.
// The handler did not fail: the attempt records lease_lost (the message
// reappears when the lease ends and another delivery runs the command),
// not failed, whose retry delay could not be set on a message the processor
// no longer reaches. Before, it recorded failed ("context canceled").
func TestRenewalsFailingRecordLeaseLost(t *testing.T) {
	t.Parallel()
	e, through, px := azureBehind(t)
	// 4 s: the handler is cancelled lease/10 (400 ms) before the lease
	// ends; with 2 s (200 ms) a loaded machine running the race detector
	// once let the failing renewals overrun it by 47 ms.
	const lease = 4 * time.Second
	rule := px.Add(faultproxy.Match{Method: "PUT", Path: "/messages/"}, faultproxy.Refuse, -1)
	reg := registry.NewRegistry()
	var runs atomic.Int64
	type cancel struct {
		cause error
		after time.Duration // since the handler began (after its dequeue: the lease began before)
	}
	cancelled := make(chan cancel, 1)
	register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
		if runs.Add(1) == 1 {
			began := time.Now()
			<-ctx.Done()
			cancelled <- cancel{context.Cause(ctx), time.Since(began)}
			return ctx.Err()
		}
		return nil
	}, registry.Options{Lease: lease, Retry: fastRetry})
	cfg := oneAtATime(e.cfg())
	cfg.StartedWriteDelay = 100 * time.Millisecond
	p := newProc(t, through, reg, cfg)
	start(t, p)
	id := e.issue(e.issuer(p.Notify), okCmd{})
	select {
	case c := <-cancelled:
		if c.after >= lease {
			t.Fatalf("the handler was cancelled %s after it began (%v), not before its %s lease ended", c.after, c.cause, lease)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler was not cancelled while its renewals failed")
	}
	px.Remove(rule)
	e.waitState(id, model.StateCompleted, 20*time.Second)
	evs := e.events(id)
	if k := kinds(evs); !equalKinds(k, model.EventCreated, model.EventStarted, model.EventLeaseLost, model.EventStarted, model.EventCompleted) {
		t.Fatalf("events %v, want created, started, lease_lost, started, completed", k)
	}
	if evs[2].Attempt != 1 || evs[4].Attempt != 2 || runs.Load() != 2 {
		t.Fatalf("events %+v, %d runs", evs, runs.Load())
	}
}
