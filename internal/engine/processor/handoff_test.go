package processor_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// handOffIssuer is an Issuer that hands its messages to p.
func (e *env) handOffIssuer(p *processor.Processor) *issuer.Issuer {
	i, err := issuer.NewIssuer(e.store, issuer.IssuerOptions{Prefix: e.prefix, Wake: p.Notify, HandOff: p.HandOff})
	if err != nil {
		e.t.Fatal(err)
	}
	return i
}

// TestHandOff: commands issued in the process of a processor with free
// slots are handed to it: run from the enqueue's answer, never dequeued
// (no dequeue returns a message), on the fast path, attempt 1.
func TestHandOff(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var runs runCounter
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			runs.add(run.ID())
			if run.Number() != 1 {
				t.Errorf("attempt %d, want 1", run.Number())
			}
			return nil
		}, registry.Options{})
		var received atomic.Int64
		cfg := e.cfg()
		cfg.Observer = onPoll(func(ev model.Observation) { received.Add(int64(ev.Received)) })
		p := newProc(t, e.store, reg, cfg)
		start(t, p)
		eventually(t, 10*time.Second, "the processor to take hand-offs", func() bool { return takesHandOffs(p) })
		iss := e.handOffIssuer(p)
		const n = 10
		ids := make([]string, n)
		for i := range ids {
			ids[i] = e.issue(iss, okCmd{N: i})
		}
		for _, id := range ids {
			e.waitState(id, model.StateCompleted, 20*time.Second)
		}
		e.waitQueueEmpty("commands", 10*time.Second)
		for _, id := range ids {
			if r := runs.get(id); r != 1 {
				t.Fatalf("command %s ran %d times", id, r)
			}
			evs := e.events(id)
			if k := kinds(evs); !equalKinds(k, model.EventCreated, model.EventStarted, model.EventCompleted) || evs[1].Attempt != 1 {
				t.Fatalf("events %v (started attempt %d)", k, evs[1].Attempt)
			}
		}
		// A handed-off command is stored where every reader and the
		// retention sweep look: its ID's day table, not the base table.
		names := layout.Names{Prefix: e.prefix}
		base, err := e.store.Table(context.Background(), names.CommandsTable())
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			day := names.TableOf(id)
			if day == names.CommandsTable() {
				t.Fatalf("command %s: its ID carries no day (table %s)", id, day)
			}
			dt, err := e.store.Table(context.Background(), day)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := dt.Get(context.Background(), id, layout.RowCommand); err != nil {
				t.Fatalf("command %s is not in its day table %s: %v", id, day, err)
			}
			if _, err := base.Get(context.Background(), id, layout.RowCommand); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("command %s in the base table too (or %v)", id, err)
			}
		}
		st := p.Stats()
		if st.HandedOff != n || st.FastPath != n || received.Load() != 0 {
			t.Fatalf("handed off %d, fast path %d, dequeued %d; want %d, %d, 0", st.HandedOff, st.FastPath, received.Load(), n, n)
		}
	})
}

// TestHandOffNoFreeSlot: with every handler slot busy the message is
// enqueued visible and the poller woken, as without the hand-off.
func TestHandOffNoFreeSlot(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		release := make(chan struct{})
		var started atomic.Int64
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			if started.Add(1) == 1 {
				<-release
			}
			return nil
		}, registry.Options{})
		var received atomic.Int64
		cfg := e.cfg()
		cfg.Concurrency, cfg.BatchSize = 1, 1
		cfg.Observer = onPoll(func(ev model.Observation) { received.Add(int64(ev.Received)) })
		p := newProc(t, e.store, reg, cfg)
		start(t, p)
		eventually(t, 10*time.Second, "the processor to take hand-offs", func() bool { return takesHandOffs(p) })
		iss := e.handOffIssuer(p)
		first := e.issue(iss, okCmd{})
		eventually(t, 10*time.Second, "the first handler to run", func() bool { return started.Load() == 1 })
		second := e.issue(iss, okCmd{})
		close(release)
		e.waitState(first, model.StateCompleted, 20*time.Second)
		e.waitState(second, model.StateCompleted, 20*time.Second)
		if st := p.Stats(); st.HandedOff != 1 || received.Load() != 1 {
			t.Fatalf("handed off %d, dequeued %d; want 1 each", st.HandedOff, received.Load())
		}
	})
}

// TestHandOffStoppedProcessorRedelivers: a processor stopped after a
// hand-off (its handler interrupted after recording step 1) leaves the
// message invisible until the lease ends; then another processor dequeues
// it (dequeue count 1 = attempt 2), takes the slow path, records the
// hand-off attempt's lease_lost and resumes after step 1. It completes
// once; step 1 runs once. (A later delivery's own lost lease, on a loaded
// machine, adds its lease_lost and moves the resuming attempt on.)
func TestHandOffStoppedProcessorRedelivers(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		h := newStepsInterrupted(3 * time.Second)
		step1, attempts, blocked := &h.step1, &h.attempts, h.blocked
		newReg := func() *registry.Registry { return h.newReg(t) }
		cfg := e.cfg()
		cfg.DrainTimeout = 50 * time.Millisecond
		p1 := newProc(t, e.store, newReg(), cfg)
		stop1 := start(t, p1)
		eventually(t, 10*time.Second, "the processor to take hand-offs", func() bool { return takesHandOffs(p1) })
		id := e.issue(e.handOffIssuer(p1), stepCmd{})
		select {
		case <-blocked:
		case <-time.After(20 * time.Second):
			t.Fatal("the handed-off attempt did not run")
		}
		stop1()
		if st := p1.Stats(); st.HandedOff != 1 {
			t.Fatalf("first processor: handed off %d, want 1", st.HandedOff)
		}
		cfg.Worker = "w2-" + e.driver
		p2 := newProc(t, e.open(), newReg(), cfg)
		start(t, p2)
		e.waitState(id, model.StateCompleted, 30*time.Second)
		e.waitQueueEmpty("commands", 10*time.Second)
		if st := p2.Stats(); st.FastPath != 0 || st.HandedOff != 0 {
			t.Fatalf("redelivery: fast path %d, handed off %d; want 0", st.FastPath, st.HandedOff)
		}
		if step1.Load() != 1 || attempts.Load() != 2 {
			t.Fatalf("step 1 ran %d times in %d attempts; want once in 2", step1.Load(), attempts.Load())
		}
		want := []model.EventKind{model.EventCreated, model.EventStarted, model.EventStepCompleted,
			model.EventLeaseLost, model.EventStarted, model.EventStepCompleted, model.EventCompleted}
		// On a loaded machine a delivery of the second processor may lose
		// its lease before its handler starts (its lease_lost is then
		// recorded, and the next delivery runs the handler): such events,
		// of attempts after the first, are set aside. The hand-off
		// attempt's lease_lost must be there exactly once.
		all := e.events(id)
		var evs, others []model.Event
		for _, ev := range all {
			if ev.Kind == model.EventLeaseLost && ev.Attempt != 1 {
				others = append(others, ev)
				continue
			}
			evs = append(evs, ev)
		}
		if len(others) > 0 {
			t.Logf("lease_lost of later deliveries (a loaded machine): %+v", others)
		}
		if k := kinds(evs); !equalKinds(k, want...) {
			t.Fatalf("events %v (all: %+v), want %v", k, all, want)
		}
		if evs[1].Attempt != 1 || evs[3].Attempt != 1 || evs[4].Attempt < 2 || evs[6].Attempt != evs[4].Attempt || evs[5].Attempt != evs[4].Attempt {
			t.Fatalf("attempts: started %d, lease_lost %d, started %d, step %d, completed %d; want 1, 1, then one later attempt (all: %+v)", evs[1].Attempt, evs[3].Attempt, evs[4].Attempt, evs[5].Attempt, evs[6].Attempt, all)
		}
		if len(others) == 0 && evs[4].Attempt != 2 {
			t.Fatalf("the second processor's first delivery is attempt %d, want 2", evs[4].Attempt)
		}
	})
}

// TestHandOffWhileStarting: an Issuer may ask for a hand-off at any moment,
// also while Run is still setting its session up (it was visible to
// HandOff before its contexts were set: a nil-pointer panic in
// examples/convertfiles). HandOff gives nil until the session is ready,
// and a slot only once it is.
func TestHandOffWhileStarting(t *testing.T) {
	t.Parallel()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := newEnv(t, "embedded", st, func() storage.Store { return st })
	reg := registry.NewRegistry()
	register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, registry.Options{})
	for i := range 30 {
		p := newProc(t, e.store, reg, e.cfg())
		var got atomic.Bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			for !got.Load() {
				if slot := p.HandOff("commands", okCmd{}.CommandType()); slot != nil {
					slot.Cancel()
					got.Store(true)
				}
			}
		}()
		stop := start(t, p)
		eventually(t, 10*time.Second, fmt.Sprintf("a hand-off slot (round %d)", i), got.Load)
		<-done
		stop()
	}
}

// takesHandOffs reports whether p's session is ready for hand-offs: model.Stats
// says Running as soon as Run has begun, before its queues are open and
// hand-offs allowed; the health leaves model.ProcessorStarting with the first poll, which
// comes after that (a first issue in between is dequeued instead).
func takesHandOffs(p *processor.Processor) bool {
	return p.Stats().Running && p.Health().State != model.ProcessorStarting
}
