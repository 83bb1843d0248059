package faultproxy_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

func open(t *testing.T, conn string) storage.Store {
	t.Helper()
	st, err := azure.Open(context.Background(), azure.Config{ConnectionString: conn,
		Retry: policy.RetryOptions{MaxRetries: 2, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond, TryTimeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func queue(t *testing.T, st storage.Store, name string) storage.Queue {
	t.Helper()
	q, err := st.Queue(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestHTTPRules: Refuse loses the request (nothing lands); LoseAnswer lets
// it land and loses the answer, so the driver's transport retry lands a
// second copy of a non-idempotent request.
func TestHTTPRules(t *testing.T) {
	t.Parallel()
	conn := azurite.ConnectionString(t)
	px := faultproxy.NewHTTP(t, conn)
	name := "fp" + uuid.NewString()[:8]
	through, direct := queue(t, open(t, px.ConnectionString), name), queue(t, open(t, conn), name)
	ctx := context.Background()

	r := px.Add(faultproxy.Match{Method: "POST", Path: "/messages"}, faultproxy.Refuse, -1)
	if _, err := through.Enqueue(ctx, "refused", 0, 0); err == nil {
		t.Fatal("enqueue through a refusing rule succeeded")
	}
	if n, _ := direct.ApproximateCount(ctx); n != 0 || r.Hits() != 3 {
		t.Fatalf("refused enqueue: %d messages landed, rule hit %d times (want 0 and 3 tries)", n, r.Hits())
	}
	px.Remove(r)

	l := px.Add(faultproxy.Match{Method: "POST", Path: "/messages"}, faultproxy.LoseAnswer, 1)
	if _, err := through.Enqueue(ctx, "twice", 0, 0); err != nil {
		t.Fatalf("enqueue whose first answer was lost: %v (the retry should succeed)", err)
	}
	if n, _ := direct.ApproximateCount(ctx); n != 2 || l.Hits() != 1 || len(l.Answers()) != 1 || l.Answers()[0] != 201 {
		t.Fatalf("lost answer: %d messages (want 2: the first try landed), hits %d, hidden answers %v", n, l.Hits(), l.Answers())
	}
}

// TestNet: Refuse makes calls fail at once, BlackHole makes them hang until
// their deadline, Restore brings both back.
func TestNet(t *testing.T) {
	t.Parallel()
	nw := faultproxy.NewNet(t, azurite.ConnectionString(t))
	q := queue(t, open(t, nw.ConnectionString), "fp"+uuid.NewString()[:8])
	count := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := q.ApproximateCount(ctx)
		return err
	}
	if err := count(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	nw.Refuse(t)
	if err := count(5 * time.Second); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("refused: %v, want a connection error", err)
	}
	nw.Restore(t)
	if err := count(5 * time.Second); err != nil {
		t.Fatalf("after Refuse and Restore: %v", err)
	}
	nw.BlackHole(t)
	if err := count(500 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("black hole: %v, want the deadline to pass", err)
	}
	nw.Restore(t)
	if err := count(5 * time.Second); err != nil {
		t.Fatalf("after BlackHole and Restore: %v", err)
	}
}
