package shared_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/reconcile"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/multi"
)

// TestSharedPartitionsFirstAccountDown: over two accounts (Azurite
// instances, the first behind a proxy that refuses connections while it
// is "down"), every shared partition keeps working with the first account
// down, in a Store opened during the outage (it read nothing before):
// the pause stored before is read from the second account; a pause, a
// cancel mark, a day-table registration (the first Create of the day), a
// heartbeat, a schedule (its Since kept from before) and two markers (one
// of a command of each account: the first's goes to the second account)
// are written; the reconciler enqueues the second account's marked
// command and keeps the other's marker. After the first account returns,
// the reconciler enqueues that one too, a read of the control rows
// repairs the first account's rows, and the pending scan reads the day
// table registered in both accounts once.
func TestSharedPartitionsFirstAccountDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conns := azurite.ConnectionStrings(t, 2)
	px := faultproxy.NewNet(t, conns[0])
	openAz := func(cs string) storage.Store {
		st, err := azure.Open(ctx, azure.Config{ConnectionString: cs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	acct := []storage.Store{openAz(px.ConnectionString), openAz(conns[1])}
	spread := func() *multi.Store {
		s, err := multi.New([]multi.Member{{Name: "account 0", Store: keep{acct[0]}}, {Name: "account 1", Store: keep{acct[1]}}},
			multi.Options{ProbeInterval: 100 * time.Millisecond, MaxProbeInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	names := layout.Names{Prefix: fmt.Sprintf("sh%d", time.Now().UnixNano()%1e9)}
	before := spread()
	r1, err := read.Open(ctx, before, names, record.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r1.SetPaused(ctx, "held", true, "test:before"); err != nil {
		t.Fatal(err)
	}
	sched, err := r1.StoreSchedule(ctx, shared.Schedule{Name: "tick", Spec: "@every 1h", Type: "demo.Tick", Queue: model.DefaultQueue}, "test")
	if err != nil {
		t.Fatal(err)
	}
	idOn := func(s *multi.Store, i int) string {
		for {
			if id := layout.NewDayID(time.Now()); s.MemberOf(id) == i {
				return id
			}
		}
	}
	create := func(s *record.Store, id string) {
		t.Helper()
		if err := s.Create(ctx, record.NewCommand{ID: id, Type: "demo.Wait", Queue: model.DefaultQueue}); err != nil {
			t.Fatalf("Create %s: %v", id, err)
		}
	}
	onFirst := idOn(before, 0)
	create(r1.Store, onFirst)

	px.Refuse(t)
	during := spread()
	r2, err := read.Open(ctx, during, names, record.Options{}, nil)
	if err != nil {
		t.Fatalf("OpenReader with the first account down: %v", err)
	}
	rows, err := r2.ReadControl(ctx)
	if err != nil || !rows["held"].Paused || rows["held"].By != "test:before" {
		t.Fatalf("control rows with the first account down: %+v, %v; want held paused by test:before", rows, err)
	}
	if _, err := r2.SetPaused(ctx, "later", true, "test:during"); err != nil {
		t.Fatalf("pause with the first account down: %v", err)
	}
	if _, err := r2.MarkCancelling(ctx, "held"); err != nil {
		t.Fatalf("cancel mark with the first account down: %v", err)
	}
	onSecond := idOn(during, 1)
	create(r2.Store, onSecond) // the process's first Create of the day: it registers the day table
	for _, id := range []string{onFirst, onSecond} {
		if err := r2.MarkUnqueued(ctx, id, model.DefaultQueue); err != nil {
			t.Fatalf("marker of %s with the first account down: %v", id, err)
		}
	}
	rep1 := storage.ReplicasOf(r2.CommandsTable())[1]
	for _, id := range []string{onFirst, onSecond} {
		if _, err := rep1.Get(ctx, layout.UnqueuedPartition, id); err != nil {
			t.Fatalf("the marker of %s is not in the second account: %v", id, err)
		}
	}
	if _, err := r2.WriteBeat(ctx, shared.Beat{ID: "p-during", Name: "w", State: "polling", Every: time.Minute}); err != nil {
		t.Fatalf("heartbeat with the first account down: %v", err)
	}
	beats, err := r2.ReadBeats(ctx)
	if err != nil || len(beats) != 1 || beats[0].ID != "p-during" {
		t.Fatalf("heartbeats with the first account down: %+v, %v", beats, err)
	}
	again, err := r2.StoreSchedule(ctx, shared.Schedule{Name: "tick", Spec: "@every 1h", Type: "demo.Tick", Queue: model.DefaultQueue}, "test")
	if err != nil || !again.Since.Equal(sched.Since) {
		t.Fatalf("schedule with the first account down: %+v, %v; want Since %s kept", again, err, sched.Since)
	}
	rep, err := reconcile.Pass(ctx, r2.Enqueuer, reconcile.Options{})
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("reconcile with the first account down: %v, want the first account's command's load to fail as unavailable", err)
	}
	if rep.Markers != 2 || rep.Enqueued != 1 || rep.Unavailable != 1 {
		t.Fatalf("reconcile with the first account down: %+v, want 2 markers read from the second account, 1 enqueued, 1 account unavailable", rep)
	}

	px.Restore(t)
	// The replicas never probe: a call to the command's own account does.
	// Between probes its calls fail at once: poll at the probe interval.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := r2.Load(ctx, onFirst)
		if err == nil {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the first account did not come back: %v", err)
		}
	}
	rep, err = reconcile.Pass(ctx, r2.Enqueuer, reconcile.Options{ScanPending: false})
	if err != nil || rep.Enqueued != 1 || rep.Unavailable != 0 {
		t.Fatalf("reconcile after the return: %+v, %v; want the first account's command enqueued", rep, err)
	}
	q, err := during.Queue(ctx, names.Queue(model.DefaultQueue))
	if err != nil {
		t.Fatal(err)
	}
	// Both marked commands' messages are on the queue (delayed: recovery
	// enqueues wait RecoveryDelay), one in each account.
	if n, err := q.ApproximateCount(ctx); err != nil || n != 2 {
		t.Fatalf("messages after the return: %d, %v; want the two marked commands'", n, err)
	}

	// A read of the control rows repairs the first account's.
	if _, err := r2.ReadControl(ctx); err != nil {
		t.Fatal(err)
	}
	rep0 := storage.ReplicasOf(r2.CommandsTable())[0]
	row, err := rep0.Get(ctx, shared.ControlPartition, "later")
	if err != nil || row.Properties["Paused"] != true {
		t.Fatalf("the first account's row of the queue paused while it was down, after a read: %v, %v; want paused", row.Properties, err)
	}
	row, err = rep0.Get(ctx, shared.ControlPartition, "held")
	if ca, _ := row.Properties["CancelledAt"].(time.Time); err != nil || ca.IsZero() {
		t.Fatalf("the first account's row of held after a read: %v, %v; want the cancel mark", row.Properties, err)
	}
	// Both accounts register the day table; the scan reads it once.
	rep, err = reconcile.Pass(ctx, r2.Enqueuer, reconcile.Options{ScanPending: true, SkipMarkers: true, PendingGrace: time.Hour})
	if err != nil || rep.DayTables != 1 {
		t.Fatalf("pending scan: %+v, %v; want one day table", rep, err)
	}
}
