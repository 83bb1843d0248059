// Package bench measures cmdq's throughput, latency, storage operations per
// command, idle cost and memory with the real Issuer and the real processor on
// the embedded store or Azure Storage (Azurite). `cmdq bench` is its command
// line; docs/performance.md describes the method and the figures.
//
// A run has these phases, in order, on one store:
//
//  1. issue: Issuers goroutines issue N commands (no processor running);
//     issued_per_s = N / elapsed.
//  2. process: a processor with Concurrency handlers and BatchSize drains
//     the full queue (burn-down); processed_per_s = N / time until every
//     command is `completed` and its message deleted.
//  3. latency: with that processor still running and the Issuer waking it
//     (issuer.IssuerOptions.Wake), commands are issued at a steady Rate for
//     LatencyDuration; latency is from the Issue call to the handler's start.
//  4. http trickle: TrickleClients HTTP clients issue TrickleN commands at a
//     steady TrickleRate through a real HTTP server (package api, in
//     process, on a fresh prefix) whose cmdq.Client runs the processor;
//     every storage call is counted until each command is completed.
//  5. idle: on an empty deployment (a fresh prefix) a processor with the poll
//     schedule scaled down by IdleScale is watched for IdleWindow once its
//     backoff has reached the cap; its storage calls are counted and scaled to
//     an hour at MaxPollInterval, and the reconciler's calls are counted and
//     added as the processor schedules them (an hourly marker query, a daily
//     pending scan instead of one of them). Then a processor
//     whose poll interval is MaxPollInterval from the start is left idle and a
//     command issued in process must reach its handler at once (Notify).
//  6. retention: the retention sweep (retention.Sweep) runs once on the
//     bench's prefix with its clock RetentionAhead (10 days) ahead, as it
//     would once every command of the run is past its retention; its
//     calls are counted, divided by the commands it read, and the day
//     table must be gone afterwards (Store.Tables).
//  7. baseline (Baseline "raw", Azure only): the minimal pipeline written
//     directly against the Azure SDK processes N commands at the same
//     concurrency; ratio = processed_per_s / baseline_processed_per_s. When
//     the run started Azurite itself, the baseline gets a fresh emulator, as
//     cmdq had.
//
// Storage operations are every queue and table call, counted by a wrapper
// around the driver (Counter), divided by the commands completed.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite/emulator"
	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/reconcile"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// Store kinds accepted by Config.Store.
const (
	StoreEmbedded = "embedded"
	StoreAzure    = "azure"
)

// BaselineRaw selects the raw Azure SDK pipeline as the baseline.
const BaselineRaw = "raw"

// Defaults used when the corresponding Config field is zero.
const (
	// DefaultNEmbedded is the number of commands on the embedded store (20,000).
	DefaultNEmbedded = 20000
	// DefaultNAzure is the number of commands on Azure Storage (2,000).
	DefaultNAzure = 2000
	// DefaultConcurrency is the processor's handler count (100).
	DefaultConcurrency = 100
	// DefaultIssuers is the number of goroutines issuing (16).
	DefaultIssuers = 16
	// DefaultRateEmbedded is the latency phase's issue rate on the embedded store (500 commands/s).
	DefaultRateEmbedded = 500
	// DefaultRateAzure is the latency phase's issue rate on Azure Storage (50 commands/s).
	DefaultRateAzure = 50
	// DefaultLatencyDuration is the latency phase's length (3 s).
	DefaultLatencyDuration = 3 * time.Second
	// DefaultIdleWindow is how long the scaled idle processor is watched (3 s).
	DefaultIdleWindow = 3 * time.Second
	// DefaultIdleScale divides the idle processor's poll intervals (600): a
	// 3 s window at a 100 ms cap stands for 30 minutes at 1 minute.
	DefaultIdleScale = 600
	// DefaultTrickleNEmbedded is the HTTP trickle's command count on the
	// embedded store (2,000).
	DefaultTrickleNEmbedded = 2000
	// DefaultTrickleNAzure is the HTTP trickle's command count on Azure
	// Storage (320, as issue 10 measured).
	DefaultTrickleNAzure = 320
	// DefaultTrickleClients is the number of concurrent HTTP clients in the
	// trickle phase (8).
	DefaultTrickleClients = 8
	// DefaultTrickleRateEmbedded is the HTTP trickle's total issue rate on
	// the embedded store (500 commands/s).
	DefaultTrickleRateEmbedded = 500
	// DefaultTrickleRateAzure is the HTTP trickle's total issue rate on
	// Azure Storage (50 commands/s).
	DefaultTrickleRateAzure = 50
	// DefaultWakeSamples is the number of idle wake-ups timed (3).
	DefaultWakeSamples = 3
	// DefaultTimeout bounds each phase (5 minutes).
	DefaultTimeout = 5 * time.Minute
)

// Config configures a run. The zero value runs the embedded store with the
// defaults named on each field.
type Config struct {
	// Store is StoreEmbedded (default) or StoreAzure.
	Store string
	// Path is the embedded store's data directory. Default: a new
	// temporary directory, removed after the run. fsync is always on.
	Path string
	// ConnectionString reaches Azure Storage for StoreAzure. Default:
	// $AZURE_STORAGE_CONNECTION_STRING; when that is empty too, the run starts
	// Azurite from tools/azurite (see package internal/azurite/emulator) and
	// stops it at the end.
	ConnectionString string
	// N is the number of commands issued and processed. Default
	// DefaultNEmbedded (20,000) or DefaultNAzure (2,000).
	N int
	// Concurrency is the processor's Concurrency (handlers at once). Default 100.
	Concurrency int
	// Issuers is the number of goroutines issuing in the issue phase. Default 16.
	Issuers int
	// BatchSize is the processor's BatchSize, 1..32. Default 32.
	BatchSize int
	// NewBatchThreshold is the processor's NewBatchThreshold, the most
	// messages held beyond Concurrency (0 = its default, BatchSize;
	// model.NoThreshold for none).
	NewBatchThreshold int
	// HandlerDuration is how long each handler takes (it waits, without
	// using CPU). Default 0: a no-op handler.
	HandlerDuration time.Duration
	// Rate is the latency phase's issue rate, commands per second. Default
	// 500 (embedded) or 50 (azure).
	Rate int
	// LatencyDuration is the latency phase's length. Default 3 s; negative
	// skips the phase.
	LatencyDuration time.Duration
	// TrickleN is the number of commands of the HTTP trickle phase.
	// Default DefaultTrickleNEmbedded (2,000) or DefaultTrickleNAzure
	// (320); negative skips the phase.
	TrickleN int
	// TrickleClients is the number of concurrent HTTP clients of the
	// trickle phase. Default 8.
	TrickleClients int
	// TrickleRate is the trickle phase's total issue rate, commands per
	// second over all clients. Default 500 (embedded) or 50 (azure);
	// negative: unpaced, each client issues as soon as its last command
	// was answered.
	TrickleRate int
	// FirstDeliveryN is the number of commands of each first-delivery
	// phase (fast path, then fallback with cmdq.Config.NoFastPath).
	// Default 256; negative skips it.
	FirstDeliveryN int
	// MaxPollInterval is the processor's MaxPollInterval, the idle poll
	// interval the idle figure is for. Default 1 minute (the processor's).
	MaxPollInterval time.Duration
	// IdleWindow is how long the scaled idle processor is watched. Default
	// 3 s; negative skips the idle phase.
	IdleWindow time.Duration
	// IdleScale divides the poll intervals of the idle processor (and
	// multiplies the window). Default 600.
	IdleScale float64
	// Baseline is "" (none) or BaselineRaw (StoreAzure only).
	Baseline string
	// Prefix names the queues and tables. Default: "bench" and 8 random hex
	// digits, so runs never share data.
	Prefix string
	// ProfileDir, if set, receives CPU profiles of the issue and process
	// phases (issue.pprof, process.pprof) for `go tool pprof`.
	ProfileDir string
	// Progress, if set, receives one line per phase.
	Progress io.Writer
	// Timeout bounds each phase. Default 5 minutes.
	Timeout time.Duration
}

// Result is what a run measured. Its JSON is what `cmdq bench --json` prints.
type Result struct {
	// Store is "embedded" or "azure".
	Store string `json:"store"`
	// N is the number of commands issued in the issue phase.
	N int `json:"n"`
	// Concurrency is the processor's handler count.
	Concurrency int `json:"concurrency"`
	// BatchSize is the processor's dequeue batch size.
	BatchSize int `json:"batch_size"`
	// Issuers is the number of issuing goroutines.
	Issuers int `json:"issuers"`
	// HandlerDurationMS is each handler's duration, milliseconds.
	HandlerDurationMS float64 `json:"handler_duration_ms"`
	// IssuedPerS is commands issued per second (issue phase).
	IssuedPerS float64 `json:"issued_per_s"`
	// ProcessedPerS is commands processed to `completed` (message deleted)
	// per second while draining the full queue.
	ProcessedPerS float64 `json:"processed_per_s"`
	// IssueCPUUSPerCommand and ProcessCPUUSPerCommand are the process's
	// CPU time (user + system, every thread: the engine's flushes and
	// compactions included) during the issue and the process phase,
	// divided by the commands, microseconds of one core. CPU time moves
	// less with the machine's load than a rate does.
	IssueCPUUSPerCommand   float64 `json:"issue_cpu_us_per_command"`
	ProcessCPUUSPerCommand float64 `json:"process_cpu_us_per_command"`
	// Completed is the number of commands the process phase completed.
	Completed int64 `json:"completed"`
	// LatencyRate is the latency phase's issue rate, commands per second.
	LatencyRate int `json:"latency_rate_per_s"`
	// LatencySamples is the number of commands timed in the latency phase.
	LatencySamples int `json:"latency_samples"`
	// LatencyP50MS and LatencyP99MS are Issue call → handler start, milliseconds.
	LatencyP50MS float64 `json:"latency_p50_ms"`
	LatencyP99MS float64 `json:"latency_p99_ms"`
	// LatencySlowSyncs is the number of the embedded store's log syncs
	// during the latency phase that took embedded.SlowSync (20 ms) or
	// longer: every command issued meanwhile waited for one, so a p99 far
	// above the p50 with slow syncs here is the disk's. LongestSyncMS is
	// the run's longest log sync. Both zero on Azure.
	LatencySlowSyncs uint64  `json:"latency_slow_syncs"`
	LongestSyncMS    float64 `json:"longest_sync_ms"`
	// BurnDown is StorageOpsPerCommand by kind of call (issue and process
	// phases; issue calls per issued command, process calls per completed
	// command).
	BurnDown Calls `json:"burn_down"`
	// SteadyCalls is the latency phase's storage calls per command, by
	// kind: in-process Issuer waking the processor (Notify) at LatencyRate.
	SteadyCalls *Calls `json:"steady_in_process,omitempty"`
	// HTTPTrickle is the HTTP trickle phase (nil when skipped).
	HTTPTrickle *TrickleResult `json:"http_trickle,omitempty"`
	// FirstDelivery compares the first delivery's fast path with the
	// fallback (null when skipped: FirstDeliveryN < 0).
	FirstDelivery *FirstDeliveryResult `json:"first_delivery"`
	// BurnDownFastPath is the share of the burn-down's deliveries that took
	// the first delivery's fast path (no point read).
	BurnDownFastPath float64 `json:"burn_down_fast_path_share"`
	// Retention is the cost of removing the run's commands once their
	// retention has passed (the retention sweep on the bench's tables).
	Retention *RetentionResult `json:"retention"`
	// IdlePerHour is IdleOpsPerHour by kind of call.
	IdlePerHour *Calls `json:"idle_per_hour,omitempty"`
	// StorageOpsPerCommand is every queue and table call of the issue and
	// process phases divided by Completed.
	StorageOpsPerCommand float64 `json:"storage_ops_per_command"`
	// IssueOpsPerCommand and ProcessOpsPerCommand split it by phase.
	IssueOpsPerCommand   float64 `json:"issue_ops_per_command"`
	ProcessOpsPerCommand float64 `json:"process_ops_per_command"`
	// OpsPerCommandByKind splits StorageOpsPerCommand by call.
	OpsPerCommandByKind map[string]float64 `json:"ops_per_command_by_kind"`
	// CallMSByKind is the mean duration of each kind of call during the
	// issue and process phases, milliseconds, as the caller saw it (queueing
	// in the driver or the service included). A combined embedded write is
	// timed under "batch".
	CallMSByKind map[string]float64 `json:"call_ms_by_kind"`
	// CommitsPerCommand is the embedded store's log syncs (fdatasync, each
	// making a group of writes durable) per command over the issue and
	// process phases (embedded only).
	CommitsPerCommand float64 `json:"commits_per_command,omitempty"`
	// IdleOpsPerHour is IdlePollOpsPerHour + IdleReconcileOpsPerHour: the
	// storage calls of one idle queue (and its processor's reconciler) per hour.
	IdleOpsPerHour float64 `json:"idle_ops_per_hour"`
	// IdlePollOpsPerHour is the idle poller's calls per hour at MaxPollInterval.
	IdlePollOpsPerHour float64 `json:"idle_poll_ops_per_hour"`
	// IdleReconcileOpsPerHour is the reconciler's calls per hour on an empty
	// deployment as the processor schedules it: one run an hour, the marker
	// query, except one run a day that is the pending scan instead.
	IdleReconcileOpsPerHour float64 `json:"idle_reconcile_ops_per_hour"`
	// IdleHeartbeatOpsPerHour is the heartbeat's calls per hour of one
	// running processor (per process, not per queue: not in
	// IdleOpsPerHour): one upsert per model.DefaultHeartbeatInterval
	// and the hourly clean-up query, each measured once.
	IdleHeartbeatOpsPerHour float64 `json:"idle_heartbeat_ops_per_hour"`
	// ReconcileOpsPerPassLoaded is one pending-scan pass on the bench's own
	// tables after the run: the scan pages through every command row, 1000
	// per query.
	ReconcileOpsPerPassLoaded int64 `json:"reconcile_ops_per_pass_loaded"`
	// IdleWakeLatencyMS is the slowest Issue call → handler start of commands
	// issued in process while the processor waited out MaxPollInterval.
	IdleWakeLatencyMS float64 `json:"idle_wake_latency_ms"`
	// MaxPollIntervalS is the MaxPollInterval the idle figures are for, seconds.
	MaxPollIntervalS float64 `json:"max_poll_interval_s"`
	// MaxRSSMB is the process's peak resident set size (getrusage), MiB,
	// over the whole run (issuing included).
	MaxRSSMB float64 `json:"max_rss_mb"`
	// ProcessRSSPeakMB is the peak resident set size sampled every 50 ms
	// while the processor drains the queue, MiB (Linux /proc/self/status).
	ProcessRSSPeakMB float64 `json:"process_rss_peak_mb"`
	// ProcessRSSAnonPeakMB is its anonymous part (Go heap, stacks), MiB; the
	// rest is file pages, e.g. the embedded store's memory-mapped file, which
	// the kernel reclaims under pressure.
	ProcessRSSAnonPeakMB float64 `json:"process_rss_anon_peak_mb"`
	// BaselineProcessedPerS is the raw SDK pipeline's processed per second.
	BaselineProcessedPerS float64 `json:"baseline_processed_per_s,omitempty"`
	// BaselineIssuedPerS is the raw SDK pipeline's issued per second.
	BaselineIssuedPerS float64 `json:"baseline_issued_per_s,omitempty"`
	// Ratio is ProcessedPerS / BaselineProcessedPerS.
	Ratio float64 `json:"ratio,omitempty"`
}

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("bench: invalid config")

// withDefaults fills zero fields and validates.
func (c Config) withDefaults() (Config, error) {
	if c.Store == "" {
		c.Store = StoreEmbedded
	}
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}
	switch c.Store {
	case StoreEmbedded, StoreAzure:
	default:
		bad("store %q: use %q or %q", c.Store, StoreEmbedded, StoreAzure)
	}
	az := c.Store == StoreAzure
	if c.N == 0 {
		c.N = DefaultNEmbedded
		if az {
			c.N = DefaultNAzure
		}
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Issuers == 0 {
		c.Issuers = DefaultIssuers
	}
	if c.BatchSize == 0 {
		c.BatchSize = model.DefaultBatchSize
	}
	if c.TrickleN == 0 {
		c.TrickleN = DefaultTrickleNEmbedded
		if az {
			c.TrickleN = DefaultTrickleNAzure
		}
	}
	if c.FirstDeliveryN == 0 {
		c.FirstDeliveryN = DefaultFirstDeliveryN
	}
	if c.TrickleClients == 0 {
		c.TrickleClients = DefaultTrickleClients
	}
	if c.TrickleClients < 0 {
		bad("trickle clients %d: must be positive", c.TrickleClients)
	}
	if c.TrickleRate == 0 {
		c.TrickleRate = DefaultTrickleRateEmbedded
		if az {
			c.TrickleRate = DefaultTrickleRateAzure
		}
	}
	if c.Rate == 0 {
		c.Rate = DefaultRateEmbedded
		if az {
			c.Rate = DefaultRateAzure
		}
	}
	if c.LatencyDuration == 0 {
		c.LatencyDuration = DefaultLatencyDuration
	}
	if c.MaxPollInterval == 0 {
		c.MaxPollInterval = model.DefaultMaxPollInterval
	}
	if c.IdleWindow == 0 {
		c.IdleWindow = DefaultIdleWindow
	}
	if c.IdleScale == 0 {
		c.IdleScale = DefaultIdleScale
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Prefix == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.Prefix = "bench" + hex.EncodeToString(b[:])
	}
	if c.N < 1 {
		bad("n %d: issue at least 1 command", c.N)
	}
	if c.Concurrency < 1 {
		bad("concurrency %d: run at least 1 handler", c.Concurrency)
	}
	if c.Issuers < 1 {
		bad("issuers %d: use at least 1", c.Issuers)
	}
	if c.BatchSize < 1 || c.BatchSize > storage.MaxDequeue {
		bad("batch size %d: use 1..%d", c.BatchSize, storage.MaxDequeue)
	}
	if c.HandlerDuration < 0 {
		bad("handler duration %s is negative", c.HandlerDuration)
	}
	if c.Rate < 1 {
		bad("rate %d: issue at least 1 command per second", c.Rate)
	}
	if c.MaxPollInterval < model.DefaultMinPollInterval {
		bad("max poll interval %s: use at least %s", c.MaxPollInterval, model.DefaultMinPollInterval)
	}
	if c.IdleScale < 1 {
		bad("idle scale %g: use at least 1", c.IdleScale)
	}
	switch c.Baseline {
	case "":
	case BaselineRaw:
		if !az {
			bad("baseline %q needs --store azure (it is written against the Azure SDK)", c.Baseline)
		}
	default:
		bad("baseline %q: use %q or leave it empty", c.Baseline, BaselineRaw)
	}
	return c, errors.Join(errs...)
}

// benchCmd is the command the bench issues. Sent (Unix nanoseconds) is set
// in the latency phases: the handler measures from it.
type benchCmd struct {
	Seq  int   `json:"seq"`
	Sent int64 `json:"sent,omitempty"`
}

// CommandType implements cmdq.Command.
func (benchCmd) CommandType() string { return "bench.noop" }

// env is what every phase of a run shares.
type env struct {
	cfg     Config
	st      storage.Store // the driver
	counter *Counter
	counted storage.Store      // counter.Counted(): what the Issuer and processor use
	emb     *embedded.Store    // nil on azure
	conn    string             // azure connection string
	azurite *emulator.Instance // the emulator this run started, if any
	logf    func(format string, a ...any)

	completed atomic.Int64 // commands completed (final batch written)
	handled   atomic.Int64 // handler invocations
	lat       latencies
}

// latencies collects Issue → handler start samples of commands with Sent set.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) take() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.d
	l.d = nil
	return d
}

// Run performs a run and returns what it measured.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	e := &env{cfg: cfg, logf: func(string, ...any) {}}
	if cfg.Progress != nil {
		e.logf = func(format string, a ...any) { fmt.Fprintf(cfg.Progress, "bench: "+format+"\n", a...) }
	}
	cleanup, err := e.open(ctx)
	if err != nil {
		return Result{}, err
	}
	defer cleanup()

	res := Result{
		Store: cfg.Store, N: cfg.N, Concurrency: cfg.Concurrency, BatchSize: cfg.BatchSize, Issuers: cfg.Issuers,
		HandlerDurationMS: ms(cfg.HandlerDuration), LatencyRate: cfg.Rate, MaxPollIntervalS: cfg.MaxPollInterval.Seconds(),
	}
	if err := e.throughput(ctx, &res); err != nil {
		return res, err
	}
	if cfg.FirstDeliveryN > 0 {
		fd, err := e.firstDelivery(ctx, res.BurnDownFastPath)
		if err != nil {
			return res, err
		}
		res.FirstDelivery = fd
	}
	if cfg.TrickleN > 0 {
		tr, err := e.trickle(ctx)
		if err != nil {
			return res, err
		}
		res.HTTPTrickle = tr
	}
	if cfg.IdleWindow > 0 {
		if err := e.idle(ctx, &res); err != nil {
			return res, err
		}
	}
	ret, err := e.retention(ctx)
	if err != nil {
		return res, err
	}
	res.Retention = ret
	if e.conn != "" {
		// cmdq's tables and queues go before the baseline runs, so both
		// pipelines meet an emulator holding the same data.
		prefixes := []string{cfg.Prefix, cfg.Prefix + "i", cfg.Prefix + "h", cfg.Prefix + "f", cfg.Prefix + "s"}
		e.dropDayTables(ctx, prefixes...)
		dropAzure(ctx, e.conn, prefixes...)
	}
	if cfg.Baseline == BaselineRaw {
		e.logf("baseline: raw Azure SDK pipeline, %d commands, concurrency %d", cfg.N, cfg.Concurrency)
		conn := e.conn
		if e.azurite != nil {
			// An emulator slows as it holds more data, whatever was deleted:
			// the baseline gets a fresh one, as cmdq did.
			e.azurite.Stop()
			a, err := startAzurite()
			if err != nil {
				return res, err
			}
			defer a.Stop()
			conn = a.ConnectionString
		}
		b, err := rawBaseline(ctx, conn, cfg)
		if err != nil {
			return res, err
		}
		res.BaselineIssuedPerS, res.BaselineProcessedPerS = b.issuedPerS, b.processedPerS
		if b.processedPerS > 0 {
			res.Ratio = res.ProcessedPerS / b.processedPerS
		}
	}
	if e.emb != nil {
		res.LongestSyncMS = ms(e.emb.Stats().LongestSync)
	}
	res.MaxRSSMB = maxRSSMiB()
	return res, nil
}

// open opens the store and returns what closes it.
func (e *env) open(ctx context.Context) (func(), error) {
	var closers []func()
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	switch e.cfg.Store {
	case StoreEmbedded:
		path := e.cfg.Path
		if path == "" {
			dir, err := os.MkdirTemp("", "cmdq-bench-")
			if err != nil {
				return nil, fmt.Errorf("bench: temporary directory: %w", err)
			}
			closers = append(closers, func() { _ = os.RemoveAll(dir) })
			path = filepath.Join(dir, "cmdq-data")
		}
		st, err := embedded.Open(path, nil)
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("bench: open embedded store: %w", err)
		}
		closers = append(closers, func() { _ = st.Close() })
		e.st, e.emb = st, st
	case StoreAzure:
		conn := e.cfg.ConnectionString
		if conn == "" {
			conn = os.Getenv("AZURE_STORAGE_CONNECTION_STRING")
		}
		if conn == "" {
			e.logf("starting Azurite from tools/azurite (set AZURE_STORAGE_CONNECTION_STRING to use another account)")
			a, err := startAzurite()
			if err != nil {
				return nil, err
			}
			closers = append(closers, a.Stop)
			conn = a.ConnectionString
			e.azurite = a
		}
		conn = emulator.ExpandConnectionString(conn)
		st, err := azure.Open(ctx, azure.Config{ConnectionString: conn})
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("bench: open Azure store: %w", err)
		}
		closers = append(closers, func() { _ = st.Close() })
		e.st, e.conn = st, conn
	}
	e.counter = NewCounter(e.st)
	e.counted = e.counter.Counted()
	return cleanup, nil
}

// dropDayTables deletes the day tables of the prefixes (best effort: the
// run's cleanup; dropAzure deletes the base tables and queues).
func (e *env) dropDayTables(ctx context.Context, prefixes ...string) {
	for _, p := range prefixes {
		names := layout.Names{Prefix: p}
		tables, _ := e.st.Tables(ctx, names.CommandsTable())
		for _, t := range tables {
			if _, ok := names.ParseDayTable(t); ok {
				_ = e.st.DeleteTable(ctx, t)
			}
		}
	}
}

// registry registers the bench handler: it records the latency of commands
// that carry Sent and waits HandlerDuration.
func (e *env) registry() (*registry.Registry, error) {
	reg := registry.NewRegistry()
	d := e.cfg.HandlerDuration
	err := registry.Register(reg, func(ctx context.Context, c benchCmd, _ *registry.Attempt) error {
		if c.Sent != 0 {
			e.lat.add(time.Since(time.Unix(0, c.Sent)))
		}
		e.handled.Add(1)
		if d > 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}, registry.Options{})
	if err != nil {
		return nil, fmt.Errorf("bench: register handler: %w", err)
	}
	return reg, nil
}

// metrics counts completed commands for the bench.
type metrics struct {
	completed *atomic.Int64
	onPoll    func(model.Observation)
}

// Observe counts completions, and passes dequeues to onPoll when set.
func (m metrics) Observe(o model.Observation) {
	switch {
	case o.Kind == model.ObservedCompleted:
		m.completed.Add(1)
	case o.Kind == model.ObservedPolled && m.onPoll != nil:
		m.onPoll(o)
	}
}

// started is a running processor.
type started struct {
	p      *processor.Processor
	cancel context.CancelFunc
	done   chan error
}

func (s *started) stop() error {
	s.cancel()
	return <-s.done
}

func (e *env) startProcessor(ctx context.Context, reg *registry.Registry, cfg processor.Config, onPoll func(model.Observation)) (*started, error) {
	cfg.Observer = metrics{&e.completed, onPoll}
	cfg.Worker = "bench"
	if cfg.HeartbeatInterval == 0 {
		// The heartbeat is a cost per process, not per command or queue:
		// measured on its own (idle).
		cfg.HeartbeatInterval = model.NoHeartbeat
	}
	p, err := processor.New(e.counted, reg, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: processor: %w", err)
	}
	pctx, cancel := context.WithCancel(ctx)
	s := &started{p: p, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- p.Run(pctx) }()
	return s, nil
}

// waitFor polls cond every millisecond until it holds, ctx ends or timeout
// passes (then it returns an error naming what).
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s: not reached within %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// profile starts a CPU profile into ProfileDir/name when ProfileDir is set;
// the returned function stops it.
func (e *env) profile(name string) (func(), error) {
	if e.cfg.ProfileDir == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(e.cfg.ProfileDir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: profile directory: %w", err)
	}
	f, err := os.Create(filepath.Join(e.cfg.ProfileDir, name))
	if err != nil {
		return nil, fmt.Errorf("bench: profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("bench: profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

// slowSyncs returns the embedded store's slow log syncs so far (0 on
// Azure).
func (e *env) slowSyncs() uint64 {
	if e.emb == nil {
		return 0
	}
	return e.emb.Stats().SlowSyncs
}

func (e *env) commits() uint64 {
	if e.emb == nil {
		return 0
	}
	return e.emb.Stats().Commits
}

// throughput runs the issue, process and latency phases.
func (e *env) throughput(ctx context.Context, res *Result) error {
	cfg := e.cfg
	iss, err := issuer.NewIssuer(e.counted, issuer.IssuerOptions{Prefix: cfg.Prefix})
	if err != nil {
		return fmt.Errorf("bench: issuer: %w", err)
	}
	// Create the queue and tables before timing.
	if _, err := iss.Issue(ctx, benchCmd{Seq: -1}); err != nil {
		return fmt.Errorf("bench: warm-up issue: %w", err)
	}
	n := cfg.N + 1 // the warm-up command is processed too

	e.logf("issue: %d commands from %d goroutines", cfg.N, cfg.Issuers)
	stopProf, err := e.profile("issue.pprof")
	if err != nil {
		return err
	}
	ops0, commits0, dur0 := e.counter.Snapshot(), e.commits(), e.counter.Durations()
	cpu0 := cpuTime()
	elapsed, err := issueAll(ctx, iss, cfg.N, cfg.Issuers, cfg.Timeout)
	cpu1 := cpuTime()
	stopProf()
	if err != nil {
		return err
	}
	ops1 := e.counter.Snapshot()
	res.IssuedPerS = float64(cfg.N) / elapsed.Seconds()
	res.IssueCPUUSPerCommand = float64((cpu1 - cpu0).Microseconds()) / float64(cfg.N)

	reg, err := e.registry()
	if err != nil {
		return err
	}
	e.logf("process: draining %d commands, concurrency %d, batch %d", n, cfg.Concurrency, cfg.BatchSize)
	stopProf, err = e.profile("process.pprof")
	if err != nil {
		return err
	}
	began, cpu2 := time.Now(), cpuTime()
	sp, err := e.startProcessor(ctx, reg, processor.Config{
		Prefix: cfg.Prefix, BatchSize: cfg.BatchSize, Concurrency: cfg.Concurrency, NewBatchThreshold: cfg.NewBatchThreshold,
		MaxPollInterval: cfg.MaxPollInterval, ReconcileInterval: model.NoReconcile,
	}, nil)
	if err != nil {
		stopProf()
		return err
	}
	lastSample := time.Time{}
	err = waitFor(ctx, cfg.Timeout, "process every command", func() bool {
		if now := time.Now(); now.Sub(lastSample) >= 50*time.Millisecond {
			lastSample = now
			total, anon := rssNow()
			res.ProcessRSSPeakMB = max(res.ProcessRSSPeakMB, total)
			res.ProcessRSSAnonPeakMB = max(res.ProcessRSSAnonPeakMB, anon)
		}
		return e.completed.Load() >= int64(n) && sp.p.Health().InFlight == 0
	})
	elapsed = time.Since(began)
	res.ProcessCPUUSPerCommand = float64((cpuTime() - cpu2).Microseconds()) / float64(n)
	stopProf()
	if err != nil {
		_ = sp.stop()
		return fmt.Errorf("%w (%d of %d completed)", err, e.completed.Load(), n)
	}
	ops2, commits2, dur2 := e.counter.Snapshot(), e.commits(), e.counter.Durations()
	res.Completed = e.completed.Load()
	res.BurnDownFastPath = float64(sp.p.Stats().FastPath) / float64(n)
	res.ProcessedPerS = float64(n) / elapsed.Seconds()
	var issueOps, procOps int64
	res.OpsPerCommandByKind = map[string]float64{}
	res.CallMSByKind = map[string]float64{}
	for i := range ops0 {
		issueOps += ops1[i] - ops0[i]
		procOps += ops2[i] - ops1[i]
		if ops2[i] > ops0[i] {
			res.CallMSByKind[Op(i).String()] = ms(dur2[i]-dur0[i]) / float64(ops2[i]-ops0[i])
			res.OpsPerCommandByKind[Op(i).String()] = float64(ops1[i]-ops0[i])/float64(cfg.N) + float64(ops2[i]-ops1[i])/float64(res.Completed)
		}
	}
	// The warm-up command was issued before counting: count its issue as
	// the others' (the process phase completes N+1 commands).
	var burn [numOps]float64
	for i := range burn {
		burn[i] = float64(ops1[i]-ops0[i])/float64(cfg.N) + float64(ops2[i]-ops1[i])/float64(res.Completed)
	}
	res.BurnDown = callsOfFloat(burn)
	res.IssueOpsPerCommand = float64(issueOps) / float64(cfg.N)
	res.ProcessOpsPerCommand = float64(procOps) / float64(res.Completed)
	res.StorageOpsPerCommand = res.IssueOpsPerCommand + res.ProcessOpsPerCommand
	if e.emb != nil {
		res.CommitsPerCommand = float64(commits2-commits0) / float64(cfg.N)
	}

	if cfg.LatencyDuration > 0 {
		e.logf("latency: %d commands/s for %s, Issue → handler start", cfg.Rate, cfg.LatencyDuration)
		before := e.counter.Snapshot()
		slow := e.slowSyncs()
		lat, err := e.steady(ctx, sp, cfg.Rate, cfg.LatencyDuration)
		if err != nil {
			_ = sp.stop()
			return err
		}
		res.LatencySlowSyncs = e.slowSyncs() - slow
		steady := callsPer(diff(before, e.counter.Snapshot()), float64(len(lat)))
		res.SteadyCalls = &steady
		res.LatencySamples = len(lat)
		res.LatencyP50MS, res.LatencyP99MS = ms(quantile(lat, 0.50)), ms(quantile(lat, 0.99))
	}
	if err := sp.stop(); err != nil {
		return fmt.Errorf("bench: processor: %w", err)
	}
	return nil
}

// DefaultFirstDeliveryN is Config.FirstDeliveryN's default.
const DefaultFirstDeliveryN = 256

// firstDelivery runs the first-delivery phases: FirstDeliveryN commands
// issued and then burnt down with the fast path, and as many with
// NoFastPath (every delivery loads), each on a fresh prefix; calls per
// completed command, issue included.
func (e *env) firstDelivery(ctx context.Context, burnShare float64) (*FirstDeliveryResult, error) {
	cfg := e.cfg
	res := &FirstDeliveryResult{BurnDownShare: burnShare}
	for _, slow := range []bool{false, true} {
		prefix := cfg.Prefix + "f"
		if slow {
			prefix = cfg.Prefix + "s"
		}
		iss, err := issuer.NewIssuer(e.counted, issuer.IssuerOptions{Prefix: prefix})
		if err != nil {
			return nil, fmt.Errorf("bench: issuer: %w", err)
		}
		reg, err := e.registry()
		if err != nil {
			return nil, err
		}
		sp, err := e.startProcessor(ctx, reg, processor.Config{
			Prefix: prefix, BatchSize: cfg.BatchSize, Concurrency: cfg.Concurrency, NewBatchThreshold: cfg.NewBatchThreshold,
			MaxPollInterval: cfg.MaxPollInterval, ReconcileInterval: model.NoReconcile, NoFastPath: slow,
		}, nil)
		if err != nil {
			return nil, err
		}
		// Let the processor open its queue and go idle before counting.
		if err := waitFor(ctx, cfg.Timeout, "first-delivery processor to poll", func() bool { return sp.p.Health().State != model.ProcessorStarting }); err != nil {
			_ = sp.stop()
			return nil, err
		}
		n := cfg.FirstDeliveryN
		e.logf("first delivery (no fast path: %v): %d commands", slow, n)
		before := e.counter.Snapshot()
		if _, err := issueAll(ctx, iss, n, cfg.Issuers, cfg.Timeout); err != nil {
			_ = sp.stop()
			return nil, err
		}
		sp.p.Notify(model.DefaultQueue)
		err = waitFor(ctx, cfg.Timeout, "first-delivery commands", func() bool {
			return sp.p.Stats().Completed >= int64(n) && sp.p.Health().InFlight == 0
		})
		after := e.counter.Snapshot()
		st := sp.p.Stats()
		if serr := sp.stop(); err == nil && serr != nil {
			err = fmt.Errorf("bench: processor: %w", serr)
		}
		if err != nil {
			return nil, err
		}
		calls := callsPer(diff(before, after), float64(st.Completed))
		if slow {
			res.Fallback = calls
		} else {
			res.FastPath = calls
			res.FastPathShare = float64(st.FastPath) / float64(st.Completed)
		}
	}
	return res, nil
}

// issueAll issues n commands from workers goroutines and returns the time taken.
func issueAll(ctx context.Context, iss *issuer.Issuer, n, workers int, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("bench: issuing %d commands took over %s", n, timeout))
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	began := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if _, err := iss.Issue(ctx, benchCmd{Seq: i}); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("bench: issue command %d: %w", i, err)
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(began), first
}

// steady issues at rate commands/s for d, each from its own goroutine at
// its scheduled time, with the processor woken by Notify, and returns the
// Issue → handler start latencies.
func (e *env) steady(ctx context.Context, sp *started, rate int, d time.Duration) ([]time.Duration, error) {
	// As cmdq.Client wires it: the hand-off when a slot is free, else a
	// visible enqueue and a wake-up.
	iss, err := issuer.NewIssuer(e.counted, issuer.IssuerOptions{Prefix: e.cfg.Prefix, Wake: sp.p.Notify, HandOff: sp.p.HandOff})
	if err != nil {
		return nil, fmt.Errorf("bench: issuer: %w", err)
	}
	e.lat.take()
	total := int(float64(rate) * d.Seconds())
	if total < 1 {
		total = 1
	}
	base := e.completed.Load()
	interval := time.Second / time.Duration(rate)
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	began := time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	for i := range total {
		// Pace: wait for this command's slot.
		if w := time.Until(began.Add(time.Duration(i) * interval)); w > 0 {
			t.Reset(w)
			select {
			case <-t.C:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := iss.Issue(ctx, benchCmd{Seq: i, Sent: time.Now().UnixNano()}); err != nil {
				select {
				case errc <- fmt.Errorf("bench: latency issue: %w", err):
				default:
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	if err := waitFor(ctx, e.cfg.Timeout, "complete the latency phase's commands", func() bool {
		return e.completed.Load() >= base+int64(total) && sp.p.Health().InFlight == 0
	}); err != nil {
		return nil, err
	}
	return e.lat.take(), nil
}

// idle measures the storage calls of an idle queue and the wake-up latency.
func (e *env) idle(ctx context.Context, res *Result) error {
	cfg := e.cfg
	reg, err := e.registry()
	if err != nil {
		return err
	}
	// A fresh prefix: an empty deployment, as an idle one is.
	prefix := cfg.Prefix + "i"
	minP := time.Duration(float64(model.DefaultMinPollInterval) / cfg.IdleScale)
	maxP := time.Duration(float64(cfg.MaxPollInterval) / cfg.IdleScale)
	if minP <= 0 {
		minP = 1
	}
	// Polls before the backoff is capped: the interval doubles from minP.
	capAt := 0
	for iv := minP; iv < maxP; iv *= 2 {
		capAt++
	}
	type mark struct {
		at  time.Time
		ops [numOps]int64
	}
	marks := make(chan mark, 1)
	var polls, capPolls, capWait atomic.Int64
	onPoll := func(ev model.Observation) {
		n := polls.Add(1) - 1
		if n == int64(capAt) {
			marks <- mark{ev.Time, e.counter.Snapshot()}
		}
		if n >= int64(capAt) {
			capPolls.Add(1)
			capWait.Add(int64(ev.Wait))
		}
	}
	e.logf("idle: poll schedule scaled 1/%g (cap %s stands for %s), watched %s", cfg.IdleScale, maxP, cfg.MaxPollInterval, cfg.IdleWindow)
	sp, err := e.startProcessor(ctx, reg, processor.Config{
		Prefix: prefix, BatchSize: cfg.BatchSize, Concurrency: cfg.Concurrency,
		MinPollInterval: minP, MaxPollInterval: maxP, ReconcileInterval: model.NoReconcile,
	}, onPoll)
	if err != nil {
		return err
	}
	var m0 mark
	select {
	case m0 = <-marks:
	case <-time.After(cfg.Timeout):
		_ = sp.stop()
		return fmt.Errorf("bench: idle: backoff did not reach its cap within %s", cfg.Timeout)
	case <-ctx.Done():
		_ = sp.stop()
		return ctx.Err()
	}
	t := time.NewTimer(time.Until(m0.at.Add(cfg.IdleWindow)))
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		_ = sp.stop()
		return ctx.Err()
	}
	pollOps := diff(m0.ops, e.counter.Snapshot())
	var ops int64
	for _, n := range pollOps {
		ops += n
	}
	window := time.Since(m0.at)
	// Polls from the first at the cap to now; the ops counted since the
	// first one are those of the polls after it.
	nPolls, sumWait := capPolls.Load(), capWait.Load()
	if err := sp.stop(); err != nil {
		return fmt.Errorf("bench: idle processor: %w", err)
	}
	// The schedule is the waits the poller chose (scale-free); the time a
	// dequeue itself takes is ignored, which over-counts polls slightly
	// (an upper bound): ops per poll × polls an hour at the real waits.
	var pollsPerHourOp float64 // polls' ops per hour = ops × this
	if nPolls > 1 && sumWait > 0 {
		meanWait := float64(sumWait) / float64(nPolls) * cfg.IdleScale
		pollsPerHourOp = float64(time.Hour) / meanWait / float64(nPolls-1)
	} else {
		// window at scale s stands for window×s at the real intervals.
		pollsPerHourOp = float64(time.Hour) / (float64(window) * cfg.IdleScale)
	}
	res.IdlePollOpsPerHour = float64(ops) * pollsPerHourOp

	// The reconciler on the empty deployment, as the processor schedules it:
	// one run per ReconcileInterval, each the marker query, except that one
	// run per ReconcileScanInterval is the pending scan instead.
	pass := func(pfx string, scan bool) ([numOps]int64, error) {
		before := e.counter.Snapshot()
		names := layout.Names{Prefix: pfx}
		rec, err := record.Open(ctx, e.counted, names, record.Options{})
		if err != nil {
			return [numOps]int64{}, fmt.Errorf("bench: reconcile pass: %w", err)
		}
		opts := reconcile.Options{MarkerGrace: model.DefaultReconcileGrace, PendingGrace: model.DefaultReconcileStaleAfter, ScanPending: scan, SkipMarkers: scan}
		if _, err := reconcile.Pass(ctx, enqueue.NewEnqueuer(e.counted, names, rec, nil), opts); err != nil {
			return [numOps]int64{}, fmt.Errorf("bench: reconcile pass: %w", err)
		}
		return diff(before, e.counter.Snapshot()), nil
	}
	sum := func(a [numOps]int64) (n int64) {
		for _, v := range a {
			n += v
		}
		return n
	}
	markerOps, err := pass(prefix, false)
	if err != nil {
		return err
	}
	scanOps, err := pass(prefix, true)
	if err != nil {
		return err
	}
	runsPerHour := float64(time.Hour) / float64(model.DefaultReconcileInterval)
	scanShare := float64(model.DefaultReconcileInterval) / float64(model.DefaultReconcileScanInterval)
	res.IdleReconcileOpsPerHour = runsPerHour * ((1-scanShare)*float64(sum(markerOps)) + scanShare*float64(sum(scanOps)))
	res.IdleOpsPerHour = res.IdlePollOpsPerHour + res.IdleReconcileOpsPerHour
	// By kind: the same weights applied to each kind's count.
	var perHour [numOps]float64
	for i := range perHour {
		perHour[i] = float64(pollOps[i])*pollsPerHourOp + runsPerHour*((1-scanShare)*float64(markerOps[i])+scanShare*float64(scanOps[i]))
	}
	idle := callsOfFloat(perHour)
	res.IdlePerHour = &idle

	// The heartbeat of one running processor, as it schedules it: one
	// upsert per interval, one clean-up (a query of the heartbeat rows,
	// nothing to delete) an hour.
	hb, err := record.Open(ctx, e.counted, layout.Names{Prefix: prefix}, record.Options{})
	if err != nil {
		return fmt.Errorf("bench: heartbeat: %w", err)
	}
	before := e.counter.Snapshot()
	if _, err := hb.WriteBeat(ctx, shared.Beat{ID: "pbench", Name: "bench", State: "idle", Every: model.DefaultHeartbeatInterval}); err != nil {
		return fmt.Errorf("bench: heartbeat: %w", err)
	}
	beatOps := diff(before, e.counter.Snapshot())
	before = e.counter.Snapshot()
	if _, err := hb.DeleteBeatsBefore(ctx, time.Now().Add(-model.ProcessorForgetAfter), "pbench"); err != nil {
		return fmt.Errorf("bench: heartbeat clean-up: %w", err)
	}
	cleanOps := diff(before, e.counter.Snapshot())
	if err := hb.DeleteBeat(ctx, "pbench"); err != nil {
		return fmt.Errorf("bench: heartbeat: %w", err)
	}
	res.IdleHeartbeatOpsPerHour = float64(time.Hour/model.DefaultHeartbeatInterval)*float64(sum(beatOps)) +
		float64(time.Hour/model.ProcessorForgetAfter)*float64(sum(cleanOps))
	// The pending scan on the loaded bench tables.
	loaded, err := pass(cfg.Prefix, true)
	if err != nil {
		return err
	}
	res.ReconcileOpsPerPassLoaded = sum(loaded)

	wake, err := e.wake(ctx, reg, prefix)
	if err != nil {
		return err
	}
	res.IdleWakeLatencyMS = ms(wake)
	return nil
}

// wake starts a processor whose poll interval is MaxPollInterval from the
// first empty poll on, and times DefaultWakeSamples commands issued in
// process (Notify) while it waits; it returns the slowest.
func (e *env) wake(ctx context.Context, reg *registry.Registry, prefix string) (time.Duration, error) {
	cfg := e.cfg
	empty := make(chan struct{}, 16)
	sp, err := e.startProcessor(ctx, reg, processor.Config{
		Prefix: prefix, BatchSize: cfg.BatchSize, Concurrency: cfg.Concurrency,
		MinPollInterval: cfg.MaxPollInterval, MaxPollInterval: cfg.MaxPollInterval, ReconcileInterval: model.NoReconcile,
		// Every poll that leaves the poller waiting (MinPollInterval is
		// MaxPollInterval here: at least 48 s at the defaults) starts a
		// sample: the first empty poll, and the poll that fetched the last
		// sample's command (fewer than asked: the poller waits as after an
		// empty poll). Waiting for an empty poll instead cost a whole
		// scheduled interval per sample (two minutes a run).
	}, func(ev model.Observation) {
		if ev.Err == nil && ev.Wait > 0 {
			select {
			case empty <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		return 0, err
	}
	defer func() { _ = sp.stop() }()
	iss, err := issuer.NewIssuer(e.counted, issuer.IssuerOptions{Prefix: prefix, Wake: sp.p.Notify})
	if err != nil {
		return 0, fmt.Errorf("bench: issuer: %w", err)
	}
	e.lat.take()
	var worst time.Duration
	for i := range DefaultWakeSamples {
		// The poller has just polled and waits MaxPollInterval.
		select {
		case <-empty:
		case <-time.After(cfg.Timeout):
			return 0, fmt.Errorf("bench: idle wake: no empty poll within %s", cfg.Timeout)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		base := e.completed.Load()
		if _, err := iss.Issue(ctx, benchCmd{Seq: i, Sent: time.Now().UnixNano()}); err != nil {
			return 0, fmt.Errorf("bench: idle wake issue: %w", err)
		}
		// Within MaxPollInterval/2 it cannot be the scheduled poll (waits are
		// at least MaxPollInterval × (1 − jitter) = 48 s at the defaults).
		if err := waitFor(ctx, cfg.MaxPollInterval/2, "idle wake: handler start", func() bool {
			return e.completed.Load() > base
		}); err != nil {
			return 0, err
		}
		for _, d := range e.lat.take() {
			worst = max(worst, d)
		}
	}
	return worst, nil
}

// quantile returns the q-quantile (nearest rank) of d.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
