package issuer_test

import (
	"context"
	"testing"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// BenchmarkIssue issues commands on the embedded store and reports the
// storage operations per command (target: 2 — one batch, one enqueue).
func BenchmarkIssue(b *testing.B) {
	env := testenv.Open(b, "embedded")
	is, err := issuer.NewIssuer(env.Store, issuer.IssuerOptions{Prefix: env.Prefix})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := is.Issue(ctx, chargeCard{"warm", 1}); err != nil { // open tables and queue
		b.Fatal(err)
	}
	env.Store.Reset()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := is.Issue(ctx, chargeCard{"c", i}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(env.Store.Total())/float64(b.N), "storage-ops/cmd")
}

// BenchmarkIssueParallel issues from 32 goroutines (2 per CPU × 16), so the
// embedded store's group commit can share fsyncs between writers.
func BenchmarkIssueParallel(b *testing.B) {
	env := testenv.Open(b, "embedded")
	is, err := issuer.NewIssuer(env.Store, issuer.IssuerOptions{Prefix: env.Prefix})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := is.Issue(ctx, chargeCard{"warm", 1}); err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := is.Issue(ctx, chargeCard{"c", 1}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
