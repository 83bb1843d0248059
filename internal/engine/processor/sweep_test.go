package processor_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// oldReader writes commands as if it were at (an injected clock).
func (e *env) oldReader(at time.Time) *read.Reader {
	e.t.Helper()
	r, err := read.Open(context.Background(), e.store, layout.Names{Prefix: e.prefix}, record.Options{Now: func() time.Time { return at }}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) oldCommand(r *read.Reader, at time.Time, events ...model.Event) string {
	e.t.Helper()
	ctx := context.Background()
	id := layout.NewDayID(at)
	if err := r.Store.Create(ctx, record.NewCommand{ID: id, Type: "test.ok", Params: []byte(`{"n":1}`), Queue: "commands"}); err != nil {
		e.t.Fatal(err)
	}
	if len(events) > 0 {
		rec, err := r.Store.Load(ctx, id)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := r.Store.Append(ctx, rec, events...); err != nil {
			e.t.Fatal(err)
		}
	}
	return id
}

// TestProcessorSweeps: the processor's daily pass (the pending scan) runs
// the retention sweep: a day table past retention is dropped, its poisoned
// command moved to the base table (still readable), and a table pinned by
// a command still running shows in model.Health and Retention.
func TestProcessorSweeps(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		d20 := time.Now().Add(-20 * 24 * time.Hour)
		d30 := time.Now().Add(-30 * 24 * time.Hour)
		old := e.oldReader(d20)
		done := e.oldCommand(old, d20, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventCompleted, Attempt: 1})
		bad := e.oldCommand(old, d20)
		rec, err := old.Store.Load(ctx, bad)
		if err != nil {
			t.Fatal(err)
		}
		if err := old.Store.Poison(ctx, rec, model.PoisonEntry{DequeueCount: 5, Reason: "ceiling"}); err != nil {
			t.Fatal(err)
		}
		stuck := e.oldCommand(e.oldReader(d30), d30, model.Event{Kind: model.EventStarted, Attempt: 1})
		pinned := layout.Names{Prefix: e.prefix}.TableOf(stuck)

		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, registry.Options{})
		cfg := e.cfg()
		cfg.ReconcileInterval = 50 * time.Millisecond
		cfg.ReconcileScanInterval = 50 * time.Millisecond
		p := newProc(t, e.store, reg, cfg)
		stop := start(t, p)
		defer stop()
		eventually(t, 20*time.Second, "a sweep that drops the table and moves the poisoned command", func() bool {
			r := p.Retention()
			return r.Dropped >= 1 && r.Moved >= 1 && r.Pinned[pinned] == 1
		})
		if h := p.Health(); h.Retention == nil || h.Retention.Pinned[pinned] != 1 {
			t.Fatalf("Health().Retention = %+v, want %s pinned by 1 command", h.Retention, pinned)
		}
		if st, err := e.reader.Get(ctx, bad); err != nil || st.State != model.StatePoisoned {
			t.Fatalf("moved poisoned command: %+v %v", st, err)
		}
		if _, err := e.reader.Get(ctx, done); !errors.Is(err, model.ErrExpired) {
			t.Fatalf("expired command: %v, want ErrExpired", err)
		}
		if st, err := e.reader.Get(ctx, stuck); err != nil || st.State != model.StateRunning {
			t.Fatalf("command in the pinned table: %+v %v", st, err)
		}
		// A late duplicate message of the expired command is deleted
		// without running and without a poison entry.
		before := p.Stats().Processed
		if err := e.reader.Enqueue(ctx, done, "test.ok", "commands"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "the expired command's message handled", func() bool { return p.Stats().Processed > before })
		if _, err := e.reader.GetPoison(ctx, done); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("poison entry for the expired command's message: %v, want none", err)
		}
		if s := p.Stats(); s.Completed != 0 || s.Poisoned != 0 {
			t.Fatalf("stats %+v: the expired command's message ran or was poisoned", s)
		}
	})
}

// mgmtCounter counts the store's management calls (listing and dropping
// tables), which instrument does not report.
type mgmtCounter struct {
	storage.Store
	n *atomic.Int64
}

func (m mgmtCounter) Tables(ctx context.Context, prefix string) ([]string, error) {
	m.n.Add(1)
	return m.Store.Tables(ctx, prefix)
}

func (m mgmtCounter) DeleteTable(ctx context.Context, name string) error {
	m.n.Add(1)
	return m.Store.DeleteTable(ctx, name)
}

// TestIdleCostWithRetention: on an empty deployment every reconciler pass
// — the daily pending scan with its retention sweep included — costs one
// storage call, as the hourly marker query does: an idle queue stays at 60
// polls + 1 = 61 calls an hour. Once there are commands, the scan pass
// sweeps.
func TestIdleCostWithRetention(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		// The table calls and the queries among them are counted together
		// under one lock and read together, so that a pass starting
		// between two reads cannot count in one and not the other.
		var mgmt atomic.Int64
		var mu sync.Mutex
		var tableOps, queries int64
		counts := func() (q, ops int64) {
			mu.Lock()
			defer mu.Unlock()
			return queries, tableOps
		}
		counted := instrument.Wrap(mgmtCounter{e.store, &mgmt}, instrument.Hooks{Before: func(op instrument.Op) error {
			if op >= instrument.TableInsert {
				mu.Lock()
				tableOps++
				if op == instrument.TableQuery {
					queries++
				}
				mu.Unlock()
			}
			return nil
		}})
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, registry.Options{})
		cfg := e.cfg()
		cfg.MaxPollInterval = time.Hour // the pollers' calls are not what is measured
		// Nor the heartbeat's (counted apart, idle_heartbeat_ops_per_hour):
		// its first write, from its own goroutine, can land after the
		// first pass on a loaded machine and count as an eleventh call.
		cfg.HeartbeatInterval = model.NoHeartbeat
		cfg.ReconcileInterval = 30 * time.Millisecond
		cfg.ReconcileScanInterval = 30 * time.Millisecond // every pass after the first is a scan
		p := newProc(t, counted, reg, cfg)
		stop := start(t, p)
		defer stop()
		// Past the pass at start (the marker query).
		eventually(t, 20*time.Second, "the first pass", func() bool { q, _ := counts(); return q >= 1 })
		q1, t1 := counts()
		m1 := mgmt.Load()
		eventually(t, 20*time.Second, "ten more passes", func() bool { q, _ := counts(); return q >= q1+10 })
		q2, t2 := counts()
		passes := q2 - q1
		calls := t2 - t1 + mgmt.Load() - m1
		if calls != passes {
			t.Fatalf("%d idle passes (scan + retention) cost %d calls (%d listing/dropping), want 1 each", passes, calls, mgmt.Load()-m1)
		}
		perHour := 60.0 + 1.0 // polls at MaxPollInterval 1 min + one 1-call pass an hour
		t.Logf("idle: each reconciler pass (marker query, or daily scan with retention) = 1 call → %.0f calls per queue per hour", perHour)
		// Empty passes do not sweep; once a command exists, a pass sweeps.
		if !p.Retention().LastSweep.IsZero() {
			t.Fatalf("an empty deployment's pass swept (%+v)", p.Retention())
		}
		e.waitState(e.issue(e.issuer(p.Notify), okCmd{N: 1}), model.StateCompleted, 10*time.Second)
		eventually(t, 20*time.Second, "a sweep once there is a command", func() bool { return !p.Retention().LastSweep.IsZero() })
	})
}

var _ = model.NoReconcile
