package retention_test

import (
	"slices"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/retention"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

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
		ctx := testenv.Ctx(t)
		c := testenv.NewClock(testenv.Day0)
		r := testenv.OpenAt(t, env, c)
		done := testenv.IssueAt(t, r.Store, c, "demo.Done")
		testenv.Complete(t, r.Store, done)
		runAt := testenv.Day0.Add(60 * testenv.Day)
		far := testenv.IssueScheduled(t, r.Store, c, runAt)
		table := (layout.Names{Prefix: env.Prefix}).TableOf(far)

		c.Add(10 * testenv.Day)
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
		c.Set(runAt.Add(time.Minute))
		rec, err := r.Load(ctx, far)
		if err != nil || !enqueue.Due(rec.Status, c.Now()) {
			t.Fatalf("at its time: %+v %v, want due", rec, err)
		}
		if err := r.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventCompleted, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
		if st, err := r.Get(ctx, far); err != nil || st.State != model.StateCompleted {
			t.Fatalf("completed: %+v %v", st, err)
		}

		// Due within the two-day slack: its table is pinned.
		c.Set(testenv.Day0.Add(100 * testenv.Day))
		soon := testenv.IssueScheduled(t, r.Store, c, c.Now().Add(12*testenv.Day))
		soonTable := (layout.Names{Prefix: env.Prefix}).TableOf(soon)
		c.Add(11 * testenv.Day)
		rep, err = retention.Sweep(ctx, r.Store, retention.Options{})
		if err != nil || rep.Pinned[soonTable] != 1 || rep.Moved != 0 {
			t.Fatalf("sweep a day before it is due: %+v %v, want its table pinned", rep, err)
		}
	})
}
