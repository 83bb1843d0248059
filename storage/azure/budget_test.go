package azure_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

// TestCallBudgetBoundsBlackHole: with storage that accepts connections and
// never answers, a call under storage.WithCallBudget returns
// storage.ErrUnavailable after about (retries+1) × per-try, not the store's
// own minutes-long retry schedule. A call without a budget keeps the store's
// settings (it is still waiting when the budgeted one has given up).
func TestCallBudgetBoundsBlackHole(t *testing.T) {
	nw := faultproxy.NewNet(t, azurite.ConnectionString(t))
	// The store's own budget is long, as the processor's is: 3 retries of
	// 60 s each.
	st, err := azure.Open(context.Background(), azure.Config{ConnectionString: nw.ConnectionString})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tb, err := st.Table(ctx, unique("budget"))
	if err != nil {
		t.Fatal(err)
	}
	q, err := st.Queue(ctx, unique("budget"))
	if err != nil {
		t.Fatal(err)
	}
	nw.BlackHole(t)
	defer nw.Restore(t)

	// An unbudgeted call: still running when the budgeted ones are done.
	slow := make(chan error, 1)
	slowCtx, cancelSlow := context.WithCancel(ctx)
	defer cancelSlow()
	go func() {
		_, err := tb.Get(slowCtx, "pk", "rk")
		slow <- err
	}()

	const perTry, retries = 300 * time.Millisecond, 1
	for name, call := range map[string]func(context.Context) error{
		"table get": func(ctx context.Context) error { _, err := tb.Get(ctx, "pk", "rk"); return err },
		"queue enqueue": func(ctx context.Context) error {
			_, err := q.Enqueue(ctx, "x", 0, 0)
			return err
		},
		"table batch": func(ctx context.Context) error {
			_, err := tb.Batch(ctx, "pk", []storage.BatchOp{{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: "pk", RowKey: "a"}}})
			return err
		},
	} {
		bctx := storage.WithCallBudget(ctx, perTry, retries)
		start := time.Now()
		err := call(bctx)
		took := time.Since(start)
		if !errors.Is(err, storage.ErrUnavailable) {
			t.Errorf("%s: err %v, want storage.ErrUnavailable", name, err)
		}
		// 2 tries of 300 ms plus a retry delay of about 0.5 s; generous for a
		// loaded machine, far below one unbudgeted try (60 s).
		if took > 10*time.Second {
			t.Errorf("%s took %s under a budget of %s per try and %d retry", name, took, perTry, retries)
		}
	}
	select {
	case err := <-slow:
		t.Fatalf("the unbudgeted call ended early (%v); it should still be inside its first 60 s try", err)
	default:
	}
	cancelSlow()
	if err := <-slow; !errors.Is(err, context.Canceled) || errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("canceled call: %v, want context.Canceled and not ErrUnavailable", err)
	}
}
