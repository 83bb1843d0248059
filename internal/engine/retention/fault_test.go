package retention_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/retention"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

// TestSweepKeepsTableWhenItsScanFails: the sweep reads a day table page by
// page and decides only once it has read all of it. When reading the table
// fails (Azurite behind a fault proxy refusing its queries), the sweep
// reports the error and drops nothing, although every command it could see
// is past retention; once the queries go through again, the next sweep
// drops the table.
func TestSweepKeepsTableWhenItsScanFails(t *testing.T) {
	t.Parallel()
	px := faultproxy.NewHTTP(t, azurite.ConnectionString(t))
	st, err := azure.Open(context.Background(), azure.Config{ConnectionString: px.ConnectionString,
		Retry: policy.RetryOptions{MaxRetries: 1, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	names := layout.Names{Prefix: "t" + uuid.NewString()[:8]}
	issued := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	now := issued
	r, err := read.Open(ctx, st, names, record.Options{Now: func() time.Time { return now }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for range 3 {
		id = layout.NewDayID(issued)
		if err := r.Store.Create(ctx, record.NewCommand{ID: id, Type: "demo.Done", Queue: model.DefaultQueue}); err != nil {
			t.Fatal(err)
		}
		rec, err := r.Store.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Store.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventCompleted, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	table := names.TableOf(id)
	now = issued.Add(10 * 24 * time.Hour) // past the 7 days of completed commands
	scan := px.Add(faultproxy.Match{Service: faultproxy.Table, Method: "GET", Path: table + "()"}, faultproxy.Refuse, -1)
	rep, err := retention.Sweep(ctx, r.Store, retention.Options{})
	if err == nil || len(rep.Dropped) != 0 {
		t.Fatalf("sweep with the day table's queries refused: %+v %v, want an error and nothing dropped", rep, err)
	}
	if tables, err := st.Tables(ctx, names.CommandsTable()); err != nil || !slices.Contains(tables, table) {
		t.Fatalf("day table %s after the failed sweep: listed %q (%v), want it kept", table, tables, err)
	}
	px.Remove(scan)
	rep, err = retention.Sweep(ctx, r.Store, retention.Options{})
	if err != nil || !slices.Equal(rep.Dropped, []string{table}) {
		t.Fatalf("sweep once the queries go through: %+v %v, want %s dropped", rep, err, table)
	}
}
