package processor_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// countGets wraps st, counting table point reads (Get).
func countGets(st storage.Store, gets *atomic.Int64) storage.Store {
	return instrument.Wrap(st, instrument.Hooks{After: func(c instrument.Call) {
		if c.Op == instrument.TableGet {
			gets.Add(1)
		}
	}})
}

// runCounter counts handler runs per command ID.
type runCounter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (r *runCounter) add(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[string]int{}
	}
	r.runs[id]++
}

func (r *runCounter) get(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id]
}

// TestFirstDeliveryFastPath: the first delivery of an issue's own message
// runs the handler without loading the command (no point read at all),
// and records the same history as the slow path. Params over
// record.MaxFirstParamsBytes are not carried: that command is loaded.
func TestFirstDeliveryFastPath(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		var gets atomic.Int64
		st := countGets(e.store, &gets)
		reg := registry.NewRegistry()
		var runs runCounter
		var seen sync.Map
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			runs.add(run.ID())
			seen.Store(run.ID(), c.N)
			return nil
		}, registry.Options{})
		big := strings.Repeat("x", layout.MaxFirstParamsBytes)
		register(t, reg, func(ctx context.Context, c bigCmd, run *registry.Attempt) error {
			runs.add(run.ID())
			if c.S != big {
				t.Errorf("big params arrived as %d bytes", len(c.S))
			}
			return nil
		}, registry.Options{})
		p := newProc(t, st, reg, e.cfg())
		iss, err := issuer.NewIssuer(st, issuer.IssuerOptions{Prefix: e.prefix, Wake: p.Notify})
		if err != nil {
			t.Fatal(err)
		}
		start(t, p)
		const n = 20
		ids := make([]string, n)
		for i := range ids {
			ids[i] = e.issue(iss, okCmd{N: i})
		}
		bigID := e.issue(iss, bigCmd{S: big})
		for _, id := range append(ids, bigID) {
			e.waitState(id, model.StateCompleted, 20*time.Second)
		}
		e.waitQueueEmpty("commands", 10*time.Second)
		for i, id := range ids {
			if r := runs.get(id); r != 1 {
				t.Fatalf("command %s ran %d times", id, r)
			}
			if v, _ := seen.Load(id); v != i {
				t.Fatalf("command %s got params n=%v, want %d", id, v, i)
			}
			if k := kinds(e.events(id)); !equalKinds(k, model.EventCreated, model.EventStarted, model.EventCompleted) {
				t.Fatalf("events %v", k)
			}
		}
		if got := p.Stats().FastPath; got != n {
			t.Fatalf("fast-path deliveries %d, want %d (the large-params command loads)", got, n)
		}
		if g := gets.Load(); g != 1 {
			t.Fatalf("%d point reads for %d commands; want 1 (the large-params command's load)", g, n+1)
		}
	})
}

type bigCmd struct {
	S string `json:"s"`
}

func (bigCmd) CommandType() string { return "test.big" }

// TestFastPathConflict: a command written since its issue makes the fast
// path's first write conflict; the attempt goes on from the reloaded
// command by the usual rules. Still pending (a requeued event): it is
// completed once. Already final (completed by another delivery): nothing
// is written on top of it, no second completed, and the message is
// deleted.
func TestFastPathConflict(t *testing.T) {
	t.Parallel()
	for _, final := range []bool{false, true} {
		name := "requeued"
		if final {
			name = "completed-elsewhere"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eachDriver(t, func(t *testing.T, e *env) {
				reg := registry.NewRegistry()
				var runs atomic.Int64
				register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
					runs.Add(1)
					return nil
				}, registry.Options{})
				p := newProc(t, e.store, reg, e.cfg())
				id := e.issue(e.issuer(nil), okCmd{})
				ctx := context.Background()
				rec, err := e.reader.Store.Load(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				evs := []model.Event{{Kind: model.EventRequeued, By: "test"}}
				want := []model.EventKind{model.EventCreated, model.EventRequeued, model.EventStarted, model.EventCompleted}
				if final {
					evs = []model.Event{{Kind: model.EventStarted, Attempt: 1, Worker: "other"}, {Kind: model.EventCompleted, Attempt: 1, Worker: "other"}}
					want = []model.EventKind{model.EventCreated, model.EventStarted, model.EventCompleted}
				}
				if err := e.reader.Store.Append(ctx, rec, evs...); err != nil {
					t.Fatal(err)
				}
				start(t, p)
				p.Notify("commands")
				e.waitQueueEmpty("commands", 20*time.Second)
				e.waitState(id, model.StateCompleted, 10*time.Second)
				if got := p.Stats().FastPath; got != 1 {
					t.Fatalf("fast-path deliveries %d, want 1", got)
				}
				if k := kinds(e.events(id)); !equalKinds(k, want...) {
					t.Fatalf("events %v, want %v", k, want)
				}
				if got := p.Stats().Completed; final && got != 0 {
					t.Fatalf("completed %d by this processor: the command was final", got)
				}
			})
		})
	}
}

// TestFastPathRecoveryMessageRunsOnce: a command with a second message (a
// recovery enqueue: requeued event, then a delayed message) whose issue
// message takes the fast path runs once: the fast path's write conflicts
// on the requeued event and lands on the reloaded command, and the
// recovery message finds the command completed and is deleted unrun.
func TestFastPathRecoveryMessageRunsOnce(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var runs runCounter
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			runs.add(run.ID())
			return nil
		}, registry.Options{})
		p := newProc(t, e.store, reg, e.cfg())
		id := e.issue(e.issuer(nil), okCmd{})
		ctx := context.Background()
		names := layout.Names{Prefix: e.prefix}
		rs, err := record.Open(ctx, e.store, names, record.Options{RecoveryDelay: func(string) time.Duration { return time.Second }})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := rs.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if requeued, enqueued, err := enqueue.NewEnqueuer(e.store, names, rs, nil).Recover(ctx, rec, "test", "second message", false); err != nil || !requeued || !enqueued {
			t.Fatalf("recover: %v %v %v", requeued, enqueued, err)
		}
		start(t, p)
		p.Notify("commands")
		e.waitState(id, model.StateCompleted, 20*time.Second)
		e.waitQueueEmpty("commands", 20*time.Second) // the recovery message too
		if r := runs.get(id); r != 1 {
			t.Fatalf("ran %d times", r)
		}
		evs := e.events(id)
		if countKind(evs, model.EventStarted) != 1 || countKind(evs, model.EventCompleted) != 1 {
			t.Fatalf("events %v", kinds(evs))
		}
		if st := p.Stats(); st.FastPath != 1 {
			t.Fatalf("stats %+v: want one fast-path delivery (the issue's message)", st)
		}
	})
}

// TestFastPathTwoProcessors: two processors on one queue (on Azurite,
// each with its own client), commands with steps, each also given a
// recovery message: every handler runs once, every step is recorded once,
// and the issue messages took the fast path.
func TestFastPathTwoProcessors(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		var runs runCounter
		var steps sync.Map // id/step → count
		newReg := func() *registry.Registry {
			reg := registry.NewRegistry()
			register(t, reg, func(ctx context.Context, c stepCmd, run *registry.Attempt) error {
				runs.add(run.ID())
				for s := run.LastStep() + 1; s <= 2; s++ {
					v, _ := steps.LoadOrStore(run.ID()+"/"+string(rune('0'+s)), new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
					if err := run.CompleteStep(ctx, s, ""); err != nil {
						return err
					}
				}
				return nil
			}, registry.Options{})
			return reg
		}
		cfg := e.cfg()
		p1 := newProc(t, e.store, newReg(), cfg)
		cfg.Worker = "w2-" + e.driver
		p2 := newProc(t, e.open(), newReg(), cfg)
		start(t, p1)
		start(t, p2)
		ctx := context.Background()
		names := layout.Names{Prefix: e.prefix}
		rs, err := record.Open(ctx, e.store, names, record.Options{RecoveryDelay: func(string) time.Duration { return 2 * time.Second }})
		if err != nil {
			t.Fatal(err)
		}
		enq := enqueue.NewEnqueuer(e.store, names, rs, nil)
		iss := e.issuer(func(q string) { p1.Notify(q); p2.Notify(q) })
		const n = 40
		ids := make([]string, n)
		for i := range ids {
			ids[i] = e.issue(iss, stepCmd{})
			if i%2 == 0 { // every other command gets a recovery message
				rec, err := rs.Load(ctx, ids[i])
				if err != nil {
					t.Fatal(err)
				}
				// A processor may complete the command before the
				// recovery is written (it is handed over at once): then
				// the record refuses it (ErrFinal) and it has one message.
				if _, _, err := enq.Recover(ctx, rec, "test", "second message", false); err != nil && !errors.Is(err, record.ErrFinal) {
					t.Fatal(err)
				}
			}
		}
		for _, id := range ids {
			e.waitState(id, model.StateCompleted, 30*time.Second)
		}
		e.waitQueueEmpty("commands", 30*time.Second)
		for _, id := range ids {
			if r := runs.get(id); r != 1 {
				t.Fatalf("command %s ran %d times", id, r)
			}
			evs := e.events(id)
			if countKind(evs, model.EventStarted) != 1 || countKind(evs, model.EventCompleted) != 1 || countKind(evs, model.EventStepCompleted) != 2 {
				t.Fatalf("command %s events %v", id, kinds(evs))
			}
			for s := 1; s <= 2; s++ {
				v, _ := steps.Load(id + "/" + string(rune('0'+s)))
				if v == nil || v.(*atomic.Int64).Load() != 1 {
					t.Fatalf("command %s step %d ran %v times", id, s, v)
				}
			}
		}
		fast := p1.Stats().FastPath + p2.Stats().FastPath
		if fast < n/2 || fast > n {
			t.Fatalf("fast-path deliveries %d of %d issue messages", fast, n)
		}
	})
}

// TestFastPathRedeliveryAfterLeaseExpired: a fast-path attempt records
// step 1 and its processor stops without an outcome; the message comes back
// after its lease (dequeue count 2) and takes the slow path: it loads the
// command, records the first attempt's lease_lost and resumes after step 1.
// Step 1's work runs once.
func TestFastPathRedeliveryAfterLeaseExpired(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		h := newStepsInterrupted(6 * time.Second)
		step1, attempts, blocked := &h.step1, &h.attempts, h.blocked
		newReg := func() *registry.Registry { return h.newReg(t) }
		cfg := e.cfg()
		cfg.DrainTimeout = 50 * time.Millisecond
		p1 := newProc(t, e.store, newReg(), cfg)
		stop1 := start(t, p1)
		id := e.issue(e.issuer(p1.Notify), stepCmd{})
		select {
		case <-blocked:
		case <-time.After(20 * time.Second):
			t.Fatal("the first attempt did not run")
		}
		stop1()
		if got := p1.Stats().FastPath; got != 1 {
			t.Fatalf("first processor: %d fast-path deliveries, want 1", got)
		}
		cfg.Worker = "w2-" + e.driver
		p2 := newProc(t, e.open(), newReg(), cfg)
		start(t, p2)
		e.waitState(id, model.StateCompleted, 30*time.Second)
		if got := p2.Stats().FastPath; got != 0 {
			t.Fatalf("redelivery took the fast path %d times", got)
		}
		if step1.Load() != 1 || attempts.Load() != 2 {
			t.Fatalf("step 1 ran %d times in %d attempts; want once in 2", step1.Load(), attempts.Load())
		}
		want := []model.EventKind{model.EventCreated, model.EventStarted, model.EventStepCompleted,
			model.EventLeaseLost, model.EventStarted, model.EventStepCompleted, model.EventCompleted}
		evs := e.events(id)
		if k := kinds(evs); !equalKinds(k, want...) {
			t.Fatalf("events %v, want %v", k, want)
		}
		if evs[3].Attempt != 1 || evs[4].Attempt != 2 {
			t.Fatalf("lease_lost for attempt %d, second started attempt %d", evs[3].Attempt, evs[4].Attempt)
		}
	})
}

// stepsInterrupted is a two-step stepCmd handler whose first attempt
// records step 1 and then blocks until its context ends (its processor
// stops without an outcome); later attempts resume after step 1. newReg
// returns a registry with it (one per processor); step1 counts runs of
// step 1's work, attempts every handler run; blocked closes once the first
// attempt has recorded step 1.
type stepsInterrupted struct {
	step1, attempts atomic.Int64
	blocked         chan struct{}
	once            sync.Once
	lease           time.Duration
}

func newStepsInterrupted(lease time.Duration) *stepsInterrupted {
	return &stepsInterrupted{blocked: make(chan struct{}), lease: lease}
}

func (h *stepsInterrupted) newReg(t *testing.T) *registry.Registry {
	reg := registry.NewRegistry()
	register(t, reg, func(ctx context.Context, c stepCmd, run *registry.Attempt) error {
		h.attempts.Add(1)
		if run.LastStep() < 1 {
			h.step1.Add(1)
			if err := run.CompleteStep(ctx, 1, ""); err != nil {
				return err
			}
		}
		if run.Number() == 1 {
			h.once.Do(func() { close(h.blocked) })
			<-ctx.Done()
			return ctx.Err()
		}
		return run.CompleteStep(ctx, 2, "")
	}, registry.Options{Lease: h.lease})
	return reg
}
