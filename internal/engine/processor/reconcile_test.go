package processor_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// quickRecovery and quickStarted make a re-enqueued command's message
// visible soon: a recovery enqueue is delayed by the type's lease plus
// StartedWriteDelay (docs/lifecycle.md, "Duplicate messages").
var quickRecovery = registry.Options{Lease: time.Second}

const quickStarted = 100 * time.Millisecond

// strand stores a command the way an Issuer whose enqueue failed leaves it:
// pending, no message, an ~unqueued marker.
func (e *env) strand() string {
	e.t.Helper()
	ctx := context.Background()
	id := uuid.NewString()
	if err := e.reader.Store.Create(ctx, record.NewCommand{ID: id, Type: "test.ok", Params: []byte(`{"n":1}`), Queue: "commands"}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.reader.Store.MarkUnqueued(ctx, id, "commands"); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// countQueries wraps st and counts its table queries (the reconciler's
// marker query and scan, and the control rows' read).
func countQueries(st storage.Store, n *atomic.Int64) storage.Store {
	return instrument.Wrap(st, instrument.Hooks{Before: func(op instrument.Op) error {
		if op == instrument.TableQuery {
			n.Add(1)
		}
		return nil
	}})
}

// TestReconcileSoonWhileActive: a marked command left by a failed enqueue
// is queued within ReconcileActiveInterval when the processor has work, not
// at the next idle ReconcileInterval (an hour).
func TestReconcileSoonWhileActive(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, quickRecovery)
		var queries atomic.Int64
		cfg := e.cfg()
		cfg.StartedWriteDelay = quickStarted
		cfg.ReconcileInterval = time.Hour
		cfg.ReconcileActiveInterval = 300 * time.Millisecond
		cfg.ReconcileGrace = time.Nanosecond
		p := newProc(t, countQueries(e.store, &queries), reg, cfg)
		start(t, p)
		eventually(t, 10*time.Second, "the reconciler's pass at start", func() bool { return queries.Load() >= 1 })
		stranded := e.strand()
		// Work arrives: the processor is active.
		e.waitState(e.issue(e.issuer(p.Notify), okCmd{N: 2}), model.StateCompleted, 10*time.Second)
		e.waitState(stranded, model.StateCompleted, 10*time.Second)
	})
}

// TestReconcileAgainAfterWaitingMarkers: a marker still inside its grace
// when the marker query runs (written late in an outage, after this
// processor's recovery pass was scheduled) is enqueued by one more query
// ReconcileGrace + 1 s later, not at the next interval: here an hour
// (seen in the chaos suite beside a CPU hog: two commands stranded past
// the 90 s settle).
func TestReconcileAgainAfterWaitingMarkers(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, quickRecovery)
		passes := &passLog{}
		cfg := e.cfg()
		cfg.Logger = zerolog.New(passes)
		cfg.StartedWriteDelay = quickStarted
		cfg.ReconcileInterval = time.Hour
		cfg.ReconcileActiveInterval = time.Hour
		// Long enough that the pass at start finds the marker inside it
		// however slowly the processor starts.
		cfg.ReconcileGrace = 10 * time.Second
		stranded := e.strand()
		p := newProc(t, e.store, reg, cfg)
		start(t, p)
		e.waitState(stranded, model.StateCompleted, 60*time.Second)
		got := passes.get()
		want := []reconciled{{Markers: 1, Waiting: 1}, {Markers: 1, Enqueued: 1}}
		if !slices.Equal(got, want) {
			t.Fatalf("reconciler passes %+v, want %+v: the one at start finds the marker inside its grace, the one after enqueues it", got, want)
		}
	})
}

// reconciled is what the processor logs of a reconciler pass that found
// markers ("cmdq processor: reconciled").
type reconciled struct {
	Markers, Enqueued, Waiting int
}

// passLog is a zerolog writer that keeps the reconciler's passes.
type passLog struct {
	mu     sync.Mutex
	passes []reconciled
}

func (l *passLog) Write(b []byte) (int, error) {
	var line struct {
		Message string `json:"message"`
		reconciled
	}
	if json.Unmarshal(b, &line) == nil && line.Message == "cmdq processor: reconciled" {
		l.mu.Lock()
		l.passes = append(l.passes, line.reconciled)
		l.mu.Unlock()
	}
	return len(b), nil
}

func (l *passLog) get() []reconciled {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.passes)
}

// TestReconcileSoonAfterStorageRecovers: storage refuses connections (the
// processor's calls fail), then comes back: the reconciler queues the
// commands whose enqueue failed meanwhile within seconds of recovery,
// although the processor is idle and its ReconcileInterval is an hour.
// Azure only: the embedded store cannot be taken away from its process.
func TestReconcileSoonAfterStorageRecovers(t *testing.T) {
	t.Parallel()
	conn := azurite.ConnectionString(t)
	nw := faultproxy.NewNet(t, conn)
	st, err := azure.Open(context.Background(), azure.Config{ConnectionString: nw.ConnectionString,
		Retry: policy.RetryOptions{MaxRetries: 1, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond, TryTimeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	direct, err := azure.Open(context.Background(), azure.Config{ConnectionString: conn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Close() })
	e := newEnv(t, "azure", direct, func() storage.Store { return direct })

	reg := registry.NewRegistry()
	register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, quickRecovery)
	var queries atomic.Int64
	cfg := e.cfg()
	cfg.StartedWriteDelay = quickStarted
	cfg.MaxPollInterval = 200 * time.Millisecond
	cfg.ReconcileInterval = time.Hour
	cfg.ReconcileActiveInterval = time.Hour
	cfg.ReconcileGrace = time.Nanosecond
	p := newProc(t, countQueries(st, &queries), reg, cfg)
	start(t, p)
	eventually(t, 10*time.Second, "the reconciler's pass at start", func() bool { return queries.Load() >= 1 })

	nw.Refuse(t)
	eventually(t, 20*time.Second, "the processor to see the outage", func() bool { return p.Health().ConsecutiveFaults > 0 })
	stranded := e.strand() // an Issuer elsewhere stored it and could not enqueue it
	nw.Restore(t)
	e.waitState(stranded, model.StateCompleted, 20*time.Second)
}

// TestRunForReconcilesInProportion: RunFor(d) runs the marker query with
// probability d/ReconcileInterval, so a scheduler's fleet of short runs
// costs what one long-lived processor does (not one query per run), and a
// run as long as the interval always runs it.
func TestRunForReconcilesInProportion(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, quickRecovery)
		var queries atomic.Int64
		cfg := e.cfg()
		cfg.StartedWriteDelay = quickStarted
		cfg.ReconcileInterval = 30 * time.Second
		cfg.ReconcileActiveInterval = 30 * time.Second
		cfg.ReconcileScanInterval = model.NoReconcile
		cfg.ReconcileGrace = time.Nanosecond
		cfg.HandlerDurationEstimate = 10 * time.Millisecond
		p := newProc(t, countQueries(e.store, &queries), reg, cfg)
		// The queues and tables are opened first: on a loaded machine
		// creating them on Azurite can take longer than a 100 ms run.
		if err := p.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
		queries.Store(0)
		const runs = 30
		for range runs {
			if _, err := p.RunFor(context.Background(), 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		// Each run has a 1-in-300 chance: P(more than 4 of 30) < 1e-7.
		if n := queries.Load(); n > 4 {
			t.Fatalf("%d runs of 100ms made %d marker queries; want about %.1f (d/ReconcileInterval each)", runs, n, runs*0.1/30)
		}

		stranded := e.strand()
		cfg.ReconcileInterval, cfg.ReconcileActiveInterval = time.Second, time.Second
		p = newProc(t, e.store, reg, cfg)
		// The re-enqueued message is delayed by the recovery delay (1.1 s,
		// 2 s on Azure, which counts whole seconds). 10 s: beside a CPU hog
		// a 4 s run ended before the recovered command was processed.
		// The run is cancelled once the command reads completed (its
		// handler's count is in the summary when RunFor returns: the
		// cancel drains running handlers); at 10 s it ends by itself. On a
		// loaded machine a dequeue on Azurite can take seconds, and a run
		// ends as idle when its next poll would not fit before its end:
		// then it runs again, twice as long, up to 40 s.
		for d := 10 * time.Second; ; d *= 2 {
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				for ctx.Err() == nil {
					if st, err := e.reader.Get(ctx, stranded); err == nil && st.State == model.StateCompleted {
						cancel()
						return
					}
					time.Sleep(20 * time.Millisecond) // polling interval
				}
			}()
			sum, err := p.RunFor(ctx, d)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			st, _ := e.reader.Get(context.Background(), stranded)
			if st.State == model.StateCompleted && sum.Completed == 1 {
				break
			}
			if st.State == model.StateCompleted || sum.Completed != 0 || d >= 40*time.Second {
				t.Fatalf("a %v run with a 1s ReconcileInterval: command %s, summary %+v", d, st.State, sum)
			}
			t.Logf("a %v run ended (%s) before the recovered command ran: again, twice as long", d, sum.StoppedBecause)
		}
	})
}
