package processor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

func rawCmd(typ, params string) model.Raw {
	return model.Raw{Type: typ, Params: json.RawMessage(params)}
}

func TestRunForReturnsInTimeAndReleases(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		var ran atomic.Int64 // handlers that did their second of work
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			select { // one second of work
			case <-time.After(time.Second):
				ran.Add(1)
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, registry.Options{Lease: 5 * time.Second})
		iss := e.issuer(nil)
		const n = 10
		for i := 0; i < n; i++ {
			e.issue(iss, okCmd{N: i})
		}
		cfg := e.cfg()
		cfg.BatchSize, cfg.NewBatchThreshold, cfg.Concurrency = 4, 1, 2
		p := newProc(t, e.store, reg, cfg)
		// 5 s: at concurrency 2, 1 s handlers finish at most 2 a second,
		// and none in the box's last second. On a machine loaded enough
		// that fewer than two complete (each needs a dequeue, a completion
		// and a delete through a loaded Azurite), the run is tried again,
		// twice as long, up to 20 s; every run must return in time and
		// leave nothing leased but what a finished handler holds.
		q := e.queue("commands")
		completed := 0
		for d := 5 * time.Second; ; d *= 2 {
			began := time.Now()
			sum, err := p.RunFor(context.Background(), d)
			took := time.Since(began)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("RunFor(%s): %+v", d, sum)
			if took >= d || sum.Duration >= d {
				t.Fatalf("RunFor(%s) took %s", d, took)
			}
			completed += sum.Completed
			if sum.Completed > 2*int(d/time.Second-1) || sum.Failed != 0 || sum.Interrupted != 0 ||
				(sum.StoppedBecause != model.StopDeadline && (sum.StoppedBecause != model.StopIdle || completed != n)) {
				t.Fatalf("summary %+v", sum)
			}
			// Nothing is left leased but what a handler finished: on a
			// loaded machine the completion (or its message's delete) of a
			// handler that returned just before the end may still be on
			// its way at the deadline; that message stays leased until its
			// lease ends, as after any storage call cut short. A message
			// whose handler did not run to its end is visible.
			peek, err := q.Peek(context.Background(), 32)
			if err != nil {
				t.Fatal(err)
			}
			count, err := q.ApproximateCount(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			done := int(ran.Load())
			deleted, invisible := n-count, count-len(peek)
			if completed > done || deleted > completed || invisible > done-deleted ||
				(done == completed && (invisible != 0 || deleted != completed)) {
				t.Fatalf("after RunFor: %d visible, %d in queue, %d handlers finished, %d completions counted: want every message visible but those of finished handlers not yet deleted", len(peek), count, done, completed)
			}
			if invisible > 0 {
				t.Logf("%d handlers finished, %d completions counted, %d messages deleted: %d left leased (their completion was cut by the deadline)", done, completed, deleted, invisible)
			}
			if sum.Completed >= 2 {
				break
			}
			if d >= 20*time.Second {
				t.Fatalf("summary %+v: want at least 2 completions", sum)
			}
		}
		if h := p.Health(); h.State != model.ProcessorStopped || h.InFlight != 0 {
			t.Fatalf("health %+v", h)
		}
	})
}

// TestRunForIdleReturnsEarly: on an empty queue, RunFor stops as idle
// once the next wait and poll no longer fit, before its time is up. The
// poll's own duration counts (beside a CPU hog, an Azurite poll in flight
// at the end made it stop on the deadline).
func TestRunForIdleReturnsEarly(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, registry.Options{})
		cfg := e.cfg()
		cfg.MinPollInterval, cfg.MaxPollInterval = 200*time.Millisecond, 800*time.Millisecond
		cfg.HandlerDurationEstimate = 100 * time.Millisecond
		p := newProc(t, e.store, reg, cfg)
		// A poll slower than the ones before it (a loaded Azurite, beside
		// a CPU hog, under the race detector) can still be out when the
		// time is up: that run stops on its deadline, rightly. It is tried
		// again, twice as long, up to 8 s: one of them must stop as idle.
		for d := 2 * time.Second; ; d *= 2 {
			sum, err := p.RunFor(context.Background(), d)
			if err != nil || sum.Duration >= d || sum.Processed != 0 {
				t.Fatalf("RunFor(%s): summary %+v err %v", d, sum, err)
			}
			if sum.StoppedBecause == model.StopIdle {
				break
			}
			if sum.StoppedBecause != model.StopDeadline || d >= 8*time.Second {
				t.Fatalf("RunFor(%s): summary %+v, want stopped as idle before its time", d, sum)
			}
			t.Logf("RunFor(%s) stopped on its deadline (a poll out at the end): again for %s", d, 2*d)
		}
	})
}

func TestBackoffGrowsAndResets(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, registry.Options{})
		var mu sync.Mutex
		var polls []model.Observation
		cfg := e.cfg()
		cfg.MinPollInterval, cfg.MaxPollInterval = 20*time.Millisecond, 320*time.Millisecond
		cfg.Observer = onPoll(func(ev model.Observation) { mu.Lock(); polls = append(polls, ev); mu.Unlock() })
		snapshot := func() []model.Observation {
			mu.Lock()
			defer mu.Unlock()
			return append([]model.Observation(nil), polls...)
		}
		p := newProc(t, e.store, reg, cfg)
		start(t, p)
		eventually(t, 10*time.Second, "seven empty polls", func() bool { return len(snapshot()) >= 7 })
		ps := snapshot()
		base := 20 * time.Millisecond
		for i := 0; i < 7; i++ {
			ev := ps[i]
			if ev.Received != 0 || ev.Err != nil {
				t.Fatalf("poll %d: %+v", i, ev)
			}
			hi := min(time.Duration(float64(base)*(1+model.DefaultPollJitter)), 320*time.Millisecond)
			if ev.Wait < base || ev.Wait > hi {
				t.Fatalf("poll %d waits %s, want %s..%s (all %v)", i, ev.Wait, base, hi, waits(ps))
			}
			if i > 0 && ps[i].Time.Sub(ps[i-1].Time) < ps[i-1].Wait {
				t.Fatalf("poll %d came %s after the previous, before its wait %s", i, ps[i].Time.Sub(ps[i-1].Time), ps[i-1].Wait)
			}
			base = min(2*base, 320*time.Millisecond)
		}
		// A message resets the backoff (issued without Notify).
		e.issue(e.issuer(nil), okCmd{})
		eventually(t, 10*time.Second, "a poll receiving the message, then an empty one", func() bool {
			ps := snapshot()
			for i, ev := range ps {
				if ev.Received > 0 && i+1 < len(ps) {
					return true
				}
			}
			return false
		})
		// The poll that received it (fewer than asked, no wake-up: the
		// queue is empty) waits MinPollInterval instead of dequeuing again
		// at once; the next empty poll waits twice that.
		ps = snapshot()
		for i, ev := range ps {
			if ev.Received > 0 {
				next := ps[i+1]
				if ev.Wait < 20*time.Millisecond || ev.Wait > 24*time.Millisecond || next.Received != 0 || next.Wait < 40*time.Millisecond || next.Wait > 48*time.Millisecond {
					t.Fatalf("after the message: %+v then %+v", ev, next)
				}
				break
			}
		}
	})
}

func waits(ps []model.Observation) []time.Duration {
	out := make([]time.Duration, len(ps))
	for i, p := range ps {
		out[i] = p.Wait
	}
	return out
}

func TestNotifyWakesAtOnce(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, registry.Options{})
		var polls atomic.Int64
		cfg := e.cfg()
		cfg.MinPollInterval, cfg.MaxPollInterval = time.Minute, time.Minute
		cfg.Observer = onPoll(func(model.Observation) { polls.Add(1) })
		p := newProc(t, e.store, reg, cfg)
		start(t, p)
		eventually(t, 5*time.Second, "the first poll", func() bool { return polls.Load() == 1 })
		id := e.issue(e.issuer(p.Notify), okCmd{})
		e.waitState(id, model.StateCompleted, 5*time.Second) // far less than the minute's wait
	})
}

func TestEnqueueFailureReconciled(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		fs := &faultyStore{Store: e.store}
		fs.failEnqueue.Store(true)
		iss, err := issuer.NewIssuer(fs, issuer.IssuerOptions{Prefix: e.prefix, EnqueueRetry: -1})
		if err != nil {
			t.Fatal(err)
		}
		res, err := iss.Issue(context.Background(), okCmd{N: 1})
		if !errors.Is(err, model.ErrEnqueueFailed) || res.ID == "" {
			t.Fatalf("issue: %v %+v", err, res)
		}
		if n, _ := e.queue("commands").ApproximateCount(context.Background()); n != 0 {
			t.Fatalf("queue has %d messages", n)
		}
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, quickRecovery)
		cfg := e.cfg()
		cfg.StartedWriteDelay = quickStarted
		cfg.ReconcileInterval = time.Hour // runs once at start
		cfg.ReconcileGrace = time.Nanosecond
		p := newProc(t, e.store, reg, cfg)
		start(t, p)
		e.waitState(res.ID, model.StateCompleted, 10*time.Second)
		cmds, err := e.store.Table(context.Background(), layout.Names{Prefix: e.prefix}.CommandsTable())
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "the unqueued marker to be removed", func() bool {
			page, err := cmds.Query(context.Background(), storage.Query{PartitionKey: layout.UnqueuedPartition})
			if err != nil {
				t.Fatal(err)
			}
			return len(page.Entities) == 0
		})
	})
}

// TestReconcileScanSchedule: a command stored by a process that crashed
// before enqueueing (no message, no marker) is found by the pending scan the
// processor runs every ReconcileScanInterval, and completes.
func TestReconcileScanSchedule(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		id := uuid.NewString()
		if err := e.reader.Store.Create(context.Background(), record.NewCommand{ID: id, Type: "test.ok", Params: []byte(`{"n":1}`), Queue: "commands"}); err != nil {
			t.Fatal(err)
		}
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, quickRecovery)
		cfg := e.cfg()
		cfg.StartedWriteDelay = quickStarted
		cfg.ReconcileInterval = 50 * time.Millisecond
		cfg.ReconcileScanInterval = 200 * time.Millisecond
		cfg.ReconcileStaleAfter = time.Nanosecond
		p := newProc(t, e.store, reg, cfg)
		start(t, p)
		// Quick when the machine is (a scan within 200 ms, then one
		// delivery); the bound is for a loaded one, where each scan's
		// requeue and each delivery through Azurite can take seconds.
		e.waitState(id, model.StateCompleted, 30*time.Second)
		// With a stale-after of 1 ns a slow run may scan (and requeue) more
		// than once before the command starts; each requeue is a harmless
		// duplicate. On a loaded machine a delivery's 1 s lease may also
		// end before its renewal lands (a lease_lost event, before or after
		// the run). What matters: found by the scan, started once,
		// completed once, after it started.
		ks := kinds(e.events(id))
		started, completed := slices.Index(ks, model.EventStarted), slices.Index(ks, model.EventCompleted)
		if len(ks) < 4 || ks[0] != model.EventCreated || ks[1] != model.EventRequeued || started < 0 || completed < started {
			t.Fatalf("events %v, want created, requeued…, started, completed", ks)
		}
		for i, k := range ks[1:] {
			switch {
			case k == model.EventStarted && i+1 != started, k == model.EventCompleted && i+1 != completed:
				t.Fatalf("events %v: started or completed twice", ks)
			case k != model.EventStarted && k != model.EventCompleted && k != model.EventRequeued && k != model.EventLeaseLost:
				t.Fatalf("events %v: only requeued and lease_lost events may come beside started and completed", ks)
			}
		}
	})
}

func TestTwoProcessorsEachCommandOnce(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		const n = 500
		reg := registry.NewRegistry()
		var runs sync.Map
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			v, _ := runs.LoadOrStore(run.ID(), new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
			return nil
		}, registry.Options{})
		cfg := e.cfg()
		p1 := newProc(t, e.store, reg, cfg)
		cfg.Worker += "-2"
		p2 := newProc(t, e.open(), reg, cfg)
		start(t, p1)
		start(t, p2)
		iss := e.issuer(nil)
		ids := make([]string, n)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 8 {
					res, err := iss.Issue(context.Background(), okCmd{N: i})
					if err != nil {
						errs <- err
						return
					}
					ids[i] = res.ID
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		e.waitQueueEmpty("commands", 60*time.Second)
		workers := map[string]int{}
		for _, id := range ids {
			evs := e.events(id)
			completed := 0
			for _, ev := range evs {
				if ev.Kind == model.EventCompleted {
					completed++
					workers[ev.Worker]++
				}
			}
			if completed != 1 {
				t.Fatalf("command %s has %d completed events: %v", id, completed, kinds(evs))
			}
		}
		dup := 0
		runs.Range(func(_, v any) bool {
			if v.(*atomic.Int64).Load() != 1 {
				dup++
			}
			return true
		})
		t.Logf("%s: completions by worker %v; handlers run more than once: %d", e.driver, workers, dup)
	})
}

func TestPoisonListNewestFirst(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			return registry.Permanent(fmt.Errorf("bad %d", c.N))
		}, registry.Options{})
		register(t, reg, func(ctx context.Context, c otherCmd, run *registry.Attempt) error {
			return registry.Permanent(errors.New("other bad"))
		}, registry.Options{})
		p := newProc(t, e.store, reg, e.cfg())
		start(t, p)
		iss := e.issuer(p.Notify)
		var ids []string
		for i := 0; i < 3; i++ {
			id := e.issue(iss, okCmd{N: i})
			e.waitState(id, model.StatePoisoned, 10*time.Second)
			ids = append(ids, id)
		}
		other := e.issue(iss, otherCmd{})
		e.waitState(other, model.StatePoisoned, 10*time.Second)
		page, err := e.reader.ListPoison(context.Background(), model.PoisonQuery{Type: "test.ok"})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Entries) != 3 {
			t.Fatalf("%d entries", len(page.Entries))
		}
		for i, pe := range page.Entries {
			want := ids[2-i]
			if pe.CommandID != want || pe.Type != "test.ok" || pe.Reason != model.ReasonPermanent ||
				pe.LastError != fmt.Sprintf("permanent: bad %d", 2-i) || pe.DequeueCount != 1 || pe.Queue != "commands" || pe.PoisonedAt.IsZero() {
				t.Fatalf("entry %d: %+v, want command %s", i, pe, want)
			}
			if i > 0 && pe.PoisonedAt.After(page.Entries[i-1].PoisonedAt) {
				t.Fatalf("entries not newest first: %+v", page.Entries)
			}
		}
		all, err := e.reader.ListPoison(context.Background(), model.PoisonQuery{})
		if err != nil || len(all.Entries) != 4 || all.Entries[0].CommandID != other {
			t.Fatalf("all entries %+v %v", all.Entries, err)
		}
	})
}

func TestHealthFaultsAndFlywheel(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		fs := &faultyStore{Store: e.store}
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, registry.Options{})
		var alerts atomic.Int64
		var unhealthyAlert atomic.Bool
		cfg := e.cfg()
		cfg.UnhealthyAfter, cfg.Flywheel = 3, true
		cfg.Observer = model.ObserverFunc(func(o model.Observation) {
			switch {
			case o.Kind == model.ObservedAlert:
				alerts.Add(1)
			case o.Kind == model.ObservedHealth && o.Health.State == model.ProcessorUnhealthy:
				unhealthyAlert.Store(true)
			}
		})
		p := newProc(t, fs, reg, cfg)
		if h := p.Health(); h.State != model.ProcessorStarting {
			t.Fatalf("health before start %+v", h)
		}
		fs.failDequeue.Store(true)
		start(t, p)
		eventually(t, 5*time.Second, "unhealthy", func() bool { return p.Health().State == model.ProcessorUnhealthy })
		h := p.Health()
		if !unhealthyAlert.Load() || alerts.Load() < 3 || h.ConsecutiveFaults < 3 || h.LastError == "" {
			t.Fatalf("health %+v alerts %d", h, alerts.Load())
		}
		// Flywheel: no more pulling while unhealthy, even once storage is back.
		fs.failDequeue.Store(false)
		eventually(t, 2*time.Second, "the in-progress poll to end", func() bool { return p.Health().State == model.ProcessorUnhealthy })
		id := e.issue(e.issuer(p.Notify), okCmd{})
		polls := fs.dequeues.Load()
		deadline := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(deadline) { // several poll intervals pass without a dequeue
			if fs.dequeues.Load() > polls+1 {
				t.Fatalf("processor kept dequeuing while unhealthy with Flywheel")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if st, _ := e.reader.Get(context.Background(), id); st.State != model.StatePending {
			t.Fatalf("command ran while unhealthy: %+v", st)
		}
		p.ResetHealth()
		e.waitState(id, model.StateCompleted, 5*time.Second)
		if !p.Health().Healthy() {
			t.Fatalf("health after reset %+v", p.Health())
		}
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (processor.Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	bad := processor.Config{BatchSize: 40, MinPollInterval: time.Minute, MaxPollInterval: time.Second, Tolerance: 0.5, PollJitter: 2}
	err := bad.Validate()
	if !errors.Is(err, processor.ErrInvalidConfig) {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{"BatchSize", "MinPollInterval", "Tolerance", "PollJitter"} { // the prefix is checked by cmdq.Config
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
	reg := registry.NewRegistry()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := processor.New(st, reg, processor.Config{}); !errors.Is(err, model.ErrNoHandlers) {
		t.Fatalf("empty registry: %v", err)
	}
}

// TestPipelinedDequeueFillsConcurrency: the poller keeps fetching while
// batches run and a handler slot is free, so one queue keeps every one of
// Concurrency handlers busy even when Concurrency is many batches.
func TestPipelinedDequeueFillsConcurrency(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		const conc = 8
		reg := registry.NewRegistry()
		var running, peak atomic.Int64
		release := make(chan struct{})
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			defer running.Add(-1)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, registry.Options{Lease: 10 * time.Second})
		iss := e.issuer(nil)
		ids := make([]string, conc)
		for i := range ids {
			ids[i] = e.issue(iss, okCmd{N: i})
		}
		cfg := e.cfg()
		cfg.BatchSize, cfg.Concurrency = 2, conc
		p := newProc(t, e.store, reg, cfg)
		start(t, p)
		eventually(t, 10*time.Second, "all 8 handlers running at once", func() bool { return running.Load() == conc })
		close(release)
		for _, id := range ids {
			e.waitState(id, model.StateCompleted, 10*time.Second)
		}
		if peak.Load() != conc {
			t.Fatalf("peak concurrency %d, want %d", peak.Load(), conc)
		}
	})
}
