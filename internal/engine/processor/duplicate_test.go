package processor_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/reconcile"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// oneAtATime makes a processor take one message at a time.
func oneAtATime(cfg processor.Config) processor.Config {
	cfg.Concurrency, cfg.BatchSize, cfg.NewBatchThreshold = 1, 1, model.NoThreshold
	return cfg
}

// TestSecondMessageOfRunningCommandNotRun: a second message for a command
// another processor is running (its started written) — what a recovery
// enqueue leaves when the first message was there after all — is deleted
// unrun by the processor that takes it, which records nothing. The started
// event names the message that owns the command, so this holds for a
// second message delivered before (its earlier delivery failed before it
// loaded the command) as for a fresh one. Before, the second processor ran
// the handler at the same time as the first.
func TestSecondMessageOfRunningCommandNotRun(t *testing.T) {
	t.Parallel()
	for _, deliveredBefore := range []bool{false, true} {
		name := "fresh"
		if deliveredBefore {
			name = "delivered before"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eachDriver(t, func(t *testing.T, e *env) {
				reg := registry.NewRegistry()
				var runs atomic.Int64
				release := make(chan struct{})
				register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
					runs.Add(1)
					select {
					case <-release:
					case <-ctx.Done():
					}
					return nil
				}, registry.Options{Lease: 5 * time.Second})
				cfg := oneAtATime(e.cfg())
				cfg.StartedWriteDelay = 20 * time.Millisecond
				p1 := newProc(t, e.store, reg, cfg)
				start(t, p1)
				id := e.issue(e.issuer(p1.Notify), okCmd{})
				e.waitState(id, model.StateRunning, 10*time.Second)
				if evs := e.events(id); evs[len(evs)-1].Kind != model.EventStarted || evs[len(evs)-1].MessageID == "" {
					t.Fatalf("events %+v: want the started event to name its message", evs)
				}

				// The second message.
				q := e.queue("commands")
				if _, err := q.Enqueue(context.Background(), layout.Envelope{ID: id, Type: okCmd{}.CommandType()}.Marshal(), 0, storage.NoExpiry); err != nil {
					t.Fatal(err)
				}
				if deliveredBefore {
					// A delivery that ended before it loaded the command (a
					// processor that crashed, or could not read the table).
					msgs, err := q.Dequeue(context.Background(), 1, time.Minute)
					if err != nil || len(msgs) != 1 {
						t.Fatalf("dequeue the second message: %v %d", err, len(msgs))
					}
					if _, _, err := q.UpdateVisibility(context.Background(), msgs[0].ID, msgs[0].PopReceipt, 0); err != nil {
						t.Fatal(err)
					}
				}
				var got atomic.Int64
				cfg2 := oneAtATime(e.cfg())
				cfg2.Worker += "-2"
				cfg2.Observer = onPoll(func(ev model.Observation) { got.Add(int64(ev.Received)) })
				p2 := newProc(t, e.open(), reg, cfg2)
				start(t, p2)
				eventually(t, 10*time.Second, "the second processor to take the second message", func() bool { return got.Load() == 1 })
				eventually(t, 10*time.Second, "the second message to be deleted", func() bool {
					n, err := q.ApproximateCount(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					return n == 1 // the first message, held by the first processor
				})
				close(release)
				e.waitState(id, model.StateCompleted, 10*time.Second)
				if n := runs.Load(); n != 1 {
					t.Fatalf("the handler ran %d times, want once", n)
				}
				if k := kinds(e.events(id)); !equalKinds(k, model.EventCreated, model.EventStarted, model.EventCompleted) {
					t.Fatalf("events %v: the second message must record nothing", k)
				}
			})
		})
	}
}

// TestLoadedWhenStarted: a processor that holds a message while its one
// handler slot is busy loads the command only once it has the slot, so a
// command completed elsewhere meanwhile is not run on a stale record.
// Before, it loaded the command when the message arrived and ran the
// handler after the slot freed, though the command was completed by then.
func TestLoadedWhenStarted(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var runs1, runs2 atomic.Int64
		release := make(chan struct{})
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			runs1.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}, registry.Options{})
		register(t, reg, func(ctx context.Context, c otherCmd, run *registry.Attempt) error {
			runs2.Add(1)
			return nil
		}, registry.Options{})
		var received atomic.Int64
		cfg := e.cfg()
		cfg.Concurrency, cfg.BatchSize = 1, 1
		cfg.HandlerDurationEstimate = 10 * time.Millisecond // holds more than its one slot starts
		cfg.Observer = onPoll(func(ev model.Observation) { received.Add(int64(ev.Received)) })
		// The slow path (load when the slot is free) is what this tests:
		// the "elsewhere" below writes the command directly, which no
		// delivery can do to a command whose issue message is fresh (see
		// TestFastPathConflict for what the fast path does then).
		cfg.NoFastPath = true
		p := newProc(t, e.store, reg, cfg)
		start(t, p)
		iss := e.issuer(p.Notify)
		busy := e.issue(iss, okCmd{})
		eventually(t, 10*time.Second, "the first handler to run", func() bool { return runs1.Load() == 1 })
		waiting := e.issue(iss, otherCmd{})
		eventually(t, 10*time.Second, "the processor to hold the second message", func() bool { return received.Load() == 2 })
		// Completed elsewhere while the message waits for the slot.
		rec, err := e.reader.Store.Load(context.Background(), waiting)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.reader.Store.Append(context.Background(), rec, model.Event{Kind: model.EventStarted, Attempt: 1, Worker: "other"},
			model.Event{Kind: model.EventCompleted, Attempt: 1, Worker: "other"}); err != nil {
			t.Fatal(err)
		}
		close(release)
		e.waitState(busy, model.StateCompleted, 10*time.Second)
		e.waitQueueEmpty("commands", 10*time.Second)
		if n := runs2.Load(); n != 0 {
			t.Fatalf("the handler of a command completed elsewhere ran %d times", n)
		}
	})
}

// TestRequeuedCommandRunsOnce: a requeued command with two messages, each taken by its own
// processor, both loading the command while it is still pending (the
// first processor's first write waits until the second has loaded it).
// The first delivery of a requeued command claims it with its started
// event before running, so only one of them runs the handler; the other
// finds it started and deletes its message. Before, both ran it.
func TestRequeuedCommandRunsOnce(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var runs atomic.Int64
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			runs.Add(1)
			return nil
		}, quickRecovery)
		// The command, waiting in its queue, and its requeue (what the
		// reconciler's pending scan does to a backlogged command, or a
		// recovery enqueue to one whose first enqueue landed after all):
		// a requeued event and a second message.
		res, err := e.issuer(nil).Issue(context.Background(), okCmd{N: 7})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := e.reader.Store.Load(context.Background(), res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.reader.Store.Append(context.Background(), rec, model.Event{Kind: model.EventRequeued, By: reconcile.By}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.queue("commands").Enqueue(context.Background(), layout.Envelope{ID: res.ID, Type: okCmd{}.CommandType()}.Marshal(), 0, storage.NoExpiry); err != nil {
			t.Fatal(err)
		}
		q := e.queue("commands")
		eventually(t, 10*time.Second, "both messages to be visible", func() bool {
			msgs, err := q.Peek(context.Background(), 32)
			if err != nil {
				t.Fatal(err)
			}
			return len(msgs) == 2
		})

		// p1's first table batch waits until p2 has loaded the command.
		p2loaded := make(chan struct{})
		var once sync.Once
		var gated atomic.Bool
		st1 := instrument.Wrap(e.store, instrument.Hooks{Before: func(op instrument.Op) error {
			if op == instrument.TableBatch && gated.CompareAndSwap(false, true) {
				select {
				case <-p2loaded:
				case <-time.After(20 * time.Second): // a bound; the test fails below if p2 never loads
				}
			}
			return nil
		}})
		st2 := instrument.Wrap(e.open(), instrument.Hooks{After: func(c instrument.Call) {
			if c.Op == instrument.TableGet && c.Err == nil {
				once.Do(func() { close(p2loaded) })
			}
		}})
		cfg := oneAtATime(e.cfg())
		cfg.StartedWriteDelay = time.Minute
		var took1 atomic.Int64
		cfg.Observer = onPoll(func(ev model.Observation) { took1.Add(int64(ev.Received)) })
		p1 := newProc(t, st1, reg, cfg)
		start(t, p1)
		eventually(t, 10*time.Second, "the first processor to take a message", func() bool { return took1.Load() == 1 })
		cfg2 := oneAtATime(e.cfg())
		cfg2.Worker += "-2"
		cfg2.StartedWriteDelay = time.Minute
		p2 := newProc(t, st2, reg, cfg2)
		start(t, p2)
		e.waitState(res.ID, model.StateCompleted, 15*time.Second)
		e.waitQueueEmpty("commands", 15*time.Second)
		if n := runs.Load(); n != 1 {
			t.Fatalf("the handler ran %d times for two messages of a requeued command, want once", n)
		}
		ks := kinds(e.events(res.ID))
		if !equalKinds(ks, model.EventCreated, model.EventRequeued, model.EventStarted, model.EventCompleted) {
			t.Fatalf("events %v", ks)
		}
	})
}
