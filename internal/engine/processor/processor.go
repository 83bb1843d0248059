// Package processor is cmdq's pull-mode processor: it dequeues command
// messages in batches from every queue the handler registry routes to, backs
// off exponentially while a queue is empty, runs the typed handler while
// renewing the message's lease, records the lifecycle in the status stream,
// retries failed attempts after the definition's retry delay, moves commands
// that keep failing to the poison table, and reports its health.
//
// Run processes until its context ends, then drains. RunFor is the
// time-boxed variant for schedulers that start a job every minute: it stops
// taking work when the next handler might not finish in time and returns
// before its duration with no message left leased.
//
// See docs/processor.md for the knobs, how to choose leases, ceilings and
// poll intervals, and the storage cost per command.
package processor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/reconcile"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/internal/engine/retention"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/storage"
)

// Sentinel errors.
var (
	// ErrRunning: Run or RunFor was called while the processor was already running.
	ErrRunning = errors.New("processor: already running")
)

// Processor pulls command messages and runs their handlers. Create it with
// New; it is safe for concurrent use (Notify, model.Health, ResetHealth may be
// called from any goroutine while Run or RunFor runs). Run and RunFor may be
// called again after they return, but not concurrently.
type Processor struct {
	cfg    Config
	store  storage.Store
	reg    *registry.Registry
	names  layout.Names
	health *health
	probe  *StorageProbe
	// instance is the processor's instance ID: its heartbeat row's key
	// (heartbeat.go).
	instance string
	// lastFailure is the last failed or poisoned attempt, for the
	// heartbeat.
	failMu      sync.Mutex
	lastFailure shared.Failure

	queues []*queueRunner
	byName map[string]*queueRunner // logical and storage names

	openOnce sync.Mutex
	opened   bool
	st       *record.Store
	enq      *enqueue.Enqueuer // the reconciler's enqueues wake this processor
	// completer groups the final writes of concurrent completions (nil:
	// each is its own write; see complete).
	completer *record.Completer
	poison    storage.Table

	sem     chan struct{}
	running atomic.Bool

	holdMu   sync.Mutex
	held     int            // messages dequeued (or reserved for a dequeue) and not finished, all queues
	busy     int            // messages dispatched or handed off and not finished, all queues (guarded by holdMu)
	parked   map[string]int // messages waiting for a slot of their type, by type (slots.go; guarded by holdMu)
	overheld atomic.Bool    // a waiting message was released: no prefetch until a handler finishes

	leaseMu sync.Mutex
	leases  map[string]*leaseState // by command type

	durMu  sync.Mutex
	durSum time.Duration
	durN   int64

	claimMu  sync.Mutex
	claimed  map[string]uint64         // command IDs with a message in hand → the claim's token
	claimSeq uint64                    // the last claim token
	handling map[string]model.InFlight // command IDs whose handler runs now (inflight.go)
	attempts map[string]*attempt       // attempts about to run or running their handler (control.go)

	ctl       control                  // the queues' control rows, in-process cancels (control.go)
	due       dueTimes                 // wake-ups when delays this process set end (due.go)
	typeSlots map[string]chan struct{} // per-type handler slots of types with a MaxConcurrency (slots.go)
	gates     map[string]*gate         // the permits of types with a GlobalConcurrency (permits.go)
	keys      keyLimits                // the permits and tokens of limit keys in use (keys.go)
	order     orderGates               // deliveries waiting for their order key's head (order.go)
	w         *weighted                // the handler slots' scheduler with QueueWeights (weights.go; guarded by holdMu), else nil
	rates     map[string]*rater        // the tokens of types with a Rate (rates.go)

	// Live counts (model.Stats): the running session and the finished ones.
	statsMu sync.Mutex
	current *session
	past    model.Stats

	bell   bellState          // the running session's doorbell (doorbell.go)
	recon  *reconcile.Loop    // the reconciler's schedule (reconcile.go)
	retain *retention.Sweeper // the retention sweeps and what they did (sweep.go)
}

type queueRunner struct {
	name    string // logical name
	storage string // storage name
	q       storage.Queue
	sq      *enqueue.ShardedQueue // q when the queue has several shards, else nil
	shards  int                   // its number of shards (1: not sharded)
	hint    atomic.Uint64         // the shards named by wake-ups not yet polled (bit i: shard i; at most layout.MaxShards = 64)
	defs    []*registry.Definition
	wake    chan struct{}
	ctlWake chan struct{} // its paused state changed (control.go)

	mu       sync.Mutex
	inflight int
	capacity chan struct{}
	wi       int // its index in p.queues and p.w.qs
}

type leaseState struct {
	base, current time.Duration
	lost          int       // lost leases since the last change
	clean         int       // clean finishes since the last loss or change
	changed       time.Time // last loss, growth or shrink
}

// New returns a processor for the command types in reg, on store. It
// validates cfg and the storage names but does no I/O: queues and tables are
// opened (and created) when Run or RunFor starts.
func New(store storage.Store, reg *registry.Registry, cfg Config) (*Processor, error) {
	if store == nil || reg == nil {
		return nil, fmt.Errorf("%w: store and registry are required", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	qnames := reg.Queues()
	if len(qnames) == 0 {
		return nil, fmt.Errorf("%w: register at least one handler (cmdq.Register) first", model.ErrNoHandlers)
	}
	names := layout.Names{Prefix: cfg.Prefix, Shards: cfg.Shards}
	if err := names.Validate(qnames...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	p := &Processor{
		cfg: cfg, store: store, reg: reg, names: names, health: newHealth(), instance: newInstanceID(),
		byName: map[string]*queueRunner{}, sem: make(chan struct{}, cfg.Concurrency),
		leases: map[string]*leaseState{}, claimed: map[string]uint64{},
		ctl: control{rows: map[string]shared.QueueControl{}, localAt: map[string]time.Time{}, known: map[string]bool{}, released: map[string][]pausedRelease{},
			cancelling: map[string]time.Time{}, cancelled: map[string]time.Time{}},
		typeSlots: map[string]chan struct{}{}, parked: map[string]int{}, gates: map[string]*gate{},
	}
	p.recon = p.newReconciler()
	p.retain = retention.NewSweeper(cfg.Logger)
	for _, qn := range qnames {
		qr := &queueRunner{name: qn, storage: names.Queue(qn), shards: names.ShardCount(qn), wake: make(chan struct{}, 1), capacity: make(chan struct{}, 1), ctlWake: make(chan struct{}, 1)}
		p.queues = append(p.queues, qr)
		p.byName[qn] = qr
		p.byName[qr.storage] = qr
		for i := 1; i < qr.shards; i++ {
			p.byName[names.ShardQueue(qn, i)] = qr
		}
	}
	sort.Slice(p.queues, func(i, j int) bool { return p.queues[i].name < p.queues[j].name })
	if len(cfg.QueueWeights) > 0 {
		if err := UnknownWeights(cfg.QueueWeights, reg); err != nil {
			return nil, err
		}
		if len(p.queues) > 1 {
			p.w = newWeighted(p.Queues(), cfg.QueueWeights, cfg.Concurrency)
		}
	}
	for i, qr := range p.queues {
		qr.wi = i
	}
	first := p.queues[0]
	p.probe = NewStorageProbe(func(ctx context.Context) (storage.Queue, error) {
		return store.Queue(ctx, first.storage) // the driver's cached handle once opened
	}, cfg.ProbeTimeout, cfg.ProbeInterval)
	for _, def := range reg.Handlers() {
		t := def.Type
		// A definition's options have their defaults (registry.Register).
		qr := p.byName[def.Queue]
		if qr == nil {
			continue
		}
		qr.defs = append(qr.defs, def)
		p.leases[t] = &leaseState{base: def.Lease, current: def.Lease}
		if def.MaxConcurrency > 0 {
			p.typeSlots[t] = make(chan struct{}, def.MaxConcurrency)
		}
		limit := def.GlobalConcurrency
		if n, ok := cfg.GlobalConcurrency[t]; ok {
			limit = n
		}
		if limit > 0 {
			p.gates[t] = newGate(t, def.Queue, limit)
		}
	}
	for t := range cfg.GlobalConcurrency {
		if def, ok := reg.Lookup(t); !ok || !def.Handled() {
			return nil, fmt.Errorf("%w: GlobalConcurrency names command type %q, which has no handler here; register it, or remove it from the limits", ErrInvalidConfig, t)
		}
	}
	if err := p.setupRates(reg); err != nil {
		return nil, err
	}
	return p, nil
}

// Config returns the processor's configuration with defaults applied.
func (p *Processor) Config() Config { return p.cfg }

// Queues returns the logical queue names the processor polls, sorted.
func (p *Processor) Queues() []string {
	out := make([]string, 0, len(p.queues))
	for _, q := range p.queues {
		out = append(out, q.name)
	}
	sort.Strings(out)
	return out
}

// Notify wakes the poller of queue (a logical name like "commands" or the
// storage name like "cmdq-commands") at once and resets its backoff.
// Wake-ups are coalesced: those that arrive while a dequeue is out, however
// many, cause one follow-up dequeue. It never blocks; unknown queues are
// ignored. The Client passes it to its Issuer and reader as their wake
// (issuer.IssuerOptions.Wake), so that an enqueue in the same process
// wakes the poller.
func (p *Processor) Notify(queue string) {
	qr := p.byName[queue]
	if qr == nil {
		return
	}
	if qr.shards > 1 {
		// A shard's storage name says where the message is: the poller
		// dequeues that shard first (poll.go).
		for i := 0; i < qr.shards; i++ {
			if queue == p.names.ShardQueue(qr.name, i) {
				qr.hint.Or(1 << i)
				break
			}
		}
	}
	p.markActive()
	select {
	case qr.wake <- struct{}{}:
	default:
	}
}

// Open opens (creating if needed) the processor's queues and tables, as
// Run and RunFor do first: call it to learn of a storage or naming problem
// before starting work in the background (cmdq.Client.Start does). It does
// nothing once it succeeded.
func (p *Processor) Open(ctx context.Context) error { return p.open(ctx) }

// open opens the tables and queues once.
func (p *Processor) open(ctx context.Context) error {
	p.openOnce.Lock()
	defer p.openOnce.Unlock()
	if p.opened {
		return nil
	}
	cmds, err := p.store.Table(ctx, p.names.CommandsTable())
	if err != nil {
		return fmt.Errorf("processor: open table %s: %w", p.names.CommandsTable(), err)
	}
	poison, err := p.store.Table(ctx, p.names.PoisonTable())
	if err != nil {
		return fmt.Errorf("processor: open table %s: %w", p.names.PoisonTable(), err)
	}
	for _, qr := range p.queues {
		q, err := enqueue.OpenQueue(ctx, p.store, p.names, qr.name) // its shards when it has several
		if err != nil {
			return fmt.Errorf("processor: open queue %s: %w", qr.storage, err)
		}
		qr.q = q
		qr.sq, _ = q.(*enqueue.ShardedQueue)
	}
	p.st = record.New(cmds, poison, record.Options{Now: p.cfg.Clock.Now, Changed: p.commandChanged, RecoveryDelay: p.RecoveryDelay, Store: p.store, Names: p.names, Retention: p.retentionPolicy()})
	p.enq = enqueue.NewEnqueuer(p.store, p.names, p.st, p.Notify)
	p.enq.SetWakeAt(p.WakeAt)
	p.enq.SetHorizon(p.cfg.HopHorizon)
	if gc, ok := p.store.(storage.GroupCombiner); ok && !p.cfg.NoGroupCommit {
		p.completer = record.NewCompleter(p.st, gc)
	}
	p.poison = poison
	if (len(p.gates) > 0 || p.keyLimitsUsed()) && storage.IsExclusive(p.store) {
		// No other process uses the store: a permit in it was left by an
		// earlier process here, killed (permits.go).
		p.clearPermits(ctx)
	}
	p.opened = true
	return nil
}

// leaseFor returns the current (possibly grown) lease of a command type.
func (p *Processor) leaseFor(cmdType string) time.Duration {
	p.leaseMu.Lock()
	defer p.leaseMu.Unlock()
	if ls := p.leases[cmdType]; ls != nil {
		return ls.current
	}
	return 0
}

// visibility is the lease a queue's dequeue takes: the longest definition
// lease of the types routed to it. A type whose lease grew takes its longer
// lease per message after the dequeue (keeper.start), so a grown type never
// lengthens the lease of the others' messages.
func (p *Processor) visibility(qr *queueRunner) time.Duration {
	v := time.Duration(0)
	for _, d := range qr.defs {
		v = max(v, d.Lease)
	}
	if v == 0 {
		v = model.DefaultLease
	}
	return v
}

// RecoveryDelay returns the visibility delay of a recovery enqueue of a
// command type (a message sent for a command that may have one already):
// the type's current lease plus StartedWriteDelay, so that a first message
// being handled has its started written — or its handler ended — before
// the second becomes visible; 30 s (the default lease) for a type this
// processor does not know. The processor's reconciler uses it; cmdq.Client
// passes it to its Issuer and its requeues while the processor runs (pass
// it as issuer.IssuerOptions.RecoveryDelay to an Issuer of your own in
// the same process). See docs/lifecycle.md, "Duplicate messages".
func (p *Processor) RecoveryDelay(cmdType string) time.Duration {
	l := p.leaseFor(cmdType)
	if l == 0 {
		return record.DefaultRecoveryDelay
	}
	return l + p.cfg.StartedWriteDelay
}

// LeaseOf returns the lease the processor currently uses for a command type
// (the definition's lease, grown after repeated lost leases), or 0 for an
// unknown type.
func (p *Processor) LeaseOf(cmdType string) time.Duration { return p.leaseFor(cmdType) }

// leaseLost counts a lost lease (one that really ended while this processor
// held the message, see keeper) and grows the type's lease past the
// threshold.
func (p *Processor) leaseLost(k *keeper) {
	cmdType := k.cmdType
	p.emit(model.Observation{Kind: model.ObservedLeaseLost, CommandID: k.cmdID, Type: cmdType, Queue: k.queue})
	p.leaseMu.Lock()
	defer p.leaseMu.Unlock()
	ls := p.leases[cmdType]
	if ls == nil {
		return
	}
	ls.lost++
	ls.clean = 0
	ls.changed = time.Now()
	if ls.lost < p.cfg.LeaseGrowth.Threshold {
		return
	}
	ls.lost = 0
	limit := time.Duration(float64(ls.base) * p.cfg.LeaseGrowth.MaxFactor)
	limit = min(limit, model.MaxLease)
	grown := min(time.Duration(float64(ls.current)*p.cfg.LeaseGrowth.Factor), limit)
	if grown > ls.current {
		p.cfg.Logger.Warn().Str("type", cmdType).Dur("from", ls.current).Dur("to", grown).Msg("cmdq processor: leases keep being lost; growing the lease")
		ls.current = grown
	}
}

// leaseClean counts a clean finish of a message of cmdType (its last queue
// call answered with the lease held) and shrinks a grown lease by
// LeaseGrowth.Factor, never below the definition's, after ShrinkAfter
// clean finishes in a row or at the first clean finish QuietPeriod after
// the last loss or change.
func (p *Processor) leaseClean(cmdType string) {
	p.leaseMu.Lock()
	defer p.leaseMu.Unlock()
	ls := p.leases[cmdType]
	if ls == nil || ls.current <= ls.base {
		return
	}
	ls.clean++
	if ls.clean < p.cfg.LeaseGrowth.ShrinkAfter && time.Since(ls.changed) < p.cfg.LeaseGrowth.QuietPeriod {
		return
	}
	shrunk := max(time.Duration(float64(ls.current)/p.cfg.LeaseGrowth.Factor), ls.base)
	p.cfg.Logger.Info().Str("type", cmdType).Dur("from", ls.current).Dur("to", shrunk).Msg("cmdq processor: leases no longer lost; shrinking the lease")
	ls.current, ls.clean, ls.lost, ls.changed = shrunk, 0, 0, time.Now()
}

// observe records a handler duration for RunFor's margin.
func (p *Processor) observe(d time.Duration) {
	p.overheld.Store(false)
	p.durMu.Lock()
	p.durSum += d
	p.durN++
	p.durMu.Unlock()
}

// avgDuration is the average observed handler duration, or
// HandlerDurationEstimate before the first.
func (p *Processor) avgDuration() time.Duration {
	p.durMu.Lock()
	defer p.durMu.Unlock()
	if p.durN > 0 {
		return p.durSum / time.Duration(p.durN)
	}
	return p.cfg.HandlerDurationEstimate
}

// margin is RunFor's safety margin: average handler duration (or the
// estimate) × Tolerance.
func (p *Processor) margin() time.Duration {
	return time.Duration(float64(p.avgDuration()) * p.cfg.Tolerance)
}

// ceiling returns the poison ceiling for def.
func (p *Processor) ceiling(def *registry.Definition) int {
	if p.cfg.PoisonCeiling > 0 {
		return p.cfg.PoisonCeiling
	}
	if def != nil && def.PoisonCeiling > 0 {
		return def.PoisonCeiling
	}
	return model.DefaultPoisonCeiling
}

// maxDeferrals returns how many deferrals (registry.RetryAfter) of a
// command of def's type do not count toward its poison ceiling.
func (p *Processor) maxDeferrals(def *registry.Definition) int {
	if p.cfg.MaxDeferrals > 0 {
		return p.cfg.MaxDeferrals
	}
	if def != nil && def.MaxDeferrals > 0 {
		return def.MaxDeferrals
	}
	return model.DefaultMaxDeferrals
}

// session is the state of one Run or RunFor.
type session struct {
	take     context.Context // ends when no more work is taken
	stopTake context.CancelFunc
	hard     context.Context // parent of handler contexts
	stopHard context.CancelFunc
	ops      context.Context // storage writes
	stopOps  context.CancelFunc
	finishBy time.Time // RunFor: every handler is cancelled at this time (zero for Run)
	endBy    time.Time // RunFor: when it must have returned (zero for Run)
	timed    bool
	release  bool // release interrupted messages (RunFor)

	wg     sync.WaitGroup
	reason atomic.Value // model.StopReason
	// jobs hands work to an idle handler goroutine (spawn); unbuffered: a
	// send succeeds only when one is waiting.
	jobs chan func()
	// hoMu guards hoClosed: no hand-off (HandOff) is reserved, and no
	// dispatched message counted (dispatch), once Run waits for the
	// session's handlers.
	hoMu     sync.Mutex
	hoClosed bool
	// hoOpen is set (under hoMu) once the session is ready: its contexts
	// set and its queues open. The session is visible to model.Stats (p.current)
	// before that, so HandOff checks it.
	hoOpen  bool
	counter struct {
		processed, completed, failed, poisoned, released, interrupted, duplicates atomic.Int64
		// fast counts deliveries that ran without loading their command.
		fast atomic.Int64
		// handedOff counts messages handed off by an in-process Issuer.
		handedOff atomic.Int64
		// hops counts messages put back until their time (schedule.go).
		hops atomic.Int64
		// deferred counts attempts deferred by RetryAfter (not in failed).
		deferred atomic.Int64
	}
}

func (s *session) stop(r model.StopReason) {
	s.reason.CompareAndSwap(nil, r)
	s.stopTake()
}

// mayTake reports whether new work may start now.
func (s *session) mayTake(p *Processor) bool {
	if s.take.Err() != nil {
		return false
	}
	if s.timed && !time.Now().Add(p.margin()).Before(s.finishBy) {
		s.stop(model.StopDeadline)
		return false
	}
	return true
}

// Run processes messages until ctx ends, then stops fetching, lets running
// handlers finish within DrainTimeout and returns. Handlers still running
// after that have their contexts cancelled; their messages reappear when
// their leases end. Messages dequeued but not yet started are made visible
// again at once. It returns nil after a clean stop, or an error if the
// queues and tables could not be opened.
func (p *Processor) Run(ctx context.Context) error {
	_, err := p.run(ctx, 0)
	return err
}

// RunFor processes messages for at most d and returns before d has passed.
// It stops taking work when now + margin would pass the end (margin = the
// average handler duration, or HandlerDurationEstimate before the first,
// × Tolerance), waits on an empty or paused queue only while the wait and
// the storage call after it (as long as the last one took) still fit, and
// cancels any handler still running shortly before the end. On return no
// message is left leased: messages not started, and those whose handler was
// cancelled, are made visible again at once. It also stops early when ctx
// ends (draining as Run does, within the time left).
func (p *Processor) RunFor(ctx context.Context, d time.Duration) (model.Summary, error) {
	if d <= 0 {
		return model.Summary{}, fmt.Errorf("%w: RunFor duration %s must be positive", ErrInvalidConfig, d)
	}
	return p.run(ctx, d)
}

// reserveFor is the time RunFor keeps at the end for cleanup writes.
func reserveFor(d time.Duration) time.Duration {
	return min(d/10, time.Second)
}

func (p *Processor) run(ctx context.Context, d time.Duration) (model.Summary, error) {
	if !p.running.CompareAndSwap(false, true) {
		return model.Summary{}, ErrRunning
	}
	defer p.running.Store(false)
	start := time.Now()
	p.health.update(func(h *health) { h.stopped, h.draining = false, false; h.state = model.ProcessorStarting })
	defer p.health.update(func(h *health) { h.stopped = true })

	s := &session{jobs: make(chan func())}
	p.began(s)
	defer p.ended(s) // also on an early return (ended is idempotent)
	base := context.WithoutCancel(ctx)
	var stopBefore time.Time
	if d > 0 {
		stopBefore = start.Add(d)
		s.timed, s.release = true, true
		s.finishBy = stopBefore.Add(-reserveFor(d))
		s.endBy = stopBefore
		var c1, c2 context.CancelFunc
		ctx, c1 = context.WithDeadline(ctx, stopBefore)
		defer c1()
		base, c2 = context.WithDeadline(base, stopBefore)
		defer c2()
	}
	s.take, s.stopTake = context.WithCancel(ctx)
	defer s.stopTake()
	s.hard, s.stopHard = context.WithCancel(base)
	defer s.stopHard()
	s.ops, s.stopOps = context.WithCancel(base)
	defer s.stopOps()

	openCtx := ctx
	if err := p.open(openCtx); err != nil {
		p.fault(ctx, "open", "", "", err)
		return model.Summary{Duration: time.Since(start)}, err
	}
	if s.timed {
		t := time.AfterFunc(time.Until(s.finishBy), func() { s.stop(model.StopDeadline); s.stopHard() })
		defer t.Stop()
	}

	defer p.register()() // in-process cancels and pauses reach it (control.go)
	defer p.openBell()() // other processes' wake-ups (doorbell.go), before the heartbeat publishes it
	s.hoMu.Lock()
	s.hoOpen = true // hand-offs may start (see HandOff)
	s.hoMu.Unlock()

	var pollers, background sync.WaitGroup
	p.weightedBegin() // with QueueWeights: every poller is about to look (weights.go)
	for _, qr := range p.queues {
		pollers.Add(1)
		go func() { defer pollers.Done(); p.poll(s, qr) }()
	}
	background.Add(1)
	go func() { defer background.Done(); p.probeLoop(s) }()
	if p.cfg.HeartbeatInterval > 0 {
		background.Add(1)
		go func() { defer background.Done(); p.heartbeatLoop(s, start) }()
	}
	if p.cfg.ReconcileInterval > 0 {
		background.Add(1)
		go func() { defer background.Done(); p.reconcileLoop(s, d) }()
	}
	pollersDone := make(chan struct{})
	go func() {
		pollers.Wait()
		if s.take.Err() == nil {
			// Every poller stopped on its own: idling no longer fits.
			s.stop(model.StopIdle)
		}
		background.Wait()
		close(pollersDone)
	}()

	<-s.take.Done()
	if ctx.Err() != nil && s.reason.Load() == nil {
		if s.timed && !time.Now().Before(stopBefore) {
			s.reason.CompareAndSwap(nil, model.StopDeadline)
		} else {
			s.reason.CompareAndSwap(nil, model.StopCancelled)
		}
	}
	p.health.update(func(h *health) { h.draining = true })
	s.closeHandOff()

	inflight := make(chan struct{})
	go func() { s.wg.Wait(); close(inflight) }()
	drain := p.cfg.DrainTimeout
	if s.timed {
		drain = time.Until(s.finishBy)
	}
	if drain > 0 {
		dt := time.NewTimer(drain)
		select {
		case <-inflight:
		case <-dt.C:
		}
		dt.Stop()
	}
	s.stopHard() // cancel the handlers still running
	// Interrupted handlers return quickly if they honour their context; give
	// them a bounded time to record their outcome (RunFor: until the end).
	grace := time.Second
	if s.timed {
		grace = time.Until(stopBefore) - 50*time.Millisecond
	}
	if grace > 0 {
		gt := time.NewTimer(grace)
		select {
		case <-inflight:
		case <-gt.C:
			p.cfg.Logger.Warn().Msg("cmdq processor: handlers ignored cancellation; returning without them")
		}
		gt.Stop()
	}
	s.stopOps()
	<-pollersDone

	sum := summaryOf(s.counts())
	sum.Duration = time.Since(start)
	p.ended(s)
	if r, ok := s.reason.Load().(model.StopReason); ok {
		sum.StoppedBecause = r
	} else {
		sum.StoppedBecause = model.StopCancelled
	}
	return sum, nil
}

// claim records that this processor handles a message of command id and
// returns the claim's token (for unclaim); false if it already does (a
// second message for the same command).
func (p *Processor) claim(id string) (uint64, bool) {
	p.claimMu.Lock()
	defer p.claimMu.Unlock()
	if _, dup := p.claimed[id]; dup {
		return 0, false
	}
	p.claimSeq++
	p.claimed[id] = p.claimSeq
	return p.claimSeq, true
}

// unclaim ends the claim tok on command id; nothing if it ended already
// (a claim released early, as a retry does before its message shows up
// again, and perhaps claimed since by that message's delivery).
func (p *Processor) unclaim(id string, tok uint64) {
	p.claimMu.Lock()
	if p.claimed[id] == tok {
		delete(p.claimed, id)
	}
	p.claimMu.Unlock()
}

// counts returns the session's counts so far.
func (s *session) counts() model.Stats {
	c := &s.counter
	return model.Stats{
		Processed: c.processed.Load() - c.released.Load() - c.interrupted.Load() - c.duplicates.Load() - c.hops.Load(),
		Completed: c.completed.Load(), Failed: c.failed.Load(), Poisoned: c.poisoned.Load(),
		Released: c.released.Load(), Interrupted: c.interrupted.Load(), Duplicates: c.duplicates.Load(),
		FastPath: c.fast.Load(), HandedOff: c.handedOff.Load(), Hops: c.hops.Load(), Deferred: c.deferred.Load(),
	}
}

// summaryOf returns the counts as a model.Summary (without Duration and reason).
func summaryOf(st model.Stats) model.Summary {
	return model.Summary{
		Processed: int(st.Processed), Completed: int(st.Completed), Failed: int(st.Failed), Poisoned: int(st.Poisoned),
		Released: int(st.Released), Interrupted: int(st.Interrupted), Duplicates: int(st.Duplicates), Deferred: int(st.Deferred),
	}
}

func plus(st, o model.Stats) model.Stats {
	st.Processed += o.Processed
	st.Completed += o.Completed
	st.Failed += o.Failed
	st.Poisoned += o.Poisoned
	st.Released += o.Released
	st.Interrupted += o.Interrupted
	st.Duplicates += o.Duplicates
	st.FastPath += o.FastPath
	st.HandedOff += o.HandedOff
	st.Hops += o.Hops
	st.Deferred += o.Deferred
	return st
}

// began makes s the running session for model.Stats.
func (p *Processor) began(s *session) {
	p.statsMu.Lock()
	p.current = s
	p.statsMu.Unlock()
}

// ended adds s's counts to the finished sessions' (once).
func (p *Processor) ended(s *session) {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	if p.current == s {
		p.past = plus(p.past, s.counts())
		p.current = nil
	}
}

// Stats returns the processor's counts since New, live while it runs.
func (p *Processor) Stats() model.Stats {
	p.statsMu.Lock()
	st := p.past
	if p.current != nil {
		st = plus(st, p.current.counts())
		st.Running = true
	}
	p.statsMu.Unlock()
	st.InFlight = p.Health().InFlight
	return st
}
