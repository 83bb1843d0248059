package processor_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

func TestSuccess(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var got atomic.Int64
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			got.Add(int64(c.N))
			return nil
		}, registry.Options{})
		p := newProc(t, e.store, reg, e.cfg())
		start(t, p)
		id := e.issue(e.issuer(p.Notify), okCmd{N: 7})
		st := e.waitState(id, model.StateCompleted, 10*time.Second)
		if got.Load() != 7 || st.Attempts != 1 || st.Worker != "w-"+e.driver {
			t.Fatalf("handler saw %d, status %+v", got.Load(), st)
		}
		if k := kinds(e.events(id)); !equalKinds(k, model.EventCreated, model.EventStarted, model.EventCompleted) {
			t.Fatalf("events %v", k)
		}
		e.waitQueueEmpty("commands", 5*time.Second)
	})
}

func TestFailureThenSuccess(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var runs atomic.Int64
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			if runs.Add(1) == 1 {
				return errors.New("flaky downstream")
			}
			if run.Number() != 2 {
				return registry.Permanent(errors.New("expected attempt 2"))
			}
			return nil
		}, registry.Options{Retry: fastRetry})
		p := newProc(t, e.store, reg, e.cfg())
		start(t, p)
		id := e.issue(e.issuer(p.Notify), okCmd{})
		st := e.waitState(id, model.StateCompleted, 10*time.Second)
		evs := e.events(id)
		if !equalKinds(kinds(evs), model.EventCreated, model.EventStarted, model.EventFailed, model.EventStarted, model.EventCompleted) {
			t.Fatalf("events %v", kinds(evs))
		}
		if evs[2].Error != "flaky downstream" || evs[2].Attempt != 1 || evs[4].Attempt != 2 || st.Attempts != 2 || st.LastError != "" {
			t.Fatalf("events %+v status %+v", evs, st)
		}
		if runs.Load() != 2 {
			t.Fatalf("handler ran %d times", runs.Load())
		}
	})
}

func TestPoisonAfterCeiling(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var runs atomic.Int64
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			runs.Add(1)
			return errors.New("always broken")
		}, registry.Options{PoisonCeiling: 3, Retry: fastRetry})
		p := newProc(t, e.store, reg, e.cfg())
		start(t, p)
		before := time.Now().Add(-time.Second)
		id := e.issue(e.issuer(p.Notify), okCmd{})
		st := e.waitState(id, model.StatePoisoned, 30*time.Second) // three attempts and whole-second retry delays on a loaded Azurite
		e.waitQueueEmpty("commands", 15*time.Second)
		if runs.Load() != 3 {
			t.Fatalf("handler ran %d times, want exactly the ceiling 3", runs.Load())
		}
		if st.LastError != "always broken" && !strings.Contains(st.LastError, "always broken") {
			t.Fatalf("status %+v", st)
		}
		pe, err := e.reader.GetPoison(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if pe.CommandID != id || pe.Type != "test.ok" || pe.DequeueCount != 3 || pe.Reason != model.ReasonAttemptsSpent ||
			!strings.Contains(pe.LastError, "always broken") || pe.Queue != "commands" || pe.PoisonedAt.Before(before) || pe.Worker != "w-"+e.driver {
			t.Fatalf("poison entry %+v", pe)
		}
		k := kinds(e.events(id))
		if !equalKinds(k, model.EventCreated, model.EventStarted, model.EventFailed, model.EventStarted, model.EventFailed, model.EventStarted, model.EventFailed, model.EventPoisoned) {
			t.Fatalf("events %v", k)
		}
	})
}

func TestPoisonCeilingOnDequeueCount(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		// A message already dequeued more often than the ceiling (e.g. by
		// processors that crashed) is poisoned without running.
		reg := registry.NewRegistry()
		var runs atomic.Int64
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { runs.Add(1); return nil }, registry.Options{PoisonCeiling: 2})
		id := e.issue(e.issuer(nil), okCmd{})
		q := e.queue("commands")
		for i := 0; i < 2; i++ { // two crashed attempts: dequeue, let the lease expire at once
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
		pe, err := e.reader.GetPoison(context.Background(), id)
		if err != nil || pe.Reason != model.ReasonCeiling || pe.DequeueCount != 3 {
			t.Fatalf("poison entry %+v %v", pe, err)
		}
		if runs.Load() != 0 {
			t.Fatalf("handler ran %d times", runs.Load())
		}
	})
}

func TestPermanentPoisonsAtOnce(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var runs atomic.Int64
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			runs.Add(1)
			return registry.Permanent(errors.New("card declined"))
		}, registry.Options{PoisonCeiling: 5, Retry: fastRetry})
		p := newProc(t, e.store, reg, e.cfg())
		start(t, p)
		id := e.issue(e.issuer(p.Notify), okCmd{})
		e.waitState(id, model.StatePoisoned, 10*time.Second)
		if runs.Load() != 1 {
			t.Fatalf("handler ran %d times", runs.Load())
		}
		pe, err := e.reader.GetPoison(context.Background(), id)
		if err != nil || pe.Reason != model.ReasonPermanent || !strings.Contains(pe.LastError, "card declined") || pe.DequeueCount != 1 {
			t.Fatalf("poison entry %+v %v", pe, err)
		}
		e.waitQueueEmpty("commands", 5*time.Second)
	})
}

func TestMalformedAndUnknownPoisoned(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, registry.Options{})
		// Unknown type: stored and enqueued by an issuer, no handler here.
		unknown := e.issue(e.issuer(nil), otherCmd{})
		// Undecodable params: a field test.ok does not have.
		iss := e.issuer(nil)
		res, err := iss.IssueRaw(context.Background(), rawCmd("test.ok", `{"n":1,"extra":true}`))
		if err != nil {
			t.Fatal(err)
		}
		// Malformed message text.
		q := e.queue("commands")
		m, err := q.Enqueue(context.Background(), "this is not an envelope", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Valid envelope for a command that does not exist.
		ghost := "0b7c4f8e-2f47-4f4e-9a39-6b0b9f7c1d2e"
		if _, err := q.Enqueue(context.Background(), layout.Envelope{ID: ghost, Type: "test.ok"}.Marshal(), 0, 0); err != nil {
			t.Fatal(err)
		}
		p := newProc(t, e.store, reg, e.cfg())
		start(t, p)
		e.waitState(unknown, model.StatePoisoned, 10*time.Second)
		e.waitState(res.ID, model.StatePoisoned, 10*time.Second)
		e.waitQueueEmpty("commands", 10*time.Second)
		want := map[string]string{unknown: model.ReasonUnknownType, res.ID: model.ReasonDecode, ghost: model.ReasonNoCommand}
		var malformedID string
		eventually(t, 5*time.Second, "the malformed message's poison entry", func() bool {
			page, err := e.reader.ListPoison(context.Background(), model.PoisonQuery{})
			if err != nil {
				t.Fatal(err)
			}
			for _, pe := range page.Entries {
				if pe.Reason == model.ReasonMalformed {
					malformedID = pe.CommandID
					if !strings.Contains(pe.LastError, "this is not an envelope") {
						t.Fatalf("malformed entry does not show the text: %+v", pe)
					}
				}
			}
			return malformedID != ""
		})
		if malformedID != m.ID {
			t.Fatalf("malformed entry keyed %q, want message ID %q", malformedID, m.ID)
		}
		for id, reason := range want {
			pe, err := e.reader.GetPoison(context.Background(), id)
			if err != nil || pe.Reason != reason || pe.LastError == "" {
				t.Fatalf("poison entry of %s: %+v %v (want reason %q)", id, pe, err, reason)
			}
		}
		// Entries without a stored command cannot be requeued (nothing to
		// run) but an operator can discard them.
		for _, id := range []string{malformedID, ghost} {
			if err := e.reader.Requeue(context.Background(), id, "op"); !errors.Is(err, model.ErrNoCommand) {
				t.Fatalf("Requeue of orphan entry %s: %v, want ErrNoCommand", id, err)
			}
			if err := e.reader.Discard(context.Background(), id, "op"); err != nil {
				t.Fatalf("Discard of orphan entry %s: %v", id, err)
			}
			if _, err := e.reader.GetPoison(context.Background(), id); !errors.Is(err, model.ErrNotFound) {
				t.Fatalf("orphan entry %s still there after Discard: %v", id, err)
			}
		}
	})
}

func TestPanicRecordedWithStack(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var runs atomic.Int64
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			if runs.Add(1) == 1 {
				panicInHandler()
			}
			return nil
		}, registry.Options{Retry: fastRetry})
		p := newProc(t, e.store, reg, e.cfg())
		start(t, p)
		id := e.issue(e.issuer(p.Notify), okCmd{})
		e.waitState(id, model.StateCompleted, 10*time.Second)
		evs := e.events(id)
		if !equalKinds(kinds(evs), model.EventCreated, model.EventStarted, model.EventFailed, model.EventStarted, model.EventCompleted) {
			t.Fatalf("events %v", kinds(evs))
		}
		f := evs[2]
		if !strings.Contains(f.Error, "panic: boom") || !strings.Contains(f.Detail, "panicInHandler") {
			t.Fatalf("failed event %q, detail %q", f.Error, f.Detail)
		}
	})
}

func panicInHandler() { panic("boom") }

func TestLongHandlerRenewsLease(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		// 10 s: each renewal, sent at half the lease, has 4.5 s to be
		// answered. The handler runs until its lease was renewed twice
		// (longer than one lease), not for a wall-clock time: with a 6 s
		// lease and 18 s of work, a CI machine running every package's
		// Azurite at once once let a renewal miss its 2.7 s, and the
		// completion was then counted as a lost lease.
		const lease = 10 * time.Second
		reg := registry.NewRegistry()
		var running, maxRunning, runs, renewals atomic.Int64
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			runs.Add(1)
			n := running.Add(1)
			defer running.Add(-1)
			for {
				m := maxRunning.Load()
				if n <= m || maxRunning.CompareAndSwap(m, n) {
					break
				}
			}
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for renewals.Load() < 2 { // the work: until two renewals kept it
				select {
				case <-tick.C:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}, registry.Options{Lease: lease, Timeout: 10 * lease})
		cfg := e.cfg()
		cfg.StartedWriteDelay = 100 * time.Millisecond
		p1 := newProc(t, countUpdates(e.store, &renewals), reg, cfg)
		cfg.Worker += "-2"
		p2 := newProc(t, countUpdates(e.open(), &renewals), reg, cfg)
		start(t, p1)
		start(t, p2)
		id := e.issue(e.issuer(nil), okCmd{})
		e.waitState(id, model.StateCompleted, 60*time.Second)
		if runs.Load() != 1 || maxRunning.Load() != 1 {
			t.Fatalf("handler ran %d times, at most %d at once", runs.Load(), maxRunning.Load())
		}
		if k := kinds(e.events(id)); !equalKinds(k, model.EventCreated, model.EventStarted, model.EventCompleted) {
			t.Fatalf("events %v", k)
		}
	})
}

func TestRedeliveredCompletedNotRun(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var runs atomic.Int64
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { runs.Add(1); return nil }, registry.Options{})
		p := newProc(t, e.store, reg, e.cfg())
		start(t, p)
		id := e.issue(e.issuer(p.Notify), okCmd{})
		e.waitState(id, model.StateCompleted, 10*time.Second)
		e.waitQueueEmpty("commands", 5*time.Second)
		before := len(e.events(id))
		// A duplicate message (e.g. the reconciler's, or a redelivery).
		if _, err := e.queue("commands").Enqueue(context.Background(), layout.Envelope{ID: id, Type: "test.ok"}.Marshal(), 0, 0); err != nil {
			t.Fatal(err)
		}
		p.Notify("commands")
		e.waitQueueEmpty("commands", 5*time.Second)
		if runs.Load() != 1 || len(e.events(id)) != before {
			t.Fatalf("handler ran %d times; events %d → %d", runs.Load(), before, len(e.events(id)))
		}
	})
}

func TestMultiStepResumes(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var mu sync.Mutex
		var stepsRun []int // (attempt*10 + step)
		blocked := make(chan struct{}, 1)
		register(t, reg, func(ctx context.Context, c stepCmd, run *registry.Attempt) error {
			for s := run.LastStep() + 1; s <= 3; s++ {
				mu.Lock()
				stepsRun = append(stepsRun, run.Number()*10+s)
				mu.Unlock()
				if run.Number() == 1 && s == 2 {
					blocked <- struct{}{}
					<-ctx.Done() // killed mid-way through step 2
					return ctx.Err()
				}
				if err := run.CompleteStep(ctx, s, "done"); err != nil {
					return err
				}
			}
			return nil
		}, registry.Options{Lease: 5 * time.Second, Retry: fastRetry}) // 5 s: a loaded Azurite's renewal does not end attempt 1 before step 2
		cfg := e.cfg()
		cfg.DrainTimeout = 50 * time.Millisecond
		p1 := newProc(t, e.store, reg, cfg)
		stop1 := start(t, p1)
		id := e.issue(e.issuer(p1.Notify), stepCmd{})
		select {
		case <-blocked:
		case <-time.After(10 * time.Second):
			t.Fatal("handler never reached step 2")
		}
		stop1() // processor stopped: the handler is interrupted
		st, _ := e.reader.Get(context.Background(), id)
		if st.Step != 1 || st.State != model.StateRunning {
			t.Fatalf("after interruption: %+v", st)
		}
		p2 := newProc(t, e.store, reg, cfg)
		start(t, p2)
		st = e.waitState(id, model.StateCompleted, 30*time.Second) // p2 may wait out attempt 1's lease
		mu.Lock()
		got := slices.Clone(stepsRun)
		mu.Unlock()
		// Attempt 2 runs steps 2 and 3 (step 1 is done) — or, when that
		// delivery's lease ran out before its handler could start (a
		// loaded machine), a later attempt does.
		n := st.Attempts
		if len(got) != 4 || !slices.Equal(got[:2], []int{11, 12}) || n < 2 || got[2] != n*10+2 || got[3] != n*10+3 || st.Step != 3 {
			t.Fatalf("steps run %v, status %+v, want 11 12 then steps 2 and 3 in the last attempt", got, st)
		}
	})
}

// TestDuplicateMessageNeverRunsTwiceAtOnce: two messages for one command in
// the same batch (a re-issue's or the reconciler's duplicate): the processor
// runs the handler once; the second message waits out its lease and is then
// deleted without running, because the command is completed.
func TestDuplicateMessageNeverRunsTwiceAtOnce(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var runs, running, overlap atomic.Int64
		release := make(chan struct{})
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			runs.Add(1)
			if running.Add(1) > 1 {
				overlap.Add(1)
			}
			defer running.Add(-1)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, registry.Options{Lease: time.Second})
		id := e.issue(e.issuer(nil), okCmd{N: 1})
		if _, err := e.queue("commands").Enqueue(context.Background(), layout.Envelope{ID: id, Type: "test.ok"}.Marshal(), 0, 0); err != nil {
			t.Fatal(err)
		}
		p := newProc(t, e.store, reg, e.cfg())
		start(t, p)
		eventually(t, 10*time.Second, "the handler to start", func() bool { return running.Load() == 1 })
		close(release)
		e.waitState(id, model.StateCompleted, 10*time.Second)
		e.waitQueueEmpty("commands", 15*time.Second)
		if runs.Load() != 1 || overlap.Load() != 0 {
			t.Fatalf("handler ran %d times, %d overlapping; want once", runs.Load(), overlap.Load())
		}
		if n := countKind(e.events(id), model.EventCompleted); n != 1 {
			t.Fatalf("%d completed events", n)
		}
	})
}

func countKind(evs []model.Event, k model.EventKind) int {
	n := 0
	for _, e := range evs {
		if e.Kind == k {
			n++
		}
	}
	return n
}
