package processor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

var errFlaky = errors.New("flaky downstream")

// counts is an observer that counts lost leases, completions and failures.
type counts struct{ lost, completed, failed atomic.Int64 }

func (c *counts) Observe(o model.Observation) {
	switch o.Kind {
	case model.ObservedCompleted:
		c.completed.Add(1)
	case model.ObservedFailed:
		c.failed.Add(1)
	case model.ObservedLeaseLost:
		c.lost.Add(1)
	}
}

// azureBehind returns an env on Azurite and a store that reaches the same
// account through an HTTP fault proxy (quick transport retries), for the
// processor under test.
func azureBehind(t *testing.T) (e *env, through storage.Store, px *faultproxy.HTTP) {
	t.Helper()
	conn := azurite.ConnectionString(t)
	px = faultproxy.NewHTTP(t, conn)
	open := func(cs string) storage.Store {
		st, err := azure.Open(context.Background(), azure.Config{ConnectionString: cs,
			Retry: policy.RetryOptions{MaxRetries: 2, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	direct := open(conn)
	return newEnv(t, "azure", direct, func() storage.Store { return direct }), open(px.ConnectionString), px
}

// TestLostAnswerIsNotALostLease: a queue call whose first try landed and
// whose answer was lost (the connection reset after Azurite applied it) is
// retried by the driver, and the retry meets its own effect: 404 for a
// Delete, 400 PopReceiptMismatch for an UpdateVisibility. That came back
// while the lease was still ours, so no one else can have taken the
// message: it is not a lost lease, nothing is counted, the lease does not
// grow, and the handler is not cancelled or run again.
func TestLostAnswerIsNotALostLease(t *testing.T) {
	t.Parallel()
	t.Run("delete", func(t *testing.T) {
		t.Parallel()
		e, through, px := azureBehind(t)
		rule := px.Add(faultproxy.Match{Method: "DELETE", Path: "/messages/"}, faultproxy.LoseAnswer, 3)
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, registry.Options{})
		m := &counts{}
		cfg := e.cfg()
		cfg.Observer, cfg.LeaseGrowth = m, processor.LeaseGrowth{Threshold: 1}
		p := newProc(t, through, reg, cfg)
		start(t, p)
		iss := e.issuer(p.Notify)
		for i := range 3 {
			e.waitState(e.issue(iss, okCmd{N: i}), model.StateCompleted, 10*time.Second)
		}
		e.waitQueueEmpty("commands", 10*time.Second)
		if rule.Hits() != 3 || m.lost.Load() != 0 || p.LeaseOf("test.ok") != model.DefaultLease {
			t.Fatalf("%d deletes lost their answer (hidden answers %v): %d leases counted lost, lease %s (want 0 and %s)",
				rule.Hits(), rule.Answers(), m.lost.Load(), p.LeaseOf("test.ok"), model.DefaultLease)
		}
	})
	t.Run("retry delay", func(t *testing.T) {
		t.Parallel()
		e, through, px := azureBehind(t)
		// The retry delay (20 ms, a whole second on Azure); the lease is 30 s.
		rule := px.Add(faultproxy.Match{Method: "PUT", Path: "/messages/", Query: "visibilitytimeout=1"}, faultproxy.LoseAnswer, 1)
		reg := registry.NewRegistry()
		var runs atomic.Int64
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			if runs.Add(1) == 1 {
				return errFlaky
			}
			return nil
		}, registry.Options{Retry: fastRetry})
		m := &counts{}
		cfg := e.cfg()
		cfg.Observer, cfg.LeaseGrowth = m, processor.LeaseGrowth{Threshold: 1}
		p := newProc(t, through, reg, cfg)
		start(t, p)
		id := e.issue(e.issuer(p.Notify), okCmd{})
		e.waitState(id, model.StateCompleted, 15*time.Second)
		if rule.Hits() != 1 || runs.Load() != 2 || m.lost.Load() != 0 || p.LeaseOf("test.ok") != model.DefaultLease {
			t.Fatalf("retry delay answer lost %d times: ran %d times, %d leases counted lost, lease %s", rule.Hits(), runs.Load(), m.lost.Load(), p.LeaseOf("test.ok"))
		}
	})
	t.Run("renewal", func(t *testing.T) {
		t.Parallel()
		e, through, px := azureBehind(t)
		// 10 s: the renewal (at 5 s) and the transport's retry after its
		// lost answer have 4.5 s to be answered; with 2 s, and then 4 s
		// (1.8 s), a loaded machine answered the retry after the lease's
		// end, a loss.
		const lease = 10 * time.Second
		rule := px.Add(faultproxy.Match{Method: "PUT", Path: "/messages/", Query: "visibilitytimeout=10"}, faultproxy.LoseAnswer, 1)
		reg := registry.NewRegistry()
		var runs atomic.Int64
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			runs.Add(1)
			select { // longer than the first renewal, at half the lease
			case <-time.After(3 * lease / 4):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}, registry.Options{Lease: lease})
		m := &counts{}
		cfg := e.cfg()
		cfg.Observer, cfg.LeaseGrowth = m, processor.LeaseGrowth{Threshold: 1}
		p := newProc(t, through, reg, cfg)
		start(t, p)
		id := e.issue(e.issuer(p.Notify), okCmd{})
		e.waitState(id, model.StateCompleted, 30*time.Second)
		// The message, renewed under a receipt the processor never learnt,
		// reappears when that lease ends and is deleted without running.
		e.waitQueueEmpty("commands", 30*time.Second)
		if rule.Hits() != 1 || runs.Load() != 1 || m.lost.Load() != 0 || p.LeaseOf("test.ok") != lease {
			t.Fatalf("renewal answer lost %d times: handler ran %d times, %d leases counted lost, lease %s", rule.Hits(), runs.Load(), m.lost.Load(), p.LeaseOf("test.ok"))
		}
		if k := kinds(e.events(id)); !equalKinds(k, model.EventCreated, model.EventStarted, model.EventCompleted) {
			t.Fatalf("events %v", k)
		}
	})
}

// countUpdates wraps st and counts its UpdateVisibility calls.
func countUpdates(st storage.Store, n *atomic.Int64) storage.Store {
	return instrument.Wrap(st, instrument.Hooks{Before: func(op instrument.Op) error {
		if op == instrument.QueueUpdateVisibility {
			n.Add(1)
		}
		return nil
	}})
}

// TestGrownLeaseOnlyForItsType: a type whose lease grew takes the longer
// lease per message (one UpdateVisibility right after the dequeue: only its
// messages pay it); every other type's messages are dequeued with their
// queue's own lease (the longest definition lease of its types, not the
// grown one), so a message abandoned by a processor that died reappears
// after that, not after the grown lease.
func TestGrownLeaseOnlyForItsType(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		const short, grown = 3 * time.Second, 60 * time.Second
		growth := processor.LeaseGrowth{Threshold: 1, Factor: 10, MaxFactor: 10, ShrinkAfter: 1000}
		ok := func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }
		// The grown type and one with its own lease, shorter than the
		// grown one and long enough that no renewal comes before its
		// completion on a loaded Azurite.
		reg := registry.NewRegistry()
		register(t, reg, ok, registry.Options{Lease: grown / 10})
		register(t, reg, func(ctx context.Context, c stepCmd, run *registry.Attempt) error { return nil }, registry.Options{Lease: grown / 3})
		var updates atomic.Int64
		cfg := e.cfg()
		cfg.LeaseGrowth = growth
		p1 := newProc(t, countUpdates(e.store, &updates), reg, cfg)
		p1.CountLostLeases("test.ok", 1)
		if p1.LeaseOf("test.ok") != grown {
			t.Fatalf("lease %s", p1.LeaseOf("test.ok"))
		}
		stop1 := start(t, p1)
		iss := e.issuer(p1.Notify)
		e.waitState(e.issue(iss, okCmd{}), model.StateCompleted, 10*time.Second)
		if n := updates.Swap(0); n != 1 {
			t.Fatalf("a message of the grown type made %d UpdateVisibility calls, want 1 (taking the grown lease)", n)
		}
		e.waitState(e.issue(iss, stepCmd{}), model.StateCompleted, 10*time.Second)
		if n := updates.Swap(0); n != 0 {
			t.Fatalf("a message of another type made %d UpdateVisibility calls, want 0", n)
		}
		stop1()

		// The abandoned message: on a processor of the grown type and a
		// short one only (the step type's 20 s lease would be its queue's
		// and set the wait), so its message is dequeued with the grown
		// type's definition lease (6 s) and reappears after that, not
		// after the grown 60 s.
		reg = registry.NewRegistry()
		register(t, reg, ok, registry.Options{Lease: grown / 10})
		started := make(chan struct{}, 4)
		var otherRuns atomic.Int64
		register(t, reg, func(ctx context.Context, c otherCmd, run *registry.Attempt) error {
			if otherRuns.Add(1) == 1 {
				started <- struct{}{}
				<-ctx.Done() // the first processor dies with it in hand
				return ctx.Err()
			}
			return nil
		}, registry.Options{Lease: short})
		cfg.DrainTimeout = time.Millisecond
		cfg.Worker += "-1b"
		p1b := newProc(t, e.store, reg, cfg)
		p1b.CountLostLeases("test.ok", 1)
		if p1b.LeaseOf("test.ok") != grown {
			t.Fatalf("lease %s", p1b.LeaseOf("test.ok"))
		}
		stop1b := start(t, p1b)
		id := e.issue(e.issuer(p1b.Notify), otherCmd{})
		<-started
		stop1b() // the processor stops with the handler running: its message keeps its lease
		stopped := time.Now()
		cfg.Worker += "-2"
		p2 := newProc(t, e.open(), reg, cfg)
		start(t, p2)
		e.waitState(id, model.StateCompleted, 30*time.Second)
		if waited := time.Since(stopped); waited >= grown/2 {
			t.Fatalf("the abandoned message reappeared after %s: it was leased for the grown %s, not its queue's %s", waited, grown, grown/10)
		}
	})
}

// TestGrownLeaseShrinks: once leases stop being lost, a grown lease shrinks
// back step by step (÷ Factor after ShrinkAfter clean finishes), never below
// the definition's lease.
func TestGrownLeaseShrinks(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		const base = 2 * time.Second
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, registry.Options{Lease: base})
		cfg := e.cfg()
		cfg.LeaseGrowth = processor.LeaseGrowth{Threshold: 1, Factor: 2, MaxFactor: 4, ShrinkAfter: 3}
		p := newProc(t, e.store, reg, cfg)
		p.CountLostLeases("test.ok", 2)
		if got := p.LeaseOf("test.ok"); got != 4*base {
			t.Fatalf("grown lease %s, want %s", got, 4*base)
		}
		start(t, p)
		iss := e.issuer(p.Notify)
		for _, want := range []time.Duration{2 * base, base, base} {
			for i := range 3 {
				e.waitState(e.issue(iss, okCmd{N: i}), model.StateCompleted, 10*time.Second)
			}
			eventually(t, 5*time.Second, "the lease to be "+want.String(), func() bool { return p.LeaseOf("test.ok") == want })
		}
	})
}
