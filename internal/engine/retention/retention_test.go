package retention_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/reconcile"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/retention"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage"
)

// TestSweepDropsExpiredDayTable: a day table whose commands are all
// completed and past retention is dropped whole; its IDs then read as
// expired (model.ErrExpired, also ErrNotFound). A completed command with
// a UUIDv4 (base table) is deleted on its own; it then reads as not found.
func TestSweepDropsExpiredDayTable(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := testenv.Ctx(t)
		c := testenv.NewClock(testenv.Day0)
		r := testenv.OpenAt(t, env, c)
		var ids []string
		for i := 0; i < 3; i++ {
			id := testenv.IssueAt(t, r.Store, c, "demo.Done")
			testenv.Complete(t, r.Store, id)
			ids = append(ids, id)
		}
		v4 := uuid.NewString()
		if err := r.Store.Create(ctx, record.NewCommand{ID: v4, Type: "demo.Done", Queue: model.DefaultQueue}); err != nil {
			t.Fatal(err)
		}
		testenv.Complete(t, r.Store, v4)
		table := (layout.Names{Prefix: env.Prefix}).TableOf(ids[0])
		if got := testenv.DayTables(t, env); !slices.Equal(got, []string{table}) {
			t.Fatalf("day tables %q, want [%s]", got, table)
		}
		// Within the retention (6 days later): nothing is removed.
		c.Add(6 * testenv.Day)
		rep, err := retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || len(rep.Dropped) != 0 || rep.Deleted != 0 {
			t.Fatalf("sweep within retention: %+v %v", rep, err)
		}
		// Past it: the table is dropped with one call, the v4 command deleted.
		c.Add(3 * testenv.Day)
		rep, err = retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || !slices.Equal(rep.Dropped, []string{table}) || rep.Deleted != 1 || rep.Moved != 0 || len(rep.Pinned) != 0 {
			t.Fatalf("sweep past retention: %+v %v", rep, err)
		}
		if got := testenv.DayTables(t, env); len(got) != 0 {
			t.Fatalf("day tables after the sweep: %q", got)
		}
		for _, id := range ids {
			_, err := r.Get(ctx, id)
			if !errors.Is(err, model.ErrExpired) || !errors.Is(err, model.ErrNotFound) || !strings.Contains(err.Error(), "2026-03-02") || !strings.Contains(err.Error(), "completed 7 days") {
				t.Fatalf("Get of an expired command: %v, want ErrExpired naming the day and the retention", err)
			}
			if _, err := r.Events(ctx, id); !errors.Is(err, model.ErrExpired) {
				t.Fatalf("Events of an expired command: %v", err)
			}
		}
		if _, err := r.Get(ctx, v4); !errors.Is(err, model.ErrNotFound) || errors.Is(err, model.ErrExpired) {
			t.Fatalf("Get of a deleted UUIDv4 command: %v, want ErrNotFound", err)
		}
		// The read did not bring the table back.
		if got := testenv.DayTables(t, env); len(got) != 0 {
			t.Fatalf("a read recreated day tables: %q", got)
		}
		// A second sweep finds nothing to do.
		rep, err = retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || rep.Listed != 0 || rep.Scanned != 0 {
			t.Fatalf("second sweep: %+v %v", rep, err)
		}
	})
}

// TestSweepKeepsPinnedTable: a command that is not final keeps its day
// table (and the completed ones in it) past retention; the sweep reports
// the table as pinned. Once it completes, the next sweep drops the table.
func TestSweepKeepsPinnedTable(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := testenv.Ctx(t)
		c := testenv.NewClock(testenv.Day0)
		r := testenv.OpenAt(t, env, c)
		done := testenv.IssueAt(t, r.Store, c, "demo.Done")
		testenv.Complete(t, r.Store, done)
		stuck := testenv.IssueAt(t, r.Store, c, "demo.Stuck")
		table := (layout.Names{Prefix: env.Prefix}).TableOf(stuck)
		c.Add(20 * testenv.Day)
		rep, err := retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || len(rep.Dropped) != 0 || rep.Pinned[table] != 1 {
			t.Fatalf("sweep: %+v %v, want %s pinned by 1 command", rep, err, table)
		}
		for _, id := range []string{done, stuck} {
			if _, err := r.Get(ctx, id); err != nil {
				t.Fatalf("Get %s in a pinned table: %v", id, err)
			}
		}
		testenv.Complete(t, r.Store, stuck)
		c.Add(8 * testenv.Day)
		rep, err = retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || !slices.Equal(rep.Dropped, []string{table}) {
			t.Fatalf("sweep after it completed: %+v %v", rep, err)
		}
	})
}

// TestSweepMovesPoisoned: a poisoned command outlives its day table: it is
// moved to the base table with its events, stays readable, and can be
// requeued there; the table is dropped. A discarded command within its 30
// days is moved too, and deleted from the base table once they pass.
func TestSweepMovesPoisoned(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := testenv.Ctx(t)
		c := testenv.NewClock(testenv.Day0)
		r := testenv.OpenAt(t, env, c)
		done := testenv.IssueAt(t, r.Store, c, "demo.Done")
		testenv.Complete(t, r.Store, done)
		bad := testenv.IssueAt(t, r.Store, c, "demo.Bad")
		testenv.PoisonAt5(t, r.Store, bad)
		gone := testenv.IssueAt(t, r.Store, c, "demo.Bad")
		testenv.PoisonAt5(t, r.Store, gone)
		if err := r.Discard(ctx, gone, "op"); err != nil {
			t.Fatal(err)
		}
		before, err := r.Events(ctx, bad)
		if err != nil {
			t.Fatal(err)
		}
		table := (layout.Names{Prefix: env.Prefix}).TableOf(bad)
		c.Add(9 * testenv.Day)
		rep, err := retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || rep.Moved != 2 || !slices.Equal(rep.Dropped, []string{table}) {
			t.Fatalf("sweep: %+v %v, want 2 moved and %s dropped", rep, err, table)
		}
		st, err := r.Get(ctx, bad)
		if err != nil || st.State != model.StatePoisoned {
			t.Fatalf("poisoned command after the move: %+v %v", st, err)
		}
		after, err := r.Events(ctx, bad)
		if err != nil || len(after) != len(before) || after[len(after)-1].Kind != model.EventPoisoned {
			t.Fatalf("events after the move: %+v %v (before: %d)", after, err, len(before))
		}
		if _, err := r.Get(ctx, done); !errors.Is(err, model.ErrExpired) {
			t.Fatalf("completed command: %v, want expired", err)
		}
		// Requeue works on the moved command: pending, a message enqueued.
		queue := env.Prefix + "-" + model.DefaultQueue
		msgs := len(env.Store.Messages(t, queue))
		if err := r.Requeue(ctx, bad, "op"); err != nil {
			t.Fatalf("Requeue of a moved command: %v", err)
		}
		if st, err := r.Get(ctx, bad); err != nil || st.State != model.StatePending {
			t.Fatalf("after requeue: %+v %v", st, err)
		}
		if n := len(env.Store.Messages(t, queue)); n != msgs+1 {
			t.Fatalf("%d messages after requeue, want %d", n, msgs+1)
		}
		// The requeued command is pending in the base table: kept. The
		// discarded one stays until its 30 days have passed.
		c.Add(10 * testenv.Day)
		rep, err = retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || rep.Deleted != 0 {
			t.Fatalf("sweep within the discarded retention: %+v %v", rep, err)
		}
		if st, err := r.Get(ctx, gone); err != nil || st.State != model.StateDiscarded {
			t.Fatalf("discarded command: %+v %v", st, err)
		}
		c.Add(15 * testenv.Day)
		rep, err = retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || rep.Deleted != 1 {
			t.Fatalf("sweep past the discarded retention: %+v %v", rep, err)
		}
		if _, err := r.Get(ctx, gone); !errors.Is(err, model.ErrExpired) {
			t.Fatalf("discarded command past retention: %v, want expired", err)
		}
		if st, err := r.Get(ctx, bad); err != nil || st.State != model.StatePending {
			t.Fatalf("requeued command after sweeps: %+v %v", st, err)
		}
	})
}

// TestSweepPerTypeRetention: a type kept longer than its day table is moved
// to the base table; a type kept shorter waits for the table's horizon
// (never before the issue window has passed).
func TestSweepPerTypeRetention(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := testenv.Ctx(t)
		c := testenv.NewClock(testenv.Day0)
		pol := record.RetentionPolicy{Of: func(typ string) (time.Duration, time.Duration) {
			switch typ {
			case "demo.Audit":
				return 90 * testenv.Day, 0
			case "demo.Ping":
				return time.Hour, 0
			}
			return 0, 0
		}, Min: time.Hour}
		r, err := read.Open(ctx, env.Store, layout.Names{Prefix: env.Prefix}, record.Options{Now: c.Now, Retention: pol}, nil)
		if err != nil {
			t.Fatal(err)
		}
		audit := testenv.IssueAt(t, r.Store, c, "demo.Audit")
		testenv.Complete(t, r.Store, audit)
		ping := testenv.IssueAt(t, r.Store, c, "demo.Ping")
		testenv.Complete(t, r.Store, ping)
		// Two days later the ping is past its hour, but the issue window
		// (a re-issue of its ID must still find it) keeps the table.
		c.Add(2*testenv.Day + 13*time.Hour)
		rep, err := retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || rep.Tables != 0 || len(rep.Dropped) != 0 {
			t.Fatalf("sweep inside the issue window: %+v %v", rep, err)
		}
		c.Add(2 * testenv.Day)
		rep, err = retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || rep.Moved != 1 || len(rep.Dropped) != 1 {
			t.Fatalf("sweep: %+v %v, want the audit command moved and the table dropped", rep, err)
		}
		if st, err := r.Get(ctx, audit); err != nil || st.State != model.StateCompleted {
			t.Fatalf("audit command: %+v %v", st, err)
		}
		if _, err := r.Get(ctx, ping); !errors.Is(err, model.ErrExpired) || !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("ping command: %v, want expired", err)
		}
	})
}

// TestConcurrentSweepersLoseNothing: several sweepers on one store (as
// several processors run it) drop the table once and move every poisoned
// command exactly once, each readable with all its events.
func TestConcurrentSweepersLoseNothing(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := testenv.Ctx(t)
		c := testenv.NewClock(testenv.Day0)
		r := testenv.OpenAt(t, env, c)
		var poisoned []string
		for i := 0; i < 40; i++ {
			id := testenv.IssueAt(t, r.Store, c, "demo.Mixed")
			if i%4 == 0 {
				testenv.PoisonAt5(t, r.Store, id)
				poisoned = append(poisoned, id)
			} else {
				testenv.Complete(t, r.Store, id)
			}
		}
		c.Add(9 * testenv.Day)
		const n = 3
		var wg sync.WaitGroup
		reps := make([]retention.Report, n)
		errs := make([]error, n)
		for i := 0; i < n; i++ {
			s := testenv.OpenAt(t, env, c) // separate processes' stores
			wg.Add(1)
			go func() {
				defer wg.Done()
				reps[i], errs[i] = retention.Sweep(ctx, s.Store, retention.Options{})
			}()
		}
		wg.Wait()
		dropped, moved := 0, 0
		for i := range reps {
			if errs[i] != nil && !errors.Is(errs[i], storage.ErrNotFound) && !strings.Contains(errs[i].Error(), "changed while it was moved") {
				t.Fatalf("sweeper %d: %v", i, errs[i])
			}
			dropped += len(reps[i].Dropped)
			moved += reps[i].Moved
		}
		// A sweeper that lost a race leaves the table for the next sweep.
		if rep, err := retention.Sweep(ctx, r.Store, retention.Options{}); err != nil {
			t.Fatalf("follow-up sweep: %v", err)
		} else {
			dropped += len(rep.Dropped)
			moved += rep.Moved
		}
		if dropped != 1 || moved != len(poisoned) {
			t.Fatalf("dropped %d tables, moved %d commands; want 1 and %d (reports %+v)", dropped, moved, len(poisoned), reps)
		}
		if got := testenv.DayTables(t, env); len(got) != 0 {
			t.Fatalf("day tables left: %q", got)
		}
		for _, id := range poisoned {
			st, err := r.Get(ctx, id)
			if err != nil || st.State != model.StatePoisoned {
				t.Fatalf("poisoned %s: %+v %v", id, st, err)
			}
			evs, err := r.Events(ctx, id)
			if err != nil || len(evs) != 4 {
				t.Fatalf("events of %s: %d %v, want 4 (created, started, failed, poisoned)", id, len(evs), err)
			}
			if _, err := r.GetPoison(ctx, id); err != nil {
				t.Fatalf("poison entry of %s: %v", id, err)
			}
		}
	})
}

// countingStore counts every call, the management ones (Tables,
// DeleteTable, a Table call that creates) included.
type countingStore struct {
	*testenv.Counting
	mu      sync.Mutex
	extra   map[string]int
	created map[string]bool
}

func (c *countingStore) bump(k string) {
	c.mu.Lock()
	c.extra[k]++
	c.mu.Unlock()
}

func (c *countingStore) Tables(ctx context.Context, prefix string) ([]string, error) {
	c.bump("Tables")
	return c.Counting.Tables(ctx, prefix)
}

func (c *countingStore) DeleteTable(ctx context.Context, name string) error {
	c.bump("DeleteTable")
	return c.Counting.DeleteTable(ctx, name)
}

func (c *countingStore) Table(ctx context.Context, name string) (storage.Table, error) {
	c.mu.Lock()
	if !c.created[name] {
		c.created[name] = true
		c.extra["CreateTable"]++ // Azure's Create Table, once per name
	}
	c.mu.Unlock()
	return c.Counting.Table(ctx, name)
}

func (c *countingStore) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.Counting.Total()
	for _, v := range c.extra {
		n += v
	}
	return n
}

func (c *countingStore) reset() {
	c.mu.Lock()
	c.extra = map[string]int{}
	c.mu.Unlock()
	c.Counting.Reset()
}

func (c *countingStore) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%s %v", c.Counting, c.extra)
}

// TestRetentionCost: retention costs at most 0.05 storage calls per command
// (amortised: the sweep of a day table of 1,000 completed commands is a
// few calls), nothing on issue after the first command of the day, and an
// idle deployment's daily pending scan stays one call.
func TestRetentionCost(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		// 2,000 calls and a sweep: a minute was too short for a loaded
		// Azurite (the sweep's query ran out of it). A bound, not a wait.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cs := &countingStore{Counting: env.Store, extra: map[string]int{}, created: map[string]bool{}}
		c := testenv.NewClock(testenv.Day0)
		names := layout.Names{Prefix: env.Prefix}
		r, err := read.Open(ctx, cs, names, record.Options{Now: c.Now}, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Idle, empty deployment: the daily pending scan is one query (the
		// day tables are registered in the base table it reads).
		cs.reset()
		rep, err := reconcile.Pass(ctx, r.Enqueuer, reconcile.Options{ScanPending: true, SkipMarkers: true, Now: c.Now})
		if err != nil || cs.total() != 1 {
			t.Fatalf("idle pending scan: %+v %v, cost %s, want 1 call", rep, err, cs)
		}
		// Issue 1,000 commands of one day: the first registers and creates
		// the day table (2 calls), every one is one batch.
		const n = 1000
		cs.reset()
		ids := make([]string, n)
		for i := range ids {
			ids[i] = testenv.IssueAt(t, r.Store, c, "demo.Done")
		}
		if cnt := cs.Counts(); cnt["Batch"] != n || cs.total() != n+2 {
			t.Fatalf("issuing %d commands cost %s, want %d batches + 1 registration + 1 table creation", n, cs, n)
		}
		for _, id := range ids {
			testenv.Complete(t, r.Store, id)
		}
		c.Add(9 * testenv.Day)
		cs.reset()
		rep2, err := retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || len(rep2.Dropped) != 1 || rep2.Scanned != n {
			t.Fatalf("sweep: %+v %v", rep2, err)
		}
		calls := cs.total()
		if perCmd := float64(calls) / n; perCmd > 0.05 {
			t.Fatalf("retention cost %d calls for %d commands = %.4f per command, want ≤ 0.05 (%s)", calls, n, perCmd, cs)
		}
		t.Logf("retention sweep of %d commands: %d calls (%.4f per command): %s", n, calls, float64(calls)/n, cs)
		if calls != rep2.Calls {
			t.Fatalf("SweepReport.Calls = %d, counted %d (%s)", rep2.Calls, calls, cs)
		}
		// Afterwards the idle scan is one call again.
		cs.reset()
		if _, err := reconcile.Pass(ctx, r.Enqueuer, reconcile.Options{ScanPending: true, SkipMarkers: true, Now: c.Now}); err != nil || cs.total() != 1 {
			t.Fatalf("idle pending scan after the sweep: %v, cost %s, want 1 call", err, cs)
		}
	})
}
