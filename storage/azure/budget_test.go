package azure_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

// faultyAzurite puts an in-process toxiproxy in front of Azurite's queue and
// table endpoints and returns a connection string through it, and a function
// that black-holes both (every byte dropped, connections kept open: storage
// that accepts connections but never answers) until the returned restore is
// called.
func faultyAzurite(t *testing.T) (conn string, blackHole func() (restore func())) {
	t.Helper()
	direct := azurite.ConnectionString(t)
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	var proxies []*toxiproxy.Proxy
	var parts []string
	for _, kv := range strings.Split(direct, ";") {
		k, v, _ := strings.Cut(kv, "=")
		if k == "QueueEndpoint" || k == "TableEndpoint" {
			u, err := url.Parse(v)
			if err != nil {
				t.Fatalf("%s %q: %v", k, v, err)
			}
			p := toxiproxy.NewProxy(srv, k, "127.0.0.1:0", u.Host)
			if err := p.Start(); err != nil {
				t.Fatalf("toxiproxy for %s: %v", k, err)
			}
			t.Cleanup(p.Stop)
			proxies = append(proxies, p)
			u.Host = p.Listen
			v = u.String()
		}
		parts = append(parts, k+"="+v)
	}
	if len(proxies) != 2 {
		t.Fatalf("connection string %q lacks QueueEndpoint or TableEndpoint", direct)
	}
	blackHole = func() func() {
		for _, p := range proxies {
			for _, dir := range []string{"upstream", "downstream"} {
				js := fmt.Sprintf(`{"name":"blackhole_%s","type":"timeout","stream":%q,"attributes":{"timeout":0}}`, dir, dir)
				if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
					t.Fatalf("add toxic: %v", err)
				}
			}
		}
		return func() {
			for _, p := range proxies {
				for _, dir := range []string{"upstream", "downstream"} {
					if err := p.Toxics.RemoveToxic(context.Background(), "blackhole_"+dir); err != nil {
						t.Errorf("remove toxic: %v", err)
					}
				}
			}
		}
	}
	return strings.Join(parts, ";"), blackHole
}

// TestCallBudgetBoundsBlackHole: with storage that accepts connections and
// never answers, a call under storage.WithCallBudget returns
// storage.ErrUnavailable after about (retries+1) × per-try, not the store's
// own minutes-long retry schedule. A call without a budget keeps the store's
// settings (it is still waiting when the budgeted one has given up).
func TestCallBudgetBoundsBlackHole(t *testing.T) {
	conn, blackHole := faultyAzurite(t)
	// The store's own budget is long, as the processor's is: 3 retries of
	// 60 s each.
	st, err := azure.Open(context.Background(), azure.Config{ConnectionString: conn})
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
	restore := blackHole()
	defer restore()

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
