// Package cmdq is a command-processing framework for Go: the command side
// of CQRS on Azure Storage queues and tables, or on an embedded store (one
// local data directory, no server).
//
// A command is a Go type with a CommandType method; its JSON encoding is
// its parameters. One Client does everything a program needs, on one
// store and one prefix: it registers handlers and runs them, issues
// commands, reads their status and events, waits for them, lists them,
// and handles the poisoned ones.
//
//	st, err := embedded.Open("./cmdq-data", nil) // or azure.Open(ctx, azure.Config{…})
//	c, err := cmdq.New(st, cmdq.Config{})        // every zero field takes its default
//	err = cmdq.Register(c, func(ctx context.Context, cmd ResizeImage, run *cmdq.Run) error { … })
//	err = c.Start(ctx)                           // opens queues and tables, then processes in the background
//	res, err := c.Issue(ctx, ResizeImage{URL: u}, cmdq.WithID(cmdq.NewID()))
//	s, err := c.Wait(ctx, res.ID)                // s.State: completed, poisoned, …
//
// Issuing stores the parameters in a table and puts a small message on a
// queue (one table batch and one enqueue: one combined write on the
// embedded store). Processors on any number of machines pull messages in
// batches, run the handler, record every step of the command's life as
// events, retry failures after a delay, and move commands that keep
// failing to a poison table, where operators requeue or discard them.
//
// A type may declare its queue and handling defaults with a
// CommandOptions method (CommandWithOptions): issuing routes by it in any
// process, and Register takes it as the defaults. A process that only
// issues needs no handler; Declare records the routing of a type issued by
// name (IssueRaw, the HTTP API) and makes such parameters be checked
// against the Go type.
//
// Handlers run in Start (until Stop or the context ends), Run (blocking)
// or RunFor (time-boxed, for a scheduler that starts a job every minute).
// Every processing event reaches Config.Observers (metrics, logs,
// tracing). Package cmdqtest is a test kit for your own tests; package api
// serves the HTTP API on a Client and package console the operator page;
// package client is a Go client of the HTTP API; storage/embedded and
// storage/azure are the store drivers.
package cmdq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/cmdq-dev/cmdq/cmdqtype"
	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
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
}

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

// Special values of Config fields whose zero value means the default.
const (
	// NoThreshold as Config.NewBatchThreshold: no prefetch.
	NoThreshold = cmdqtype.NoThreshold
	// NoReconcile as Config.ReconcileInterval disables the reconciler; as
	// Config.ReconcileScanInterval only the pending scan and the sweep.
	NoReconcile = cmdqtype.NoReconcile
	// NoHeartbeat as Config.HeartbeatInterval: the processor writes no
	// heartbeat and is not listed by Processors.
	NoHeartbeat = cmdqtype.NoHeartbeat
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

// processor returns the processor's configuration (everything but the
// hooks the Client sets itself).
func (c Config) processor() processor.Config {
	g := c.LeaseGrowth
	return processor.Config{
		Prefix: c.Prefix, Shards: c.Shards, Worker: c.Worker, BatchSize: c.BatchSize, NewBatchThreshold: c.NewBatchThreshold,
		Concurrency: c.Concurrency, MinPollInterval: c.MinPollInterval, MaxPollInterval: c.MaxPollInterval,
		PollJitter: c.PollJitter, PoisonCeiling: c.PoisonCeiling,
		LeaseGrowth: processor.LeaseGrowth{Threshold: g.Threshold, Factor: g.Factor, MaxFactor: g.MaxFactor,
			ShrinkAfter: g.ShrinkAfter, QuietPeriod: g.QuietPeriod},
		DrainTimeout: c.DrainTimeout, StartedWriteDelay: c.StartedWriteDelay,
		HandlerDurationEstimate: c.HandlerDurationEstimate, Tolerance: c.Tolerance,
		ReconcileInterval: c.ReconcileInterval, ReconcileActiveInterval: c.ReconcileActiveInterval,
		ReconcileScanInterval: c.ReconcileScanInterval, ReconcileGrace: c.ReconcileGrace,
		ReconcileStaleAfter: c.ReconcileStaleAfter, Retention: c.Retention,
		UnhealthyAfter: c.UnhealthyAfter, ProbeTimeout: c.ProbeTimeout, ProbeInterval: c.ProbeInterval,
		Flywheel: c.Flywheel, Logger: c.Logger, HeartbeatInterval: c.HeartbeatInterval,
	}
}

// Validate reports every problem with c at once (errors.Join); each wraps
// ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(err error) { errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err)) }
	if err := (record.Names{Prefix: cmp.Or(c.Prefix, cmdqtype.DefaultPrefix)}).Validate(); err != nil {
		bad(fmt.Errorf("Prefix: %w", err))
	}
	for q, n := range c.Shards {
		if err := cmdqtype.ValidateQueue(q); err != nil {
			bad(fmt.Errorf("shards: %w", err))
		} else if err := (record.Names{Prefix: cmp.Or(c.Prefix, cmdqtype.DefaultPrefix), Shards: map[string]int{q: n}}).Validate(q); err != nil {
			bad(fmt.Errorf("shards: %w", err))
		}
	}
	if err := c.processor().Validate(); err != nil {
		bad(err)
	}
	if c.MaxParamsBytes < 0 || c.MaxParamsBytes > cmdqtype.MaxParamsBytes {
		bad(fmt.Errorf("MaxParamsBytes %d is outside 0..%d (0 = the default, %d bytes: what one table entity holds)", c.MaxParamsBytes, cmdqtype.MaxParamsBytes, cmdqtype.MaxParamsBytes))
	}
	if c.RecoveryDelay < 0 || c.RecoveryDelay > storage.MaxVisibility {
		bad(fmt.Errorf("RecoveryDelay %s is outside 0..%s (0 = the default, %s; give at least the lease of the command types this Client does not know)", c.RecoveryDelay, storage.MaxVisibility, DefaultRecoveryDelay))
	}
	if c.WaitPollInterval < 0 || c.WaitMaxPollInterval < 0 {
		bad(fmt.Errorf("WaitPollInterval %s and WaitMaxPollInterval %s must not be negative (0 = the defaults, %s and %s)", c.WaitPollInterval, c.WaitMaxPollInterval, DefaultWaitPollInterval, DefaultWaitMaxPollInterval))
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

// Client is cmdq on one store and one prefix: it registers handlers and
// runs them, issues commands, reads their status and events, and handles
// poisoned commands. It is safe for concurrent use.
type Client struct {
	st    storage.Store
	cfg   Config
	names record.Names
	reg   *registry.Registry
	tune  tuning.Switches

	mu      sync.Mutex
	iss     *issuer.Issuer
	log     *record.Reader // opened on first use
	proc    *processor.Processor
	probe   *processor.StorageProbe // readiness without a processor
	running bool                    // Start, Run or RunFor in progress
	stop    context.CancelFunc      // ends Start's processing
	done    chan error              // Start's processing returned
	ended   chan struct{}           // closed when it returned (Stopped)

	procLive atomic.Pointer[processor.Processor] // wakes on enqueue

	schedules []*schedule   // periodic schedules (Periodic)
	scheduler *schedulerRun // the running periodic scheduler (Start)

	hub *hub // watched commands and final statuses (watch.go)

	tracer trace.Tracer // Config.TracerProvider's (trace.go)
}

// New returns a Client on st. It validates cfg but does no I/O: queues and
// tables are created on first use (Start opens them up front). st stays
// yours to close, after Stop.
func New(st storage.Store, cfg Config) (*Client, error) {
	return newClient(st, cfg, tuning.Switches{})
}

func init() {
	tuning.NewClient = func(st storage.Store, cfg any, sw tuning.Switches) (any, error) {
		return newClient(st, cfg.(Config), sw)
	}
}

func newClient(st storage.Store, cfg Config, tune tuning.Switches) (*Client, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: New needs a store (embedded.Open or azure.Open)", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, cmdqtype.DefaultPrefix)
	cfg.WaitPollInterval = cmp.Or(cfg.WaitPollInterval, DefaultWaitPollInterval)
	cfg.WaitMaxPollInterval = max(cmp.Or(cfg.WaitMaxPollInterval, DefaultWaitMaxPollInterval), cfg.WaitPollInterval)
	cfg.FinalCache = cmp.Or(cfg.FinalCache, DefaultFinalCache)
	cfg.RecoveryDelay = cmp.Or(cfg.RecoveryDelay, DefaultRecoveryDelay)
	cfg.StartedWriteDelay = cmp.Or(cfg.StartedWriteDelay, cmdqtype.DefaultStartedWriteDelay)
	cfg.Observers = append([]Observer(nil), cfg.Observers...)
	cfg.Shards = maps.Clone(cfg.Shards)
	c := &Client{st: st, cfg: cfg, names: record.Names{Prefix: cfg.Prefix, Shards: cfg.Shards}, reg: registry.NewRegistry(), tune: tune}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	c.tracer = tp.Tracer(instrumentationName)
	// The tracing span is the outermost of every handler's chain, so
	// that every middleware runs (and logs) inside it.
	c.reg.Use(c.tracing)
	c.reg.Use(middleware(cfg.Middleware)...)
	c.hub = newHub(c, cfg.FinalCache)
	// Cached final statuses are served only while retention cannot have
	// removed them (the shortest of the global retentions).
	r := cfg.Retention
	c.hub.final.maxAge = min(cmp.Or(r.Completed, cmdqtype.DefaultCompletedRetention), cmp.Or(r.Discarded, cmdqtype.DefaultDiscardedRetention))
	if c.hub.final.maxAge < 0 {
		c.hub.final.maxAge = max(cmp.Or(r.Completed, cmdqtype.DefaultCompletedRetention), cmp.Or(r.Discarded, cmdqtype.DefaultDiscardedRetention))
	}
	c.iss = c.newIssuer()
	return c, nil
}

func (c *Client) newIssuer() *issuer.Issuer {
	iss, err := issuer.NewIssuer(c.st, issuer.IssuerOptions{
		Prefix: c.cfg.Prefix, Shards: c.cfg.Shards, Wake: c.wake, HandOff: c.handOff, Routes: c.reg,
		MaxParamsBytes: c.cfg.MaxParamsBytes, EnqueueRetry: c.cfg.EnqueueRetry,
		RecoveryDelay: c.recoveryDelay, Now: c.tune.Now, WakeAt: c.wakeAt, HopHorizon: c.tune.HopHorizon,
	})
	if err != nil {
		panic(err) // New validated every option
	}
	return iss
}

// Prefix returns the storage name prefix.
func (c *Client) Prefix() string { return c.cfg.Prefix }

// wake wakes the poller of an in-process processor: the enqueue path calls
// it for every message put on a queue.
func (c *Client) wake(queue string) {
	if p := c.procLive.Load(); p != nil {
		p.Notify(queue)
	}
}

// wakeAt tells the in-process processor that a message put on queue
// becomes visible at at: it wakes itself then (due means due).
func (c *Client) wakeAt(queue string, at time.Time) {
	if p := c.procLive.Load(); p != nil {
		p.WakeAt(queue, at)
	}
}

// handOff reserves a handler slot of the in-process processor for an
// issue's own message, or returns nil.
func (c *Client) handOff(queue, cmdType string) issuer.HandOffSlot {
	if p := c.procLive.Load(); p != nil {
		if slot := p.HandOff(queue, cmdType); slot != nil {
			return slot
		}
	}
	return nil
}

// recoveryDelay is the visibility delay of a recovery enqueue of cmdType
// (Config.RecoveryDelay): the running processor's lease of the type plus
// its StartedWriteDelay; else the registered or declared lease plus
// StartedWriteDelay; else Config.RecoveryDelay.
func (c *Client) recoveryDelay(cmdType string) time.Duration {
	if p := c.procLive.Load(); p != nil && p.LeaseOf(cmdType) > 0 {
		return p.RecoveryDelay(cmdType)
	}
	if def, ok := c.reg.Lookup(cmdType); ok {
		return cmp.Or(def.Lease, cmdqtype.DefaultLease) + c.cfg.StartedWriteDelay
	}
	return c.cfg.RecoveryDelay
}

// reader returns the commands log, opening its tables on first use.
func (c *Client) reader(ctx context.Context) (*record.Reader, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.log != nil {
		return c.log, nil
	}
	// Its requeues and discards are pushed to the watchers (watch.go).
	r, err := record.OpenReader(ctx, c.st, c.names, record.Options{Changed: c.hub.push, RecoveryDelay: c.recoveryDelay, Now: c.tune.Now,
		Retention: record.RetentionPolicy{Completed: c.cfg.Retention.Completed, Discarded: c.cfg.Retention.Discarded}}, c.wake)
	if err != nil {
		return nil, err
	}
	r.SetWakeAt(c.wakeAt)
	r.SetHorizon(c.tune.HopHorizon)
	c.log = r
	return r, nil
}

// Types returns the command types the Client knows (registered and
// declared), sorted.
func (c *Client) Types() []string { return c.reg.Types() }

// TypeInfo describes a command type the Client knows (Lookup).
type TypeInfo struct {
	// Type is the command type name.
	Type string
	// Handled is true for a registered type (a handler runs here), false
	// for a declared one.
	Handled bool
	// Options are the type's options with every default applied
	// (Middleware left out).
	Options HandlerOptions
}

// Lookup returns what the Client knows of a registered or declared command
// type.
func (c *Client) Lookup(cmdType string) (TypeInfo, bool) {
	def, ok := c.reg.Lookup(cmdType)
	if !ok {
		return TypeInfo{}, false
	}
	o := def.Options
	return TypeInfo{Type: def.Type, Handled: def.Handled(), Options: HandlerOptions{Queue: o.Queue, PoisonCeiling: o.PoisonCeiling,
		Lease: o.Lease, Timeout: o.Timeout, Retry: o.Retry, Retention: o.Retention, MaxConcurrency: o.MaxConcurrency}}, true
}

// Queues returns the logical queues the Client knows: DefaultQueue and the
// queues of every registered or declared type, sorted.
func (c *Client) Queues() []string {
	set := map[string]bool{cmdqtype.DefaultQueue: true}
	for _, t := range c.reg.Types() {
		if q, ok := c.reg.QueueOf(t); ok {
			set[q] = true
		}
	}
	out := make([]string, 0, len(set))
	for q := range set {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

// Handles reports whether the Client has at least one handler (Register):
// Start, Run and RunFor then process commands.
func (c *Client) Handles() bool { return len(c.reg.Handlers()) > 0 }

// Register binds fn to T's command type on c: Start, Run and RunFor run it
// for every command of the type, with T's declared options
// (CommandWithOptions) over the defaults (queue "commands", 5 attempts,
// 30 s lease, retries from 1 s doubling to 5 min). Register every handler
// before Start; it fails with ErrStarted after. Other errors:
// ErrDuplicateType, ErrInvalidType (T's type name), ErrInvalidOptions.
func Register[T Command](c *Client, fn Handler[T]) error {
	return RegisterWith(c, fn, HandlerOptions{})
}

// RegisterWith is Register with options: their zero fields take T's
// declared options, then the defaults.
func RegisterWith[T Command](c *Client, fn Handler[T], opts HandlerOptions) error {
	if err := c.editable(); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: Register needs a handler function", ErrInvalidOptions)
	}
	return registry.Register(c.reg, func(ctx context.Context, cmd T, r *registry.Run) error {
		return fn(ctx, cmd, &Run{r: r})
	}, opts.engine())
}

// Declare records T's routing and options on c without a handler, for a
// process that issues T by type name (IssueRaw, the HTTP API, the CLI) but
// does not run it: such commands go to T's declared queue, and their
// parameters must decode into T (else ErrInvalidParams, before anything is
// stored). Typed Issue needs no Declare (it reads T's CommandOptions
// itself). It fails with ErrStarted after Start.
func Declare[T Command](c *Client) error {
	return DeclareWith[T](c, CommandOptions{})
}

// DeclareWith is Declare with options over T's declared ones.
func DeclareWith[T Command](c *Client, opts CommandOptions) error {
	if err := c.editable(); err != nil {
		return err
	}
	return registry.Declare[T](c.reg, opts)
}

// editable fails while processing runs (its registry is fixed).
func (c *Client) editable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running || c.proc != nil || c.scheduler != nil {
		return fmt.Errorf("%w: register and declare every command type and periodic schedule before Start, Run or RunFor", ErrStarted)
	}
	return nil
}

// checkQueues checks the storage names of every known queue with the
// prefix (Start: a long prefix leaves less room for queue names).
func (c *Client) checkQueues() error {
	if err := c.names.Validate(c.Queues()...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}
