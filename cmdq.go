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
//	err = cmdq.Register(c, func(ctx context.Context, cmd ResizeImage, run *cmdq.Attempt) error { … })
//	err = c.Start(ctx)                           // opens queues and tables, then processes in the background
//	res, err := c.Issue(ctx, ResizeImage{URL: u}, cmdq.CommandID(cmdq.NewID()))
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
	"fmt"
	"maps"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/storage"
)

// Client is cmdq on one store and one prefix: it registers handlers and
// runs them, issues commands, reads their status and events, and handles
// poisoned commands. It is safe for concurrent use.
type Client struct {
	st    storage.Store
	cfg   Config
	names layout.Names
	reg   *registry.Registry
	tune  tuning.Switches

	mu      sync.Mutex
	iss     *issuer.Issuer
	log     *read.Reader // opened on first use
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

	bell     bell     // wake-ups between processes (doorbell.go)
	controls controls // the queues' control rows for Status.Waiting (waiting.go)
}

// New returns a Client on st. It validates cfg but does no I/O: queues and
// tables are created on first use (Start opens them up front). st stays
// yours to close, after Stop.
func New(st storage.Store, cfg Config) (*Client, error) {
	return newClient(st, cfg, tuning.Switches{})
}

func newClient(st storage.Store, cfg Config, tune tuning.Switches) (*Client, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: New needs a store (embedded.Open or azure.Open)", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, model.DefaultPrefix)
	cfg.WaitPollInterval = cmp.Or(cfg.WaitPollInterval, DefaultWaitPollInterval)
	cfg.WaitMaxPollInterval = max(cmp.Or(cfg.WaitMaxPollInterval, DefaultWaitMaxPollInterval), cfg.WaitPollInterval)
	cfg.FinalCache = cmp.Or(cfg.FinalCache, DefaultFinalCache)
	cfg.RecoveryDelay = cmp.Or(cfg.RecoveryDelay, DefaultRecoveryDelay)
	cfg.StartedWriteDelay = cmp.Or(cfg.StartedWriteDelay, model.DefaultStartedWriteDelay)
	cfg.Observers = append([]Observer(nil), cfg.Observers...)
	cfg.Shards = maps.Clone(cfg.Shards)
	if cfg.Clock == nil {
		if _, is := st.(storage.ServerClock); is {
			// The storage service keeps a clock every process sees: run on
			// it, so that machines whose clocks disagree agree on run-at
			// times, leases and permits (clock.go).
			cfg.Clock = serviceClock{st: st, local: tune.LocalClockOffset}
		}
	}
	c := &Client{st: st, cfg: cfg, names: layout.Names{Prefix: cfg.Prefix, Shards: cfg.Shards}, reg: registry.NewRegistry(), tune: tune}
	c.reg.SetDeclared(declared)
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
	c.hub.final.maxAge = min(cmp.Or(r.Completed, model.DefaultCompletedRetention), cmp.Or(r.Discarded, model.DefaultDiscardedRetention))
	if c.hub.final.maxAge < 0 {
		c.hub.final.maxAge = max(cmp.Or(r.Completed, model.DefaultCompletedRetention), cmp.Or(r.Discarded, model.DefaultDiscardedRetention))
	}
	c.bell.key = bellKey(st, cfg)
	c.iss = c.newIssuer()
	return c, nil
}

func (c *Client) newIssuer() *issuer.Issuer {
	iss, err := issuer.NewIssuer(c.st, issuer.IssuerOptions{
		Prefix: c.cfg.Prefix, Shards: c.cfg.Shards, Wake: c.wake, HandOff: c.handOff, Routes: c.reg, Declared: declared,
		MaxParamsBytes: c.cfg.MaxParamsBytes, EnqueueRetry: c.cfg.EnqueueRetry,
		RecoveryDelay: c.recoveryDelay, Now: c.now, WakeAt: c.wakeAt, HopHorizon: c.tune.HopHorizon,
	})
	if err != nil {
		panic(err) // New validated every option
	}
	return iss
}

// Prefix returns the storage name prefix.
func (c *Client) Prefix() string { return c.cfg.Prefix }

// wake wakes the poller of an in-process processor, and rings one in
// another process (doorbell.go): the enqueue path calls it for every
// message put on a queue.
func (c *Client) wake(queue string) {
	if p := c.procLive.Load(); p != nil {
		p.Notify(queue)
	}
	c.ringFor(queue, time.Time{})
}

// wakeAt tells the in-process processor that a message put on queue
// becomes visible at at: it wakes itself then (due means due); and rings
// one in another process with that time (doorbell.go).
func (c *Client) wakeAt(queue string, at time.Time) {
	if p := c.procLive.Load(); p != nil {
		p.WakeAt(queue, at)
	}
	c.ringFor(queue, at)
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
		return cmp.Or(def.Lease, model.DefaultLease) + c.cfg.StartedWriteDelay
	}
	return c.cfg.RecoveryDelay
}

// reader returns the commands log, opening its tables on first use.
func (c *Client) reader(ctx context.Context) (*read.Reader, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.log != nil {
		return c.log, nil
	}
	// Its requeues and discards are pushed to the watchers (watch.go).
	r, err := read.Open(ctx, c.st, c.names, record.Options{Changed: c.hub.push, RecoveryDelay: c.recoveryDelay, Now: c.now,
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
	return TypeInfo{Type: def.Type, Handled: def.Handled(), Options: handlerOptions(def.Options)}, true
}

// Queues returns the logical queues the Client knows: DefaultQueue and the
// queues of every registered or declared type, sorted.
func (c *Client) Queues() []string {
	set := map[string]bool{model.DefaultQueue: true}
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
	return registry.Register(c.reg, func(ctx context.Context, cmd T, r *registry.Attempt) error {
		return fn(ctx, cmd, &Attempt{r: r})
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
	return registry.Declare[T](c.reg, opts.engine())
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
// prefix (Start: a long prefix leaves less room for queue names), and that
// Config.QueueWeights names only known queues.
func (c *Client) checkQueues() error {
	if err := c.names.Validate(c.Queues()...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := processor.UnknownWeights(c.cfg.QueueWeights, c.reg); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}
