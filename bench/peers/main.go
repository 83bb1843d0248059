// Command peers runs one no-op workload on cmdq (embedded store), River
// (PostgreSQL) and asynq (Redis) in one go and prints one table: issue
// rate with 16 clients (one call per job), burn-down processing rate with 16
// and 100 workers, issue → handler start latency at a steady 500 jobs/s,
// and whether an issued job is durable. Each peer runs at its defaults and
// with its documented low-latency tuning.
//
// It starts its own Redis (no persistence) and PostgreSQL (fsync on,
// synchronous_commit on) on free loopback ports in a temporary directory
// and stops them, and removes the directory, at the end, on failure and on
// Ctrl-C. `make bench-peers` in the repository root installs them from
// Debian's packages first. docs/performance.md describes the method.
//
//	go run . [--n 20000] [--runs 3] [--json]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command line.
type options struct {
	params
	Runs              int
	JSON              bool
	Systems           string
	RedisAddr         string
	PostgresURL       string
	RiverCooldown     time.Duration
	RiverPollInterval time.Duration
	AsynqCheck        time.Duration
	RedisAOF          string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.N, "n", 20000, "jobs issued and processed per burn-down")
	fs.IntVar(&o.Runs, "runs", 3, "runs of every row; the table shows medians")
	fs.IntVar(&o.Issuers, "issuers", 16, "goroutines issuing, one call per job")
	workers := fs.String("workers", "16,100", "worker counts of the burn-downs, comma-separated; the latency phase runs with the last")
	fs.IntVar(&o.Rate, "rate", 500, "latency phase: jobs issued per second")
	fs.DurationVar(&o.LatencyDuration, "latency-duration", 3*time.Second, "latency phase length; 0 skips it")
	fs.IntVar(&o.BatchSize, "river-batch", 1000, "jobs per River InsertMany call (batch insert rows)")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "bound of each phase")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object instead of the markdown table")
	fs.StringVar(&o.Systems, "systems", "cmdq,river,asynq", "systems to run, comma-separated")
	fs.StringVar(&o.RedisAddr, "redis-addr", "", "use this Redis (host:port) instead of starting one; it is flushed (FLUSHALL)")
	fs.StringVar(&o.PostgresURL, "postgres-url", "", "use this PostgreSQL (a superuser URL) instead of starting one; the harness creates and drops databases peers_river_*")
	fs.DurationVar(&o.RiverCooldown, "river-fetch-cooldown", time.Millisecond, "River's tuned row: FetchCooldown (its minimum is 1 ms)")
	fs.DurationVar(&o.RiverPollInterval, "river-fetch-poll-interval", 20*time.Millisecond, "River's tuned row: FetchPollInterval (River's own benchmark uses 20 ms)")
	fs.DurationVar(&o.AsynqCheck, "asynq-task-check-interval", 10*time.Millisecond, "asynq's tuned rows: TaskCheckInterval")
	fs.StringVar(&o.RedisAOF, "redis-aof", "always", `extra asynq row with Redis's append-only file: "always", "everysec" or "" (none)`)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	for f := range strings.SplitSeq(*workers, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 1 {
			errs = append(errs, fmt.Errorf("--workers %q: use positive integers separated by commas, e.g. 16,100", *workers))
			break
		}
		o.Workers = append(o.Workers, w)
	}
	if o.N < 1 {
		errs = append(errs, fmt.Errorf("--n %d: issue at least 1 job", o.N))
	}
	if o.Runs < 1 {
		errs = append(errs, fmt.Errorf("--runs %d: run at least once", o.Runs))
	}
	if o.Issuers < 1 {
		errs = append(errs, fmt.Errorf("--issuers %d: use at least 1", o.Issuers))
	}
	if o.Rate < 1 {
		errs = append(errs, fmt.Errorf("--rate %d: issue at least 1 job a second", o.Rate))
	}
	if o.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("--river-batch %d: use at least 1", o.BatchSize))
	}
	switch o.RedisAOF {
	case "", "always", "everysec":
	default:
		errs = append(errs, fmt.Errorf(`--redis-aof %q: use "always", "everysec" or ""`, o.RedisAOF))
	}
	for s := range strings.SplitSeq(o.Systems, ",") {
		switch strings.TrimSpace(s) {
		case "cmdq", "river", "asynq":
		default:
			errs = append(errs, fmt.Errorf("--systems: unknown system %q: use cmdq, river, asynq", s))
		}
	}
	return o, errors.Join(errs...)
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		stop()
		os.Exit(1)
	}
}

// report is the JSON output, and what the table is made of.
type report struct {
	N               int       `json:"n"`
	Runs            int       `json:"runs"`
	Issuers         int       `json:"issuers"`
	Workers         []int     `json:"workers"`
	Rate            int       `json:"latency_rate_per_s"`
	LatencyDuration string    `json:"latency_duration"`
	Machine         machine   `json:"machine"`
	Rows            []row     `json:"rows"`
	Started         time.Time `json:"started"`
	Elapsed         string    `json:"elapsed"`
}

type machine struct {
	CPUs         int    `json:"cpus"`
	GoVersion    string `json:"go"`
	LoadBefore   string `json:"load_average_before"`
	LoadAfter    string `json:"load_average_after"`
	PostgreSQL   string `json:"postgresql,omitempty"`
	RedisVersion string `json:"redis,omitempty"`
}

// row is one system at one configuration: medians over the runs, and each
// run's figures.
type row struct {
	System        string      `json:"system"`
	Config        string      `json:"config"`
	Durable       string      `json:"durable"`
	IssuedPerS    float64     `json:"issued_per_s"`
	ProcessedPerS []float64   `json:"processed_per_s,omitempty"` // per Workers entry
	LatencyP50MS  float64     `json:"latency_p50_ms,omitempty"`
	LatencyP99MS  float64     `json:"latency_p99_ms,omitempty"`
	PerRun        []runResult `json:"per_run"`
}

func run(ctx context.Context, o options, stdout, stderr io.Writer) error {
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "peers: "+format+"\n", a...) }
	began := time.Now()
	rep := report{N: o.N, Runs: o.Runs, Issuers: o.Issuers, Workers: o.Workers, Rate: o.Rate,
		LatencyDuration: o.LatencyDuration.String(), Started: began.UTC().Truncate(time.Second),
		Machine: machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadBefore: loadAverage()}}
	want := map[string]bool{}
	for s := range strings.SplitSeq(o.Systems, ",") {
		want[strings.TrimSpace(s)] = true
	}

	dir := ""
	redisAddr, pgURL := o.RedisAddr, o.PostgresURL
	needRedis, needPG := want["asynq"] && redisAddr == "", want["river"] && pgURL == ""
	if needRedis || needPG || want["cmdq"] {
		sv, err := startServicesFor(ctx, needRedis, needPG, logf)
		if err != nil {
			return err
		}
		defer sv.Close()
		dir = sv.Dir()
		if needRedis {
			redisAddr = sv.RedisAddr
		}
		if needPG {
			pgURL = sv.PostgresURL
		}
	}

	var systems []system
	if want["cmdq"] {
		systems = append(systems, cmdqSystem{dir: dir})
	}
	if want["river"] {
		durable, version, err := postgresDurability(ctx, pgURL)
		if err != nil {
			return err
		}
		rep.Machine.PostgreSQL = version
		logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		base := riverSystem{adminURL: pgURL, durable: durable, logger: logger, batchSize: o.BatchSize}
		tuned := base
		tuned.fetchCooldown, tuned.fetchPollInterval = o.RiverCooldown, o.RiverPollInterval
		batch, fast := base, base
		batch.batch = true
		fast.batch, fast.fast = true, true
		systems = append(systems, &base, &tuned, &batch, &fast)
	}
	if want["asynq"] {
		v, err := redisInfo(ctx, redisAddr)
		if err != nil {
			return err
		}
		rep.Machine.RedisVersion = v
		systems = append(systems, &asynqSystem{addr: redisAddr}, &asynqSystem{addr: redisAddr, taskCheckInterval: o.AsynqCheck})
		if o.RedisAOF != "" {
			systems = append(systems, &asynqSystem{addr: redisAddr, taskCheckInterval: o.AsynqCheck, appendfsync: o.RedisAOF})
		}
	}

	results := make([][]runResult, len(systems))
	// Runs are interleaved (every system once, then again), so that a
	// change of load on the machine spreads over all of them.
	for r := 1; r <= o.Runs; r++ {
		for i, s := range systems {
			if err := ctx.Err(); err != nil {
				return err
			}
			res, err := runOnce(ctx, s, o.params, r, logf)
			if err != nil {
				return err
			}
			results[i] = append(results[i], res)
		}
	}
	for i, s := range systems {
		rep.Rows = append(rep.Rows, summarize(s, results[i], len(o.Workers)))
	}
	rep.Machine.LoadAfter = loadAverage()
	rep.Elapsed = time.Since(began).Round(time.Second).String()
	if o.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	_, err := io.WriteString(stdout, markdown(rep))
	return err
}

// startServicesFor starts what is needed; the temporary directory also
// holds cmdq's stores.
func startServicesFor(ctx context.Context, needRedis, needPG bool, logf func(string, ...any)) (*services, error) {
	dir, err := os.MkdirTemp("", "cmdq-peers-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	sv := &services{dir: dir}
	// PostgreSQL may run as another user: it must reach its directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		sv.Close()
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	if needRedis {
		if err := sv.startRedis(ctx, logf); err != nil {
			sv.Close()
			return nil, err
		}
	}
	if needPG {
		if err := sv.startPostgres(ctx, logf); err != nil {
			sv.Close()
			return nil, err
		}
	}
	return sv, nil
}

// summarize takes the medians of a row's runs.
func summarize(s system, runs []runResult, nWorkers int) row {
	r := row{System: s.Name(), Config: s.Config(), Durable: s.Durable(), PerRun: runs}
	var issued, p50, p99 []float64
	processed := make([][]float64, nWorkers)
	for _, x := range runs {
		issued = append(issued, x.IssuedPerS...)
		for i, p := range x.ProcessedPerS {
			processed[i] = append(processed[i], p)
		}
		if x.Samples > 0 {
			p50, p99 = append(p50, x.LatencyP50MS), append(p99, x.LatencyP99MS)
		}
	}
	r.IssuedPerS = median(issued)
	for _, p := range processed {
		if len(p) > 0 {
			r.ProcessedPerS = append(r.ProcessedPerS, median(p))
		}
	}
	r.LatencyP50MS, r.LatencyP99MS = median(p50), median(p99)
	return r
}

// markdown renders the report as a heading line and a table.
func markdown(rep report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "N = %s no-op jobs; medians of %d run(s); issued by %d goroutines, one call per job; "+
		"latency at %d jobs/s for %s with %d workers. %d CPUs, %s, PostgreSQL %s, Redis %s; load average %s before, %s after; %s, %s.\n\n",
		group(float64(rep.N)), rep.Runs, rep.Issuers, rep.Rate, rep.LatencyDuration, rep.Workers[len(rep.Workers)-1],
		rep.Machine.CPUs, rep.Machine.GoVersion, orDash(rep.Machine.PostgreSQL), orDash(rep.Machine.RedisVersion),
		rep.Machine.LoadBefore, rep.Machine.LoadAfter, rep.Started.Format(time.RFC3339), rep.Elapsed)
	fmt.Fprintf(&b, "| system | config | issued/s (%d clients) |", rep.Issuers)
	for _, w := range rep.Workers {
		fmt.Fprintf(&b, " processed/s (%d workers) |", w)
	}
	fmt.Fprintf(&b, " p50 / p99 issue → start at %d/s | durable |\n", rep.Rate)
	b.WriteString("|---|---|---:|")
	for range rep.Workers {
		b.WriteString("---:|")
	}
	b.WriteString("---:|---|\n")
	for _, r := range rep.Rows {
		fmt.Fprintf(&b, "| %s | %s | %s |", r.System, r.Config, group(r.IssuedPerS))
		for i := range rep.Workers {
			if i < len(r.ProcessedPerS) {
				fmt.Fprintf(&b, " %s |", group(r.ProcessedPerS[i]))
			} else {
				b.WriteString(" — |")
			}
		}
		if r.LatencyP50MS > 0 || r.LatencyP99MS > 0 {
			fmt.Fprintf(&b, " %s / %s ms |", latencyMS(r.LatencyP50MS), latencyMS(r.LatencyP99MS))
		} else {
			b.WriteString(" — |")
		}
		fmt.Fprintf(&b, " %s |\n", r.Durable)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// latencyMS formats milliseconds: one decimal below 10, integers above.
func latencyMS(v float64) string {
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return group(v)
	}
}

// group formats v rounded to an integer with thousands separators.
func group(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// loadAverage returns /proc/loadavg's first three fields, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
