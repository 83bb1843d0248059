package bench

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// benchEnv opens an embedded store (fsync on) in b's temporary directory.
func benchEnv(b *testing.B) *env {
	b.Helper()
	cfg, err := Config{Store: StoreEmbedded, Path: filepath.Join(b.TempDir(), "cmdq-data"), N: max(b.N, 1)}.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	e := &env{cfg: cfg, logf: func(string, ...any) {}}
	cleanup, err := e.open(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cleanup)
	return e
}

// BenchmarkIssue: 16 goroutines issue b.N commands on the embedded store
// (one write per command; concurrent writes share a log sync).
func BenchmarkIssue(b *testing.B) {
	e := benchEnv(b)
	iss, err := issuer.NewIssuer(e.counted, issuer.IssuerOptions{Prefix: e.cfg.Prefix})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := iss.Issue(context.Background(), benchCmd{Seq: -1}); err != nil {
		b.Fatal(err)
	}
	ops := e.counter.Total()
	st := e.emb.Stats()
	b.ResetTimer()
	cpu := cpuTime()
	elapsed, err := issueAll(context.Background(), iss, b.N, DefaultIssuers, time.Hour)
	cpu = cpuTime() - cpu
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cmds/s")
	b.ReportMetric(float64(e.counter.Total()-ops)/float64(b.N), "ops/cmd")
	reportCommits(b, e, st, elapsed)
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/cmd")
}

// reportCommits reports the embedded store's log syncs since st: writes per
// sync (group-commit size, "writes/commit") and the share of the wall time
// spent in fdatasync ("commit-busy"), and the block reads its cache missed
// per command ("cache-misses/cmd"), and the bytes written to the log, by
// flushes and by compactions per command ("log-B/cmd", "flush-B/cmd",
// "compact-B/cmd").
func reportCommits(b *testing.B, e *env, st embedded.Stats, elapsed time.Duration) {
	now := e.emb.Stats()
	if c := now.Commits - st.Commits; c > 0 {
		b.ReportMetric(float64(now.Writes-st.Writes)/float64(c), "writes/commit")
		b.ReportMetric(float64(c)/float64(b.N), "syncs/cmd")
		b.ReportMetric(float64(now.Writes-st.Writes)/float64(b.N), "writes/cmd")
	}
	b.ReportMetric((now.Busy-st.Busy).Seconds()/elapsed.Seconds(), "commit-busy")
	b.ReportMetric(float64(now.CacheMisses-st.CacheMisses)/float64(b.N), "cache-misses/cmd")
	b.ReportMetric(float64(now.LogBytes-st.LogBytes)/float64(b.N), "log-B/cmd")
	b.ReportMetric(float64(now.FlushedBytes-st.FlushedBytes)/float64(b.N), "flush-B/cmd")
	b.ReportMetric(float64(now.CompactedBytes-st.CompactedBytes)/float64(b.N), "compact-B/cmd")
}

// BenchmarkProcess: b.N queued commands drained by a processor with 100
// handlers and batch size 32 on the embedded store (burn-down).
func BenchmarkProcess(b *testing.B) {
	e := benchEnv(b)
	iss, err := issuer.NewIssuer(e.counted, issuer.IssuerOptions{Prefix: e.cfg.Prefix})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := issueAll(context.Background(), iss, b.N, DefaultIssuers, time.Hour); err != nil {
		b.Fatal(err)
	}
	reg, err := e.registry()
	if err != nil {
		b.Fatal(err)
	}
	ops := e.counter.Total()
	st := e.emb.Stats()
	b.ResetTimer()
	began, cpu := time.Now(), cpuTime()
	sp, err := e.startProcessor(context.Background(), reg, processor.Config{
		Prefix: e.cfg.Prefix, Concurrency: DefaultConcurrency, ReconcileInterval: model.NoReconcile,
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	err = waitFor(context.Background(), time.Hour, "drain", func() bool {
		return e.completed.Load() >= int64(b.N) && sp.p.Health().InFlight == 0
	})
	elapsed, cpu := time.Since(began), cpuTime()-cpu
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if err := sp.stop(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cmds/s")
	b.ReportMetric(float64(e.counter.Total()-ops)/float64(b.N), "ops/cmd")
	reportCommits(b, e, st, elapsed)
	// The drain's CPU (every thread of the process, the engine's
	// background work included), which load distorts less than the rate.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/cmd")
}

// BenchmarkEndToEnd: 16 goroutines issue b.N commands while a processor in
// the same process (woken by Notify) runs them; reports throughput and the
// Issue → handler start latency.
func BenchmarkEndToEnd(b *testing.B) {
	e := benchEnv(b)
	reg, err := e.registry()
	if err != nil {
		b.Fatal(err)
	}
	sp, err := e.startProcessor(context.Background(), reg, processor.Config{
		Prefix: e.cfg.Prefix, Concurrency: DefaultConcurrency, ReconcileInterval: model.NoReconcile,
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sp.stop() }()
	iss, err := issuer.NewIssuer(e.counted, issuer.IssuerOptions{Prefix: e.cfg.Prefix, Wake: sp.p.Notify})
	if err != nil {
		b.Fatal(err)
	}
	st := e.emb.Stats()
	b.ResetTimer()
	began, cpu := time.Now(), cpuTime()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range DefaultIssuers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < b.N; i = int(next.Add(1)) - 1 {
				if _, err := iss.Issue(context.Background(), benchCmd{Seq: i, Sent: time.Now().UnixNano()}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := waitFor(context.Background(), time.Hour, "complete", func() bool { return e.completed.Load() >= int64(b.N) }); err != nil {
		b.Fatal(err)
	}
	elapsed, cpu := time.Since(began), cpuTime()-cpu
	b.StopTimer()
	lat := e.lat.take()
	reportCommits(b, e, st, elapsed)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cmds/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/cmd")
	b.ReportMetric(ms(quantile(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(quantile(lat, 0.99)), "p99-ms")
}
