// Package cmdq is the front door of cmdq, a command-processing framework
// (the command side of CQRS) on Azure Storage queues and tables or an
// embedded single-directory store.
//
// One Client does everything a Go program needs, on one store and one
// prefix:
//
//	st, err := embedded.Open("./cmdq-data", nil) // or azure.Open(ctx, azure.Config{…})
//	c, err := cmdq.New(st, cmdq.Config{})
//	err = cmdq.Register(c, func(ctx context.Context, cmd ResizeImage, run *cmdq.Run) error { … })
//	err = c.Start(ctx) // opens queues and tables, then processes in the background
//	res, err := c.Issue(ctx, ResizeImage{URL: u}, cmdq.WithID(id))
//	s, err := c.Wait(ctx, res.ID) // s.State: completed, poisoned, …
//
// A command is a Go type with a CommandType method; its fields are the
// JSON parameters. A type may declare its queue and handling defaults with
// a CommandOptions method (see CommandWithOptions): issuing routes by it
// in any process, and Register takes it as the defaults.
//
// Handlers run in Start (until Stop or the context ends), Run (blocking) or
// RunFor (time-boxed, for a scheduler that starts a job every minute). A
// process that only issues commands needs no handler; Declare records the
// routing of a type issued by name (IssueRaw, the HTTP API) without one.
//
// The packages below stay for advanced use: commands (the Issuer),
// handlers (the registry), processor (the pull-mode processor), status (the
// read model), storage and its drivers, api (the HTTP API), metrics
// (Prometheus) and cmdqtest (a test kit for your own tests).
package cmdq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage"
)

// Config configures a Client. The zero Config is valid: every zero field
// takes the default its comment states.
type Config struct {
	// Prefix starts every storage name: the queues "<prefix>-<queue>" and
	// the tables "<prefix>commands" and "<prefix>poison". Lowercase letters
	// and digits, starting with a letter, at most 40 characters. Clients
	// (and cmdq processes) that share a store and a prefix share their
	// commands.
	//
	// Defaults to "cmdq" (commands.DefaultPrefix).
	Prefix string

	// Processor tunes the processor that runs the registered handlers
	// (Start, Run, RunFor): concurrency, polling, leases, reconciler,
	// logging, health, observer. Its Prefix must be empty: Config.Prefix
	// names everything.
	//
	// Defaults: those of processor.Config.
	Processor processor.Config

	// MaxParamsBytes limits a command's compact JSON parameters, in bytes.
	//
	// Defaults to 500 KiB (commands.MaxParamsBytes), also the largest
	// allowed value.
	MaxParamsBytes int

	// EnqueueRetry is the first delay of the background retries of
	// enqueues that failed after a command was stored (doubling up to 1
	// minute, while the Client lives). Negative disables them (the
	// reconciler still enqueues marked commands).
	//
	// Defaults to 1 s (commands.DefaultEnqueueRetry).
	EnqueueRetry time.Duration

	// WaitPollInterval is how often, at most, storage is read for a
	// command that someone watches (Wait, Watch, and through them the
	// HTTP API's long-polls and event streams), once for all its watchers
	// together: it doubles while nothing changes, up to
	// WaitMaxPollInterval, and is back to WaitPollInterval after a change.
	// These reads only find changes made by other processes: a change
	// this Client stores (its processor's outcomes, a requeue or discard
	// through it) reaches the watchers at once.
	//
	// Defaults to 1 s (DefaultWaitPollInterval): a watched command costs
	// at most one storage read a second, however many wait on it.
	WaitPollInterval time.Duration

	// WaitMaxPollInterval caps the interval between two reads of a watched
	// command that does not change.
	//
	// Defaults to 5 s (DefaultWaitMaxPollInterval).
	WaitMaxPollInterval time.Duration

	// FinalCache is how many completed or discarded statuses the Client
	// keeps in memory (they never change), so that reading or watching
	// such a command again costs no storage call; the least recently used
	// go first. Negative keeps none.
	//
	// Defaults to 10,000 (DefaultFinalCache).
	FinalCache int

	// RecoveryDelay is the visibility delay of a recovery enqueue — a
	// message sent for a command that may have one already (a re-issue of
	// a pending, never-started command, a retried or reconciled enqueue, a
	// repeated requeue) — of a command type the Client neither registers
	// nor declares. It must be at least that type's lease, so that a first
	// message that exists after all has been started or finished before
	// the second becomes visible (docs/lifecycle.md, "Duplicate
	// messages"). Types the Client knows use their own lease plus
	// Processor.StartedWriteDelay (the lease the running processor uses,
	// grown after lost leases).
	//
	// Defaults to 30 s (DefaultRecoveryDelay, the default lease).
	RecoveryDelay time.Duration
}

// Defaults of Config.
const (
	// DefaultWaitPollInterval is Config.WaitPollInterval's default (1 s).
	DefaultWaitPollInterval = time.Second
	// DefaultWaitMaxPollInterval is Config.WaitMaxPollInterval's default (5 s).
	DefaultWaitMaxPollInterval = 5 * time.Second
	// DefaultRecoveryDelay is Config.RecoveryDelay's default (30 s, the
	// default lease).
	DefaultRecoveryDelay = record.DefaultRecoveryDelay
)

// Sentinel errors of the Client (test with errors.Is). Errors from the
// packages below are returned wrapped as they are: ErrNotFound and the
// other status errors, the commands errors of issuing (ErrIDConflict, …)
// and the storage errors.
var (
	// ErrInvalidConfig is wrapped by every error of Config.Validate.
	ErrInvalidConfig = errors.New("cmdq: invalid config")
	// ErrStarted: Register or Declare after Start (or during Run/RunFor),
	// Start while processing runs, or DeleteStorage while it runs.
	ErrStarted = errors.New("cmdq: client is processing")
)

// Validate reports every problem with c at once (errors.Join); each wraps
// ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(err error) { errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err)) }
	if err := (record.Names{Prefix: cmp.Or(c.Prefix, issuer.DefaultPrefix)}).Validate(); err != nil {
		bad(fmt.Errorf("Prefix: %w", err))
	}
	if c.Processor.Prefix != "" {
		bad(fmt.Errorf("Processor.Prefix %q is set: leave it empty and set Config.Prefix (one prefix names everything)", c.Processor.Prefix))
	}
	if err := c.Processor.Validate(); err != nil {
		bad(err)
	}
	if err := (issuer.IssuerOptions{MaxParamsBytes: c.MaxParamsBytes}).Validate(); err != nil {
		bad(err)
	}
	if c.RecoveryDelay < 0 || c.RecoveryDelay > storage.MaxVisibility {
		bad(fmt.Errorf("RecoveryDelay %s is outside 0..%s (0 = the default, %s; give at least the lease of the command types this Client does not know)", c.RecoveryDelay, storage.MaxVisibility, DefaultRecoveryDelay))
	}
	if c.WaitPollInterval < 0 || c.WaitMaxPollInterval < 0 {
		bad(fmt.Errorf("WaitPollInterval %s and WaitMaxPollInterval %s must not be negative (0 = the defaults, %s and %s)", c.WaitPollInterval, c.WaitMaxPollInterval, DefaultWaitPollInterval, DefaultWaitMaxPollInterval))
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

	hub *hub // watched commands and final statuses (watch.go)
}

// New returns a Client on st. It validates cfg but does no I/O: queues and
// tables are created on first use (Start opens them up front). st stays
// yours to close, after Stop.
func New(st storage.Store, cfg Config) (*Client, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: New needs a store (embedded.Open or azure.Open)", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, issuer.DefaultPrefix)
	cfg.WaitPollInterval = cmp.Or(cfg.WaitPollInterval, DefaultWaitPollInterval)
	cfg.WaitMaxPollInterval = max(cmp.Or(cfg.WaitMaxPollInterval, DefaultWaitMaxPollInterval), cfg.WaitPollInterval)
	cfg.FinalCache = cmp.Or(cfg.FinalCache, DefaultFinalCache)
	cfg.RecoveryDelay = cmp.Or(cfg.RecoveryDelay, DefaultRecoveryDelay)
	c := &Client{st: st, cfg: cfg, names: record.Names{Prefix: cfg.Prefix}, reg: registry.NewRegistry()}
	c.hub = newHub(c, cfg.FinalCache)
	// Cached final statuses are served only while retention cannot have
	// removed them (the shortest of the global retentions).
	r := cfg.Processor.Retention
	c.hub.final.maxAge = min(cmp.Or(r.Completed, issuer.DefaultCompletedRetention), cmp.Or(r.Discarded, issuer.DefaultDiscardedRetention))
	if c.hub.final.maxAge < 0 {
		c.hub.final.maxAge = max(cmp.Or(r.Completed, issuer.DefaultCompletedRetention), cmp.Or(r.Discarded, issuer.DefaultDiscardedRetention))
	}
	c.iss = c.newIssuer()
	return c, nil
}

func (c *Client) newIssuer() *issuer.Issuer {
	iss, err := issuer.NewIssuer(c.st, issuer.IssuerOptions{
		Prefix: c.cfg.Prefix, Wake: c.wake, HandOff: c.handOff, Routes: c.reg,
		MaxParamsBytes: c.cfg.MaxParamsBytes, EnqueueRetry: c.cfg.EnqueueRetry,
		RecoveryDelay: c.recoveryDelay,
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

// handOff reserves a handler slot of the in-process processor for an
// issue's own message (processor.Processor.HandOff), or returns nil.
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
// its StartedWriteDelay; else the registered or declared lease plus the
// configured StartedWriteDelay; else Config.RecoveryDelay.
func (c *Client) recoveryDelay(cmdType string) time.Duration {
	if p := c.procLive.Load(); p != nil && p.LeaseOf(cmdType) > 0 {
		return p.RecoveryDelay(cmdType)
	}
	if def, ok := c.reg.Lookup(cmdType); ok {
		lease := cmp.Or(def.Lease, issuer.DefaultLease)
		return lease + cmp.Or(c.cfg.Processor.StartedWriteDelay, processor.DefaultStartedWriteDelay)
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
	r, err := record.OpenReader(ctx, c.st, c.names, record.Options{Changed: c.hub.push, RecoveryDelay: c.recoveryDelay,
		Retention: record.RetentionPolicy{Completed: c.cfg.Processor.Retention.Completed, Discarded: c.cfg.Processor.Retention.Discarded}}, c.wake)
	if err != nil {
		return nil, err
	}
	c.log = r
	return r, nil
}

// Types returns the command types the Client knows (registered and
// declared), sorted.
func (c *Client) Types() []string { return c.reg.Types() }

// Lookup returns the definition of a registered or declared command type.
func (c *Client) Lookup(cmdType string) (*registry.Definition, bool) { return c.reg.Lookup(cmdType) }

// Queues returns the logical queues the Client knows: DefaultQueue and the
// queues of every registered or declared type, sorted.
func (c *Client) Queues() []string {
	set := map[string]bool{issuer.DefaultQueue: true}
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
// for every command of the type. opts (at most one) are the type's
// options; their zero fields take T's declared options (CommandWithOptions),
// then the defaults (queue "commands", 5 attempts, 30 s lease, retries from
// 1 s doubling to 5 min). Register every handler before Start; it fails
// with ErrStarted after. Other errors as handlers.Register (a duplicate
// type, an invalid type name or options).
func Register[T Command](c *Client, fn Handler[T], opts ...HandlerOptions) error {
	if err := c.editable(); err != nil {
		return err
	}
	return registry.Register(c.reg, fn, opts...)
}

// Declare records T's routing and options on c without a handler, for a
// process that issues T by type name (IssueRaw, the HTTP API) but does not
// run it: such commands go to T's queue, and their parameters are checked
// to decode into T. Typed Issue needs no Declare (it reads T's
// CommandOptions itself). opts (at most one) override T's declared
// options. It fails with ErrStarted after Start.
func Declare[T Command](c *Client, opts ...CommandOptions) error {
	if err := c.editable(); err != nil {
		return err
	}
	return registry.Declare[T](c.reg, opts...)
}

// editable fails while processing runs (its registry is fixed).
func (c *Client) editable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running || c.proc != nil {
		return fmt.Errorf("%w: register and declare every command type before Start, Run or RunFor", ErrStarted)
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
