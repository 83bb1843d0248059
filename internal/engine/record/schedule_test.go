package record_test

import (
	"slices"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/reconcile"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/retention"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// issueScheduled stores a command issued at c's time with run-at time
// runAt, with an ID that carries c's day (as the Issuer makes them).
func issueScheduled(t *testing.T, s *record.Store, c *clock, runAt time.Time) string {
	t.Helper()
	id := layout.NewDayID(c.now())
	if err := s.Create(ctxT(t), record.NewCommand{ID: id, Type: "demo.Later", Params: []byte(`{}`), Queue: model.DefaultQueue, RunAt: runAt}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return id
}

// TestSweepMovesFarScheduled: a command scheduled 60 days ahead lives in
// its issue day's table. When the sweep finds that table past retention,
// the command is not lost nor does it pin the table for two months: it is
// moved to the base table (like a poisoned one), the table is dropped,
// and the command still reads as scheduled, with its runAt and events. A
// command due within the sweep's two-day slack pins its table instead (it
// runs soon).
func TestSweepMovesFarScheduled(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := ctxT(t)
		c := newClock(day0)
		r := openAt(t, env, c)
		done := issueAt(t, r.Store, c, "demo.Done")
		complete(t, r.Store, done)
		runAt := day0.Add(60 * day)
		far := issueScheduled(t, r.Store, c, runAt)
		table := (layout.Names{Prefix: env.Prefix}).TableOf(far)

		c.add(10 * day)
		rep, err := retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || !slices.Equal(rep.Dropped, []string{table}) || rep.Moved != 1 || len(rep.Pinned) != 0 {
			t.Fatalf("sweep: %+v %v, want the scheduled command moved and its table dropped", rep, err)
		}
		st, err := r.Get(ctx, far)
		if err != nil || st.State != model.StateScheduled || !st.RunAt.Equal(runAt) {
			t.Fatalf("after the sweep: %+v %v, want scheduled at %s", st, err, runAt)
		}
		if evs, err := r.Events(ctx, far); err != nil || len(evs) != 1 || !evs[0].RunAt.Equal(runAt) {
			t.Fatalf("events after the move: %+v %v", evs, err)
		}
		// Due: it runs from the base table, and its record is written there.
		c.set(runAt.Add(time.Minute))
		rec, err := r.Load(ctx, far)
		if err != nil || !enqueue.Due(rec.Status, c.now()) {
			t.Fatalf("at its time: %+v %v, want due", rec, err)
		}
		if err := r.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventCompleted, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
		if st, err := r.Get(ctx, far); err != nil || st.State != model.StateCompleted {
			t.Fatalf("completed: %+v %v", st, err)
		}

		// Due within the two-day slack: its table is pinned.
		c.set(day0.Add(100 * day))
		soon := issueScheduled(t, r.Store, c, c.now().Add(12*day))
		soonTable := (layout.Names{Prefix: env.Prefix}).TableOf(soon)
		c.add(11 * day)
		rep, err = retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || rep.Pinned[soonTable] != 1 || rep.Moved != 0 {
			t.Fatalf("sweep a day before it is due: %+v %v, want its table pinned", rep, err)
		}
	})
}

// TestReconcileLeavesScheduled: the pending scan re-enqueues a command
// still pending 15 minutes after it could have run, not one that waits
// for its run-at time; once that time is 15 minutes past, it does (its
// message may be lost), with the recovery delay counted from then.
func TestReconcileLeavesScheduled(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := ctxT(t)
		c := newClock(time.Now())
		r := openAt(t, env, c)
		runAt := c.now().Add(2 * time.Hour)
		id := issueScheduled(t, r.Store, c, runAt)
		opts := reconcile.Options{ScanPending: true, SkipMarkers: true, PendingGrace: model.DefaultReconcileStaleAfter, Now: c.now}

		c.add(time.Hour)
		rep, err := reconcile.Pass(ctx, r.Enqueuer, opts)
		if err != nil || rep.Scanned != 1 || rep.Enqueued != 0 {
			t.Fatalf("scan an hour before its time: %+v %v, want it left alone", rep, err)
		}
		c.set(runAt.Add(20 * time.Minute))
		rep, err = reconcile.Pass(ctx, r.Enqueuer, opts)
		if err != nil || rep.Enqueued != 1 {
			t.Fatalf("scan 20 minutes after its time: %+v %v, want it re-enqueued", rep, err)
		}
		if st, err := r.Get(ctx, id); err != nil || !st.RunAt.Equal(runAt.UTC().Truncate(time.Millisecond)) {
			t.Fatalf("after the recovery: %+v %v, want its runAt kept", st, err)
		}
	})
}
