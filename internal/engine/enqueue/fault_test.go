package enqueue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
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
	r, err := read.Open(ctx, st, names, record.Options{}, nil)
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
