package cmdq_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// discardExporter is a span exporter that drops what it is given: the
// SDK's whole cost (sampling, span building, the batch processor) without
// a network.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// cpuTime returns the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writtenBytes returns the bytes the process has passed to write calls so
// far (/proc/self/io's wchar: the store's log, tables and manifest), or 0
// where that is not available.
func writtenBytes() float64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n
		}
	}
	return 0
}

// The shape of BenchmarkTracingCost's runs.
const (
	traceBenchIssuers = 16 // goroutines issuing at once (as cmdq bench's burn-down)
	traceBenchRounds  = 15 // pairs of runs (off and on), or CMDQ_TRACEBENCH_PAIRS
)

// traceBenchN is the number of commands per run of BenchmarkTracingCost:
// 3,000, or CMDQ_TRACEBENCH_N. Short runs see little compaction. The
// store's compactions come in steps, each rewriting its bottom level, so
// a 10,000-command run that has one more than its pair pays for a whole
// one more (the 10,000-command figures of docs/performance.md);
// CMDQ_TRACEBENCH_N=60000 with CMDQ_TRACEBENCH_PAIRS=5 runs a store
// through some 35 flushes and compactions a run, closer to a steady
// state.
func traceBenchN(b *testing.B) int {
	if v := os.Getenv("CMDQ_TRACEBENCH_N"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			b.Fatalf("CMDQ_TRACEBENCH_N=%q: want a number of commands, at least 100", v)
		}
		return n
	}
	return 3000
}

// BenchmarkTracingCost compares the CPU time per command (the whole
// process's user + system time) of issuing commands from 16 goroutines to
// an in-process processor on the embedded store until all are completed,
// with tracing off (the global no-op provider) and on (the SDK, every span
// sampled, a batch processor on an exporter that drops them: two spans
// per command, the issue's and the attempt's, and the trace context
// stored with the command and carried by its message). Each iteration
// runs 15 pairs of runs (CMDQ_TRACEBENCH_PAIRS) of 3,000 commands
// (CMDQ_TRACEBENCH_N), each run on a fresh store, the two runs of a pair
// back to back; it reports the median CPU per command of each mode, the
// median of the pairs' ratios as the overhead (robust to the load of the
// rest of the machine, which varies from pair to pair), and the mean heap
// allocations, their bytes and the bytes written (the store's log, data files and
// compactions, from /proc/self/io) per command (docs/performance.md,
// "Tracing"):
//
//	go test -run '^$' -bench TracingCost -benchtime 1x .
//	CMDQ_TRACEBENCH_N=60000 CMDQ_TRACEBENCH_PAIRS=5 go test -run '^$' -bench TracingCost -benchtime 1x .
func BenchmarkTracingCost(b *testing.B) {
	n := traceBenchN(b)
	rounds := traceBenchRounds
	if v := os.Getenv("CMDQ_TRACEBENCH_PAIRS"); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			b.Fatalf("CMDQ_TRACEBENCH_PAIRS=%q: want a number of pairs of runs, at least 1", v)
		}
	}
	for range b.N {
		var off, on, ratios []float64
		var offRun, onRun runCost // the means of allocs and bytes
		for i := range rounds {
			// Each pair runs back to back (the order alternating), so that
			// both see the same load from the rest of the machine.
			var o, t runCost
			if i%2 == 0 {
				o = tracingRun(b, false, n)
				t = tracingRun(b, true, n)
			} else {
				t = tracingRun(b, true, n)
				o = tracingRun(b, false, n)
			}
			off, on, ratios = append(off, o.cpu), append(on, t.cpu), append(ratios, t.cpu/o.cpu)
			offRun.addMean(o, rounds)
			onRun.addMean(t, rounds)
		}
		b.Logf("CPU µs per command, off: %.1f, on: %.1f", off, on)
		slices.Sort(off)
		slices.Sort(on)
		slices.Sort(ratios)
		b.ReportMetric(off[len(off)/2], "off-cpu-µs/cmd")
		b.ReportMetric(on[len(on)/2], "on-cpu-µs/cmd")
		b.ReportMetric(100*(ratios[len(ratios)/2]-1), "overhead-%")
		offRun.report(b, "off-")
		onRun.report(b, "on-")
	}
}

// BenchmarkIssueProcess is one mode of BenchmarkTracingCost ("off",
// "on") with b.N commands in one run: a fixed workload for a profiler or
// an instruction counter (docs/performance.md, "Tracing"). It reports
// the CPU time (user + system, every thread) and the heap allocations
// per command.
func BenchmarkIssueProcess(b *testing.B) {
	for _, mode := range []struct {
		name   string
		traced bool
	}{{"off", false}, {"on", true}} {
		b.Run(mode.name, func(b *testing.B) {
			r := tracingRun(b, mode.traced, max(b.N, 2))
			b.ReportMetric(r.cpu, "cpu-µs/cmd")
			r.report(b, "")
		})
	}
}

// runCost is what one run cost per command: CPU time (µs), heap
// allocations and their bytes, and bytes written (writtenBytes).
type runCost struct{ cpu, allocs, allocBytes, written float64 }

// addMean adds r's share of the mean of runs runs to c's allocations and
// bytes.
func (c *runCost) addMean(r runCost, runs int) {
	c.allocs += r.allocs / float64(runs)
	c.allocBytes += r.allocBytes / float64(runs)
	c.written += r.written / float64(runs)
}

// report reports c's allocations and bytes per command, each metric's
// unit prefixed with prefix.
func (c runCost) report(b *testing.B, prefix string) {
	b.ReportMetric(c.allocs, prefix+"allocs/cmd")
	b.ReportMetric(c.allocBytes, prefix+"alloc-B/cmd")
	b.ReportMetric(c.written, prefix+"written-B/cmd")
}

// tracingRun is one run of n commands of BenchmarkTracingCost.
func tracingRun(b *testing.B, traced bool, n int) runCost {
	b.Helper()
	st, err := embedded.Open(filepath.Join(b.TempDir(), "cmdq-data"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var completed atomic.Int64
	done := make(chan struct{})
	cfg := cmdq.Config{Worker: "bench", ReconcileInterval: cmdq.NoReconcile, Observers: []cmdq.Observer{cmdq.ObserverFunc(func(o cmdq.Observation) {
		if o.Kind == cmdq.ObservedCompleted && completed.Add(1) == int64(n) {
			close(done)
		}
	})}}
	// The caller makes no span of its own (its cost would be the
	// caller's, not cmdq's): off, there is no trace at all; on, each
	// command is a trace of cmdq's two spans.
	caller := noop.NewTracerProvider().Tracer("web")
	if traced {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		cfg.TracerProvider = tp
	}
	c, err := cmdq.New(st, cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := cmdq.Register(c, func(ctx context.Context, g greet, run *cmdq.Attempt) error { return nil }); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer c.Stop(context.Background())
	if _, err := c.Issue(ctx, greet{Name: "warm"}); err != nil { // opens the tables and queue
		b.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs, allocated := ms.Mallocs, ms.TotalAlloc
	written := writtenBytes()
	cpu := cpuTime()
	issue(b, c, caller, n)
	<-done
	var r runCost
	r.cpu = float64((cpuTime() - cpu).Microseconds()) / float64(n)
	r.written = (writtenBytes() - written) / float64(n)
	runtime.ReadMemStats(&ms)
	r.allocs = float64(ms.Mallocs-mallocs) / float64(n)
	r.allocBytes = float64(ms.TotalAlloc-allocated) / float64(n)
	return r
}

// issue issues n commands from traceBenchIssuers goroutines, each in a
// span of caller (a no-op one: no span).
func issue(b *testing.B, c *cmdq.Client, caller trace.Tracer, n int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	for range traceBenchIssuers {
		wg.Go(func() {
			for next.Add(1) <= int64(n)-1 { // the warm-up command is the last
				sctx, span := caller.Start(ctx, "POST /greetings")
				if _, err := c.Issue(sctx, greet{Name: "x"}); err != nil {
					b.Error(err)
					return
				}
				span.End()
			}
		})
	}
	wg.Wait()
}
