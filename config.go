package cmdq

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/storage"
)

// Config configures a Client. The zero Config is valid: every zero field
// takes the default its comment states. Validate reports every problem at
// once.
type Config struct {
	// --- Storage names ---

	// Prefix starts every storage name: the queues "<prefix>-<queue>" and
	// the tables "<prefix>commands" and "<prefix>poison". Lowercase letters
	// and digits, starting with a letter, at most 40 characters. Clients
	// (and cmdq processes) that share a store and a prefix share their
	// commands. Defaults to DefaultPrefix ("cmdq").
	Prefix string

	// --- Issuing ---

	// MaxParamsBytes limits a command's compact JSON parameters, in bytes.
	// Defaults to MaxParamsBytes (500 KiB), also the largest allowed value.
	MaxParamsBytes int
	// IssueHeadroom is the free space, in bytes, that issuing keeps on
	// the embedded store's disk above the store's own reserve
	// (embedded.Options.Reserve): while less than reserve plus headroom
	// is free, Issue, IssueRaw and IssueMany fail with ErrStorageFull
	// and store nothing, while the processor goes on recording the work
	// already accepted in the space between (it stops at the reserve).
	// Checking costs no storage call (a cached statfs). Default
	// DefaultIssueHeadroom (64 MiB); NoIssueHeadroom (-1) for none
	// (issues are refused at the reserve). Stores that keep no data on a
	// local disk (Azure) never refuse.
	IssueHeadroom int64
	// EnqueueRetry is the first delay of the background retries of
	// enqueues that failed after a command was stored (doubling up to 1
	// minute, while the Client lives). Negative disables them (the
	// reconciler still enqueues marked commands). Defaults to 1 s.
	EnqueueRetry time.Duration
	// RecoveryDelay is the visibility delay of a recovery enqueue — a
	// message sent for a command that may have one already (a re-issue of
	// a pending, never-started command, a retried or reconciled enqueue, a
	// repeated requeue) — of a command type the Client neither registers
	// nor declares. It must be at least that type's lease plus
	// StartedWriteDelay, so that a first message that exists after all has
	// been started or finished before the second becomes visible (a first
	// run whose started event cannot be written ends by then:
	// docs/lifecycle.md, "Duplicate messages"). Types the Client knows use
	// their own lease plus StartedWriteDelay. At most 7 days. Defaults to
	// 30 s (the default lease).
	RecoveryDelay time.Duration

	// --- Processing (Start, Run, RunFor) ---

	// Worker names this process's processor in events and logs. Defaults
	// to "<hostname>-<pid>".
	Worker string
	// Concurrency is the most handlers run at once across all queues.
	// Defaults to 32.
	Concurrency int
	// BatchSize is how many messages one dequeue asks for, 1..32. Defaults
	// to 32.
	BatchSize int
	// NewBatchThreshold bounds the prefetch: the messages held beyond
	// Concurrency (dequeued, waiting for a handler slot), so that the next
	// batch is in hand when slots free up. The prefetch used is what
	// Concurrency slots start within 500 ms at the average handler
	// duration, at most NewBatchThreshold: fast handlers get full batches
	// fetched ahead, slow ones none. At most 10,000; NoThreshold (-1) for
	// no prefetch. Defaults to BatchSize.
	NewBatchThreshold int
	// QueueWeights shares the processor between the queues it polls:
	// queue name → weight, 1..MaxQueueWeight. Under saturation (more
	// ready work than handler slots on every queue) the processor starts
	// commands from the queues in proportion to their weights (6:3:1
	// gives 60 %, 30 % and 10 % of the starts); a queue with no ready work
	// lends its share to the others, and a queue with work waiting is
	// never starved: between two of its starts the other queues start at
	// most Σ(w + ⌊w/own weight⌋ + 1) commands over their weights w (20
	// for the lightest of 6:3:1; docs/processor.md, "Queue weights"). A
	// polled queue left out weighs 1; a processor that polls one queue
	// ignores them. Every named queue must be one a registered or
	// declared type routes to: Start, Run and RunFor refuse weights for
	// unknown queues (ErrInvalidConfig). Default none: the queues take
	// handler slots as their messages come, first come, first served.
	QueueWeights map[string]int
	// MinPollInterval is the wait after the first empty poll of a queue;
	// it doubles after each empty poll up to MaxPollInterval and is back
	// to MinPollInterval after a message. Defaults to 100 ms.
	MinPollInterval time.Duration
	// Shards spreads a logical queue over several storage queues (its
	// shards): Shards["jobs"] = 4 makes queue "jobs" the storage queues
	// "<prefix>-jobs", "<prefix>-jobs-s1", "-s2" and "-s3". Issuing spreads
	// its commands over them round robin; the processor drains every
	// shard in turn, and an idle sharded queue costs what an unsharded one
	// does (one dequeue per poll wait, of one shard in turn). One storage
	// queue takes about 2,000 messages a second (docs/scaling.md). Give
	// every process of a deployment the same Shards: a processor drains
	// only the shards it knows, so lower a queue's count only after its
	// extra shards are empty. 0 or 1: not sharded (one storage queue, the
	// same name); at most 64. Default none.
	Shards map[string]int
	// MaxPollInterval caps the empty-poll backoff: an idle queue costs
	// about one dequeue per MaxPollInterval (60 an hour by default). An
	// Issuer in the same process wakes the processor at once. Defaults to
	// 1 minute.
	MaxPollInterval time.Duration
	// PollJitter is the fraction (0..1) of each poll wait that is
	// randomized upwards (capped at MaxPollInterval). NoJitter (-1)
	// disables it. Defaults to 0.2.
	PollJitter float64
	// PoisonCeiling, when above 0, overrides every type's poison ceiling:
	// a message dequeued more than this many times is poisoned without
	// running. Defaults to 0: each type's own (HandlerOptions.PoisonCeiling).
	PoisonCeiling int
	// GlobalConcurrency, per command type, overrides the type's
	// HandlerOptions.GlobalConcurrency in this Client's processor: the
	// most handlers of the type that run at once across every process
	// (1 to MaxGlobalConcurrency; 0 lifts the type's limit here). Every
	// process that runs the type should say the same: the limit is
	// counted in shared permit rows, and each process takes at most its
	// own limit's worth. A type named here must be registered. `cmdq
	// serve` and `cmdq worker` set it with --global-concurrency type=N.
	// Defaults to nil: each type's own.
	GlobalConcurrency map[string]int
	// MaxDeferrals, when above 0, overrides every type's MaxDeferrals:
	// how many deferrals (RetryAfter) of a command do not count toward
	// its poison ceiling (at most MaxDeferralsLimit, 10000). Defaults to
	// 0: each type's own (HandlerOptions.MaxDeferrals, default 20).
	MaxDeferrals int
	// Rates, per command type, overrides the type's HandlerOptions.Rate in
	// this Client's processor: at most Limit handler starts of the type in
	// any window of Per across every process (Limit at least 1, Per
	// MinRatePer to MaxRatePer). Every process that runs the type should
	// say the same: the tokens are counted in a shared ledger row, and
	// each process applies its own rate to it. A type named here must be
	// registered. `cmdq serve` and `cmdq worker` set it with --rate
	// TYPE=N/DURATION. Defaults to nil: each type's own.
	Rates map[string]Rate
	// LeaseGrowth bounds how a type's lease grows when its leases keep
	// being lost, and how it shrinks back.
	LeaseGrowth LeaseGrowth
	// DrainTimeout is how long Stop (and the end of Run's context) lets
	// running handlers finish before cancelling their contexts. Defaults
	// to 30 s.
	DrainTimeout time.Duration
	// StartedWriteDelay: a handler still running after this long gets its
	// `started` event written on its own; faster handlers get it in their
	// final batch, saving one write. Defaults to 1 s.
	StartedWriteDelay time.Duration
	// HandlerDurationEstimate is RunFor's guess of a handler's duration
	// until it has observed one. Defaults to 1 s.
	HandlerDurationEstimate time.Duration
	// Tolerance multiplies the average handler duration to get RunFor's
	// safety margin; at least 1. Defaults to 1.5.
	Tolerance float64

	// --- Reconciler (commands stored but not enqueued) ---

	// ReconcileInterval is how often the reconciler's marker query (which
	// enqueues commands whose enqueue failed) runs while the processor is
	// idle; RunFor(d) runs it with probability d/ReconcileInterval.
	// NoReconcile (-1) disables the reconciler. Defaults to 1 hour.
	ReconcileInterval time.Duration
	// ReconcileActiveInterval is how often the marker query runs while the
	// processor has work; at most ReconcileInterval. Defaults to 5
	// minutes.
	ReconcileActiveInterval time.Duration
	// ReconcileScanInterval is how often one reconciler run is the pending
	// scan (a whole-table query for commands still pending after
	// ReconcileStaleAfter) and the retention sweep. NoReconcile (-1)
	// disables both. Defaults to 24 hours.
	ReconcileScanInterval time.Duration
	// ReconcileGrace is how old an enqueue-failure marker must be before
	// the reconciler acts on it. Defaults to 30 s.
	ReconcileGrace time.Duration
	// ReconcileStaleAfter is how old a pending command without a marker
	// must be before the pending scan enqueues it. Defaults to 15 minutes.
	ReconcileStaleAfter time.Duration

	// --- Retention ---

	// Retention is how long final commands are kept before the daily
	// sweep removes them; a type's own (HandlerOptions.Retention,
	// CommandOptions.Retention) overrides it. Defaults: completed 7 days,
	// discarded 30 days; poisoned commands are kept until discarded
	// (docs/lifecycle.md, "Retention").
	Retention Retention

	// --- Health ---

	// UnhealthyAfter is the number of consecutive infrastructure faults
	// that make the processor unhealthy. Defaults to 5.
	UnhealthyAfter int
	// Flywheel, when true, makes an unhealthy processor stop pulling work
	// until ResetHealth is called. Defaults to false: it keeps pulling and
	// is healthy again after the next successful storage call.
	Flywheel bool
	// ProbeTimeout bounds the readiness probe (CheckStorage). Defaults to
	// 2 s.
	ProbeTimeout time.Duration
	// ProbeInterval: CheckStorage makes no call when a storage call
	// succeeded within this long and none failed since; while storage is
	// failing the processor probes this often to notice its return.
	// Defaults to 5 s.
	ProbeInterval time.Duration
	// HeartbeatInterval is how often the running processor rewrites its
	// heartbeat row, which lists it in Processors (and GET /v1/processors,
	// the console's overview) with its host, state, in-flight count and
	// queues: one upsert per interval, 60 an hour by default, plus one
	// query an hour to delete the rows of processors gone for over an
	// hour (docs/lifecycle.md, "Processor heartbeats"). NoHeartbeat (-1)
	// disables it. Defaults to 1 minute.
	HeartbeatInterval time.Duration

	// --- Wake-ups between processes (docs/processor.md, "Wake-ups") ---

	// Doorbell says how this Client's processor hears, and this Client
	// rings, the wake-ups that make a command issued in one process start
	// at once on an idle processor in another (a web tier and workers).
	// The zero value works on one machine; give Doorbell.Listen for
	// workers on other machines.
	Doorbell Doorbell

	// --- Watching (Wait, Watch, and the HTTP API's long-polls) ---

	// WaitPollInterval is how often, at most, storage is read for a
	// command that someone watches, once for all its watchers together:
	// it doubles while nothing changes, up to WaitMaxPollInterval. These
	// reads only find changes made by other processes: a change this
	// Client stores reaches the watchers at once. Defaults to 1 s.
	WaitPollInterval time.Duration
	// WaitMaxPollInterval caps the interval between two reads of a
	// watched command that does not change. Defaults to 5 s.
	WaitMaxPollInterval time.Duration
	// FinalCache is how many completed, discarded or cancelled statuses the Client
	// keeps in memory (they never change), so that reading or watching
	// such a command again costs no storage call; a status whose recorded
	// output is over 1 KiB is not kept (reading it again is a point
	// read). Negative keeps none. Defaults to 10,000.
	FinalCache int

	// --- Observability ---

	// Logger receives the processor's logs (zerolog). Defaults to the
	// zero Logger, which discards them.
	Logger zerolog.Logger
	// Observers receive every processing event (started, completed,
	// failed, poisoned, lease lost, polled, alert, health change), in
	// order: metrics.Metrics is one. Defaults to none.
	Observers []Observer
	// Middleware wraps the handler of every registered type, outside each
	// type's own (HandlerOptions.Middleware) and inside the tracing span:
	// the first is the outermost. Client.Use adds more. Defaults to none.
	Middleware []Middleware

	// --- Tracing (OpenTelemetry; docs/operations.md, "Tracing") ---

	// TracerProvider makes the spans: "cmdq issue TYPE" (kind producer)
	// for every issue, whose trace context is stored with the command,
	// and "cmdq process TYPE" (kind consumer) for every attempt, in the
	// handler's ctx. Defaults to otel.GetTracerProvider(), the global
	// provider, which makes no spans unless the program sets one
	// (otel.SetTracerProvider); the issuing context's trace is stored and
	// handed to handlers either way.
	TracerProvider trace.TracerProvider
	// TraceLinkOnly makes each attempt's span the root of a trace of its
	// own, linked to the issuing span, instead of its child: for commands
	// that run long after they were issued, whose attempts would
	// otherwise stretch the issuing trace over hours. Defaults to false:
	// the issue and every attempt (retries and requeues included) are one
	// trace.
	TraceLinkOnly bool

	// --- Testing ---

	// Clock is the time the Client runs on: the times it stores (issue,
	// events, run-at), retry delays, leases, scheduled commands and
	// periodic ticks, and its processor's waits for them. The store must
	// run on the same clock (embedded.Options.Now). For tests:
	// cmdqtest.New sets a cmdqtest.Clock, which a test moves ahead
	// (Advance) instead of waiting. Defaults to nil: the system clock.
	Clock Clock
}

// Doorbell configures the wake-ups between processes (Config.Doorbell).
// A process that makes work due on a queue (an issue, a requeue, a
// run-now, a resume, a periodic tick) rings a processor of that queue in
// another process, which dequeues at once instead of at the end of its
// poll backoff (up to MaxPollInterval). A wake is one UDP datagram that
// names only the queue, authenticated with a secret the deployment
// shares; it costs no storage call, and the processors' list it is sent
// by is read at most once a minute while this Client rings (one query).
// A wake is a hint: a lost or forged one changes only timing, and without
// any every processor still polls. On the embedded store (one process)
// nothing is listened on or sent.
type Doorbell struct {
	// Listen is the UDP address (host:port) the processor listens on for
	// wakes while it runs (Start, Run, RunFor); port 0 picks a free one.
	// Defaults to "127.0.0.1:0": processes on this machine only. Give
	// "0.0.0.0:7311" (or another port) for processes on other machines,
	// and open it to them.
	Listen string
	// Advertise is the address other processes ring, published in the
	// processor's heartbeat row. Defaults to the address listened on,
	// with an unspecified host (0.0.0.0, ::) replaced by the machine's
	// first non-loopback address. Give it behind NAT, or as a pod's IP.
	Advertise string
	// Secret authenticates the wakes; every process of the deployment
	// needs the same. Defaults to one derived from the store's shared key
	// (storage.Secret: an Azure account key) and Prefix. Without either
	// (a store on Microsoft Entra ID credentials and no Secret) no wake is
	// sent or heard, and the Client says so in its log.
	Secret []byte
	// Off turns the wake-ups between processes off: processes find work
	// by polling only. Defaults to false.
	Off bool
}

// DefaultDoorbellListen is Doorbell.Listen's default: loopback, a free
// port.
const DefaultDoorbellListen = "127.0.0.1:0"

// LeaseGrowth says how a command type's lease grows when its leases keep
// being lost (a handler that outlives its lease, renewals that fail), and
// how it shrinks back. A grown lease applies to its own type only.
type LeaseGrowth struct {
	// Threshold is the number of lost leases of one type that triggers
	// growth. Defaults to 3.
	Threshold int
	// Factor multiplies the lease at each growth and divides it at each
	// shrink; above 1. Defaults to 2.
	Factor float64
	// MaxFactor bounds the grown lease to MaxFactor × the type's lease,
	// and never past 1 hour. Defaults to 10.
	MaxFactor float64
	// ShrinkAfter: a grown lease shrinks one step after this many clean
	// finishes of its type in a row. Defaults to 10.
	ShrinkAfter int
	// QuietPeriod: a grown lease also shrinks one step at the first clean
	// finish this long after the last lost lease. Defaults to 10 minutes.
	QuietPeriod time.Duration
}

// processor returns the processor's configuration (everything but the
// hooks the Client sets itself).
func (c Config) processor() processor.Config {
	return processor.Config{
		Prefix: c.Prefix, Shards: c.Shards, Worker: c.Worker, BatchSize: c.BatchSize, NewBatchThreshold: c.NewBatchThreshold,
		Concurrency: c.Concurrency, MinPollInterval: c.MinPollInterval, MaxPollInterval: c.MaxPollInterval,
		PollJitter: c.PollJitter, PoisonCeiling: c.PoisonCeiling, GlobalConcurrency: c.GlobalConcurrency, MaxDeferrals: c.MaxDeferrals,
		Rates:        engineRates(c.Rates),
		LeaseGrowth:  processor.LeaseGrowth(c.LeaseGrowth),
		DrainTimeout: c.DrainTimeout, StartedWriteDelay: c.StartedWriteDelay,
		HandlerDurationEstimate: c.HandlerDurationEstimate, Tolerance: c.Tolerance,
		ReconcileInterval: c.ReconcileInterval, ReconcileActiveInterval: c.ReconcileActiveInterval,
		ReconcileScanInterval: c.ReconcileScanInterval, ReconcileGrace: c.ReconcileGrace,
		ReconcileStaleAfter: c.ReconcileStaleAfter, Retention: model.Retention(c.Retention),
		UnhealthyAfter: c.UnhealthyAfter, ProbeTimeout: c.ProbeTimeout, ProbeInterval: c.ProbeInterval,
		Flywheel: c.Flywheel, Logger: c.Logger, HeartbeatInterval: c.HeartbeatInterval,
		QueueWeights: c.QueueWeights, Clock: engineClockOf(c.Clock),
	}
}

// Validate reports every problem with c at once (errors.Join); each wraps
// ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(err error) { errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err)) }
	if err := (layout.Names{Prefix: cmp.Or(c.Prefix, model.DefaultPrefix)}).Validate(); err != nil {
		bad(fmt.Errorf("Prefix: %w", err))
	}
	for q, n := range c.Shards {
		if err := model.ValidateQueue(q); err != nil {
			bad(fmt.Errorf("shards: %w", err))
		} else if err := (layout.Names{Prefix: cmp.Or(c.Prefix, model.DefaultPrefix), Shards: map[string]int{q: n}}).Validate(q); err != nil {
			bad(fmt.Errorf("shards: %w", err))
		}
	}
	if err := c.processor().Validate(); err != nil {
		bad(err)
	}
	if c.IssueHeadroom < NoIssueHeadroom {
		bad(fmt.Errorf("IssueHeadroom %d is negative; use 0 for the default (%d bytes), NoIssueHeadroom (-1) for none, or a byte count", c.IssueHeadroom, DefaultIssueHeadroom))
	}
	if c.MaxParamsBytes < 0 || c.MaxParamsBytes > model.MaxParamsBytes {
		bad(fmt.Errorf("MaxParamsBytes %d is outside 0..%d (0 = the default, %d bytes: what one table entity holds)", c.MaxParamsBytes, model.MaxParamsBytes, model.MaxParamsBytes))
	}
	if c.RecoveryDelay < 0 || c.RecoveryDelay > storage.MaxVisibility {
		bad(fmt.Errorf("RecoveryDelay %s is outside 0..%s (0 = the default, %s; give at least the lease of the command types this Client does not know)", c.RecoveryDelay, storage.MaxVisibility, DefaultRecoveryDelay))
	}
	if c.WaitPollInterval < 0 || c.WaitMaxPollInterval < 0 {
		bad(fmt.Errorf("WaitPollInterval %s and WaitMaxPollInterval %s must not be negative (0 = the defaults, %s and %s)", c.WaitPollInterval, c.WaitMaxPollInterval, DefaultWaitPollInterval, DefaultWaitMaxPollInterval))
	}
	if d := c.Doorbell; d.Listen != "" {
		if _, _, err := net.SplitHostPort(d.Listen); err != nil {
			bad(fmt.Errorf("Doorbell.Listen %q: %w; give host:port, such as 0.0.0.0:7311 (port 0 picks a free one)", d.Listen, err))
		}
	}
	if d := c.Doorbell; d.Advertise != "" {
		if _, port, err := net.SplitHostPort(d.Advertise); err != nil || port == "0" || port == "" {
			bad(fmt.Errorf("Doorbell.Advertise %q: give the host:port other machines reach the listener on, such as 10.0.0.5:7311", d.Advertise))
		}
	}
	for i, o := range c.Observers {
		if o == nil {
			bad(fmt.Errorf("a nil observer at Observers[%d]; leave it out", i))
		}
	}
	for i, m := range c.Middleware {
		if m == nil {
			bad(fmt.Errorf("a nil middleware at Middleware[%d]; leave it out", i))
		}
	}
	return errors.Join(errs...)
}

// Special values of Config fields whose zero value means the default.
const (
	// NoThreshold as Config.NewBatchThreshold: no prefetch.
	NoThreshold = model.NoThreshold
	// NoReconcile as Config.ReconcileInterval disables the reconciler; as
	// Config.ReconcileScanInterval only the pending scan and the sweep.
	NoReconcile = model.NoReconcile
	// NoHeartbeat as Config.HeartbeatInterval: the processor writes no
	// heartbeat and is not listed by Processors.
	NoHeartbeat = model.NoHeartbeat
)

// Defaults of the Client's own settings.
const (
	// DefaultWaitPollInterval is Config.WaitPollInterval's default (1 s).
	DefaultWaitPollInterval = time.Second
	// DefaultWaitMaxPollInterval is Config.WaitMaxPollInterval's default (5 s).
	DefaultWaitMaxPollInterval = 5 * time.Second
	// DefaultRecoveryDelay is Config.RecoveryDelay's default (30 s, the
	// default lease).
	DefaultRecoveryDelay = record.DefaultRecoveryDelay
)

// Sentinel errors of the Client (test with errors.Is).
var (
	// ErrInvalidConfig is wrapped by every error of Config.Validate.
	ErrInvalidConfig = errors.New("cmdq: invalid config")
	// ErrStarted: Register or Declare after Start (or during Run/RunFor),
	// Start while processing runs, or DeleteStorage while it runs.
	ErrStarted = errors.New("cmdq: client is processing")
)

// Defaults of the processor's settings (Config), used where the field is
// zero; each is stated in its field's comment too.
const (
	// DefaultConcurrency is Config.Concurrency's default: 32 handlers.
	DefaultConcurrency = model.DefaultConcurrency
	// DefaultBatchSize is Config.BatchSize's default: 32 messages, the
	// most one dequeue returns.
	DefaultBatchSize = model.DefaultBatchSize
	// MaxNewBatchThreshold is the largest Config.NewBatchThreshold (10,000).
	MaxNewBatchThreshold = model.MaxNewBatchThreshold
	// MaxQueueWeight is the largest weight in Config.QueueWeights (1,000).
	MaxQueueWeight = model.MaxQueueWeight
	// DefaultMinPollInterval is Config.MinPollInterval's default: 100 ms.
	DefaultMinPollInterval = model.DefaultMinPollInterval
	// DefaultMaxPollInterval is Config.MaxPollInterval's default: 1 minute.
	DefaultMaxPollInterval = model.DefaultMaxPollInterval
	// DefaultPollJitter is Config.PollJitter's default: 0.2.
	DefaultPollJitter = model.DefaultPollJitter
	// DefaultDrainTimeout is Config.DrainTimeout's default: 30 s.
	DefaultDrainTimeout = model.DefaultDrainTimeout
	// DefaultStartedWriteDelay is Config.StartedWriteDelay's default: 1 s.
	DefaultStartedWriteDelay = model.DefaultStartedWriteDelay
	// DefaultHandlerDurationEstimate is Config.HandlerDurationEstimate's
	// default: 1 s.
	DefaultHandlerDurationEstimate = model.DefaultHandlerDurationEstimate
	// DefaultTolerance is Config.Tolerance's default: 1.5.
	DefaultTolerance = model.DefaultTolerance
	// DefaultReconcileInterval is Config.ReconcileInterval's default: 1 hour.
	DefaultReconcileInterval = model.DefaultReconcileInterval
	// DefaultReconcileActiveInterval is Config.ReconcileActiveInterval's
	// default: 5 minutes.
	DefaultReconcileActiveInterval = model.DefaultReconcileActiveInterval
	// DefaultReconcileScanInterval is Config.ReconcileScanInterval's
	// default: 24 hours.
	DefaultReconcileScanInterval = model.DefaultReconcileScanInterval
	// DefaultReconcileGrace is Config.ReconcileGrace's default: 30 s.
	DefaultReconcileGrace = model.DefaultReconcileGrace
	// DefaultReconcileStaleAfter is Config.ReconcileStaleAfter's default:
	// 15 minutes.
	DefaultReconcileStaleAfter = model.DefaultReconcileStaleAfter
	// DefaultIssueHeadroom is Config.IssueHeadroom's default: 64 MiB.
	DefaultIssueHeadroom int64 = 64 << 20
	// NoIssueHeadroom as Config.IssueHeadroom refuses issues only when
	// the store refuses every write (at its reserve).
	NoIssueHeadroom int64 = -1
	// DefaultUnhealthyAfter is Config.UnhealthyAfter's default: 5 faults.
	DefaultUnhealthyAfter = model.DefaultUnhealthyAfter
	// DefaultProbeTimeout is Config.ProbeTimeout's default: 2 s.
	DefaultProbeTimeout = model.DefaultProbeTimeout
	// DefaultProbeInterval is Config.ProbeInterval's default: 5 s.
	DefaultProbeInterval = model.DefaultProbeInterval
	// DefaultLostLeaseThreshold is LeaseGrowth.Threshold's default: 3.
	DefaultLostLeaseThreshold = model.DefaultLostLeaseThreshold
	// DefaultLeaseGrowthFactor is LeaseGrowth.Factor's default: 2.
	DefaultLeaseGrowthFactor = model.DefaultLeaseGrowthFactor
	// DefaultMaxLeaseFactor is LeaseGrowth.MaxFactor's default: 10.
	DefaultMaxLeaseFactor = model.DefaultMaxLeaseFactor
	// DefaultLeaseShrinkAfter is LeaseGrowth.ShrinkAfter's default: 10.
	DefaultLeaseShrinkAfter = model.DefaultLeaseShrinkAfter
	// DefaultLeaseQuietPeriod is LeaseGrowth.QuietPeriod's default: 10
	// minutes.
	DefaultLeaseQuietPeriod = model.DefaultLeaseQuietPeriod
	// MaxLease is the longest a grown lease may reach: 1 hour.
	MaxLease = model.MaxLease
)

// DefaultWorker returns Config.Worker's default: "<hostname>-<pid>"
// ("worker-<pid>" when the host has no name). It names the processor in
// events, logs and heartbeats, and `cmdq serve` and `cmdq worker` make it
// the tracing resource's service.instance.id.
func DefaultWorker() string { return model.DefaultWorker() }
