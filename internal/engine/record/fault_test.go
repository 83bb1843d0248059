package record_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/retention"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

// TestRequeueNotStrandedWhenQueueAndMarkerFail: an operator's requeue whose
// enqueue and reconciler marker are both refused (Azurite behind a fault
// proxy) leaves the command pending with nothing to queue it. The poison
// entry must stay, so the operator sees it and requeues again, which queues
// the command without a second requeued event.
func TestRequeueNotStrandedWhenQueueAndMarkerFail(t *testing.T) {
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
	r, err := enqueue.OpenReader(ctx, st, names, record.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := r.Store
	id := uuid.NewString()
	if err := s.Create(ctx, record.NewCommand{ID: id, Type: "demo.Requeue", Queue: model.DefaultQueue}); err != nil {
		t.Fatal(err)
	}
	rec, _ := s.Load(ctx, id)
	if err := s.Poison(ctx, rec, model.PoisonEntry{Reason: "permanent"}); err != nil {
		t.Fatal(err)
	}
	rq := px.Add(faultproxy.Match{Method: "POST", Path: "/messages"}, faultproxy.Refuse, -1)
	rm := px.Add(faultproxy.Match{Path: layout.UnqueuedPartition}, faultproxy.Refuse, -1)
	if err := r.Requeue(ctx, id, "carol"); err == nil || !strings.Contains(err.Error(), "requeue it again") {
		t.Fatalf("Requeue with the queue and the marker refused: %v, want an error saying to requeue again", err)
	}
	if got, _ := r.Get(ctx, id); got.State != model.StatePending {
		t.Fatalf("status %s", got.State)
	}
	if _, err := r.GetPoison(ctx, id); err != nil {
		t.Fatalf("poison entry removed although nothing will queue the command: %v", err)
	}
	px.Remove(rq)
	px.Remove(rm)
	if err := r.Requeue(ctx, id, "carol"); err != nil {
		t.Fatalf("second requeue: %v", err)
	}
	q, err := st.Queue(ctx, names.Queue(model.DefaultQueue))
	if err != nil {
		t.Fatal(err)
	}
	// The first requeue's enqueue may have landed after all: the second
	// one's message is delayed by the recovery delay (see
	// docs/lifecycle.md, "Duplicate messages").
	msgs, err := q.Peek(ctx, 32)
	n, cerr := q.ApproximateCount(ctx)
	if err != nil || cerr != nil || len(msgs) != 0 || n != 1 {
		t.Fatalf("queue after the second requeue: %d messages, visible %+v (%v %v); want one, delayed", n, msgs, err, cerr)
	}
	if _, err := r.GetPoison(ctx, id); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("entry after the second requeue: %v", err)
	}
	evs, _ := r.Events(ctx, id)
	n = 0
	for _, e := range evs {
		if e.Kind == model.EventRequeued {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d requeued events, want 1", n)
	}
	// Discard of such a command still answers "not poisoned".
	if err := r.Discard(ctx, id, "carol"); !errors.Is(err, model.ErrNotPoisoned) && !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("discard: %v", err)
	}
}

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
	r, err := enqueue.OpenReader(ctx, st, names, record.Options{Now: func() time.Time { return now }}, nil)
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
