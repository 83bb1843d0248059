package reconcile_test

import (
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/reconcile"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// TestReconcileLeavesScheduled: the pending scan re-enqueues a command
// still pending 15 minutes after it could have run, not one that waits
// for its run-at time; once that time is 15 minutes past, it does (its
// message may be lost), with the recovery delay counted from then.
func TestReconcileLeavesScheduled(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := testenv.Ctx(t)
		c := testenv.NewClock(time.Now())
		r := testenv.OpenAt(t, env, c)
		runAt := c.Now().Add(2 * time.Hour)
		id := testenv.IssueScheduled(t, r.Store, c, runAt)
		opts := reconcile.Options{ScanPending: true, SkipMarkers: true, PendingGrace: model.DefaultReconcileStaleAfter, Now: c.Now}

		c.Add(time.Hour)
		rep, err := reconcile.Pass(ctx, r.Enqueuer, opts)
		if err != nil || rep.Scanned != 1 || rep.Enqueued != 0 {
			t.Fatalf("scan an hour before its time: %+v %v, want it left alone", rep, err)
		}
		c.Set(runAt.Add(20 * time.Minute))
		rep, err = reconcile.Pass(ctx, r.Enqueuer, opts)
		if err != nil || rep.Enqueued != 1 {
			t.Fatalf("scan 20 minutes after its time: %+v %v, want it re-enqueued", rep, err)
		}
		if st, err := r.Get(ctx, id); err != nil || !st.RunAt.Equal(runAt.UTC().Truncate(time.Millisecond)) {
			t.Fatalf("after the recovery: %+v %v, want its runAt kept", st, err)
		}
	})
}
