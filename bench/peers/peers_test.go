package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memSystem is an in-memory queue: what the workload driver is tested on.
type memSystem struct{ failIssueAt int }

func (memSystem) Name() string    { return "mem" }
func (memSystem) Config() string  { return "channel" }
func (memSystem) Durable() string { return "no" }

func (s memSystem) Open(context.Context, int) (instance, error) {
	return &memInstance{q: make(chan job, 1<<16), failAt: s.failIssueAt}, nil
}

type memInstance struct {
	q      chan job
	failAt int
	issued atomic.Int64
}

var errFull = errors.New("mem: refused")

func (m *memInstance) Issue(_ context.Context, j job) error {
	if n := m.issued.Add(1); m.failAt > 0 && n == int64(m.failAt) {
		return errFull
	}
	m.q <- j
	return nil
}

func (m *memInstance) Start(_ context.Context, workers int, onStart func(job)) (runner, error) {
	r := &memRunner{stop: make(chan struct{})}
	for range workers {
		r.wg.Go(func() {
			for {
				select {
				case j := <-m.q:
					onStart(j)
					r.done.Add(1)
				case <-r.stop:
					return
				}
			}
		})
	}
	return r, nil
}

func (m *memInstance) Close(context.Context) error { return nil }

type memRunner struct {
	done atomic.Int64
	stop chan struct{}
	wg   sync.WaitGroup
}

func (r *memRunner) WaitCompleted(ctx context.Context, n int64) error {
	return waitCount(ctx, n, r.done.Load)
}

func (r *memRunner) Stop(context.Context) error { close(r.stop); r.wg.Wait(); return nil }

func testParams() params {
	return params{N: 300, Issuers: 4, Workers: []int{2, 8}, Rate: 200, LatencyDuration: 500 * time.Millisecond,
		BatchSize: 50, Timeout: time.Minute}
}

// checkRun asserts that a run measured every figure: one issue rate per
// burn-down, one processing rate per worker count, and one latency sample
// per job of the latency phase.
func checkRun(t *testing.T, res runResult, p params) {
	t.Helper()
	if len(res.IssuedPerS) != len(p.Workers) {
		t.Fatalf("issue rates %v: want one per burn-down (%d)", res.IssuedPerS, len(p.Workers))
	}
	for _, v := range res.IssuedPerS {
		if !(v > 0) {
			t.Fatalf("issue rates %v: want all > 0", res.IssuedPerS)
		}
	}
	if len(res.ProcessedPerS) != len(p.Workers) {
		t.Fatalf("processing rates %v: want one per worker count %v", res.ProcessedPerS, p.Workers)
	}
	for _, v := range res.ProcessedPerS {
		if !(v > 0) {
			t.Fatalf("processing rates %v: want all > 0", res.ProcessedPerS)
		}
	}
	if want := int(float64(p.Rate) * p.LatencyDuration.Seconds()); res.Samples != want {
		t.Fatalf("latency samples %d, want %d (one per job of the latency phase, none of the burn-downs)", res.Samples, want)
	}
	if !(res.LatencyP50MS > 0 && res.LatencyP99MS >= res.LatencyP50MS) {
		t.Fatalf("latency p50 %g ms, p99 %g ms: want 0 < p50 <= p99", res.LatencyP50MS, res.LatencyP99MS)
	}
}

func TestRunOnceMeasuresEveryPhase(t *testing.T) {
	p := testParams()
	res, err := runOnce(t.Context(), memSystem{}, p, 1, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, res, p)
}

func TestRunOnceReportsAFailedIssue(t *testing.T) {
	_, err := runOnce(t.Context(), memSystem{failIssueAt: 123}, testParams(), 1, t.Logf)
	if !errors.Is(err, errFull) {
		t.Fatalf("err = %v, want the issue error %v", err, errFull)
	}
}

// stuckSystem never completes a job: the phase must end at its timeout.
type stuckSystem struct{ memSystem }

func (stuckSystem) Open(context.Context, int) (instance, error) {
	return stuckInstance{&memInstance{q: make(chan job, 1<<16)}}, nil
}

type stuckInstance struct{ *memInstance }

func (stuckInstance) Start(context.Context, int, func(job)) (runner, error) {
	return &memRunner{stop: make(chan struct{})}, nil
}

func TestRunOnceBoundsAPhase(t *testing.T) {
	p := testParams()
	p.Timeout = 200 * time.Millisecond
	_, err := runOnce(t.Context(), stuckSystem{}, p, 1, t.Logf)
	if err == nil || !strings.Contains(err.Error(), "not done within 200ms") {
		t.Fatalf("err = %v, want the phase's timeout", err)
	}
}

// TestCmdqAdapter runs the workload on the real embedded store through the
// adapter (cmdq.go).
func TestCmdqAdapter(t *testing.T) {
	p := testParams()
	res, err := runOnce(t.Context(), cmdqSystem{dir: t.TempDir()}, p, 1, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, res, p)
}

func TestQuantileAndMedian(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(101-i)*time.Millisecond)
	}
	if got := quantile(d, 0.5); got != 50*time.Millisecond {
		t.Errorf("p50 = %s, want 50ms (nearest rank)", got)
	}
	if got := quantile(d, 0.99); got != 99*time.Millisecond {
		t.Errorf("p99 = %s, want 99ms", got)
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median(3,1,2) = %g, want 2", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median(4,1,3,2) = %g, want 2.5", got)
	}
}

func TestMarkdown(t *testing.T) {
	rep := report{N: 20000, Runs: 3, Issuers: 16, Workers: []int{16, 100}, Rate: 500, LatencyDuration: "3s",
		Rows: []row{
			{System: "a", Config: "x", Durable: "yes", IssuedPerS: 12345.6, ProcessedPerS: []float64{1000, 2500.4},
				LatencyP50MS: 0.84, LatencyP99MS: 12.6},
			{System: "b", Config: "batch", Durable: "yes", IssuedPerS: 38000},
		}}
	got := markdown(rep)
	for _, want := range []string{
		"| system | config | issued/s (16 clients) | processed/s (16 workers) | processed/s (100 workers) | p50 / p99 issue → start at 500/s | durable |",
		"| a | x | 12,346 | 1,000 | 2,500 | 0.8 / 13 ms | yes |",
		"| b | batch | 38,000 | — | — | — | yes |",
		"N = 20,000 no-op jobs; medians of 3 run(s)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("markdown lacks %q:\n%s", want, got)
		}
	}
}

func TestParseFlagsReportsEveryProblem(t *testing.T) {
	_, err := parseFlags([]string{"--n", "0", "--workers", "16,x", "--systems", "cmdq,sidekiq", "--redis-aof", "no"}, &bytes.Buffer{})
	if err == nil {
		t.Fatal("no error for bad flags")
	}
	for _, want := range []string{"--n 0", `--workers "16,x"`, `unknown system "sidekiq"`, `--redis-aof "no"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	o, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.N != 20000 || o.Runs != 3 || o.Issuers != 16 || len(o.Workers) != 2 || o.Workers[0] != 16 || o.Workers[1] != 100 || o.Rate != 500 {
		t.Fatalf("defaults %+v: want N 20000, 3 runs, 16 issuers, workers 16,100, 500/s", o)
	}
}

// tmpdir makes TMPDIR a fresh directory that PostgreSQL's user (under
// root) can traverse, so that the test sees what the harness leaves there.
func tmpdir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(dir); d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TMPDIR", dir)
	return dir
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("%s holds %d entries after the run (first %s): want the temporary directory removed", dir, len(left), left[0].Name())
	}
}

// TestEndToEnd runs every system on Redis and PostgreSQL started by the
// harness (bench/peers/install-deps.sh installs them) and checks both
// outputs and the cleanup.
func TestEndToEnd(t *testing.T) {
	dir := tmpdir(t)
	o, err := parseFlags([]string{"--n", "200", "--runs", "1", "--workers", "4,16", "--rate", "100",
		"--latency-duration", "500ms", "--river-batch", "50", "--json"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var out, log bytes.Buffer
	if err := run(t.Context(), o, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	assertEmpty(t, dir)
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("JSON output: %v\n%s", err, out.String())
	}
	// cmdq, River ×4 (defaults, tuned, two batch inserts), asynq ×3.
	if len(rep.Rows) != 8 {
		t.Fatalf("%d rows, want 8:\n%s", len(rep.Rows), out.String())
	}
	for _, r := range rep.Rows {
		if len(r.PerRun) != 1 || !(r.IssuedPerS > 0) {
			t.Errorf("%s (%s): issued %g/s over %d runs, want > 0 over 1", r.System, r.Config, r.IssuedPerS, len(r.PerRun))
		}
		if strings.HasPrefix(r.Config, "batch insert") {
			continue
		}
		if len(r.ProcessedPerS) != 2 || !(r.ProcessedPerS[0] > 0 && r.ProcessedPerS[1] > 0) || r.PerRun[0].Samples != 50 {
			t.Errorf("%s (%s): processed %v/s, %d latency samples: want two rates > 0 and 50 samples", r.System, r.Config, r.ProcessedPerS, r.PerRun[0].Samples)
		}
	}
	if !strings.HasPrefix(rep.Rows[1].Durable, "yes: PostgreSQL fsync=on, synchronous_commit=on") {
		t.Errorf("River's durable column %q: want the server's fsync=on, synchronous_commit=on", rep.Rows[1].Durable)
	}
}

// TestInterruptStopsServers cancels the run (as Ctrl-C does) once both
// servers are up and River's first row has started: the servers are
// stopped and the temporary directory removed before run returns.
func TestInterruptStopsServers(t *testing.T) {
	dir := tmpdir(t)
	o, err := parseFlags([]string{"--n", "100000", "--runs", "1", "--systems", "asynq,river"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := &cancelOn{text: "River (defaults (FetchCooldown 100 ms, FetchPollInterval 1 s)) run 1: started", cancel: cancel}
	err = run(ctx, o, &bytes.Buffer{}, w)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled\n%s", err, w.buf.String())
	}
	assertEmpty(t, dir)
}

// cancelOn cancels once text has been written.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	text   string
	cancel func()
	once   sync.Once
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if strings.Contains(c.buf.String(), c.text) {
		c.once.Do(c.cancel)
	}
	return len(p), nil
}
