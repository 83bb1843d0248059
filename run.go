package cmdq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/storage"
)

// Start opens the tables and the queue of every known command type
// (creating them if needed) and, when handlers are registered, starts
// processing in the background: a storage or configuration problem is
// returned here, before any work starts. Processing runs until Stop is
// called or ctx ends (then it drains as Stop does). Start while processing
// runs gives ErrStarted. A Client without handlers only opens its storage
// (issue, read and operate need no Start, which opens lazily, but Start
// finds problems early). With periodic schedules (Periodic), Start stores
// each one's row and runs the scheduler in the background, handlers or
// not: missed ticks are caught up first, then each tick is issued when it
// comes, until Stop or ctx ends.
func (c *Client) Start(ctx context.Context) error {
	p, err := c.prepare(ctx)
	if err != nil {
		return err
	}
	entries, err := c.prepareSchedules(ctx)
	if err != nil {
		return err
	}
	if c.isRunning() {
		return fmt.Errorf("%w: Start while processing runs; call Stop first", ErrStarted)
	}
	cu, _ := c.catchUp(ctx, entries)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running || c.scheduler != nil {
		return fmt.Errorf("%w: Start while processing runs; call Stop first", ErrStarted)
	}
	c.scheduler = c.runScheduler(ctx, cu)
	if p == nil {
		return nil
	}
	runCtx, stop := context.WithCancel(ctx)
	done, ended := make(chan error, 1), make(chan struct{})
	c.running, c.stop, c.done, c.ended = true, stop, done, ended
	go func() {
		err := p.Run(runCtx)
		c.mu.Lock()
		if c.done == done {
			c.running = false
		}
		c.mu.Unlock()
		done <- err
		close(ended)
	}()
	return nil
}

// Stopped returns a channel that is closed when the processing of the last
// Start ends (Stop, its context, or a processor that could not go on: Stop
// then returns its error), or nil (which blocks forever) before Start and
// without handlers.
func (c *Client) Stopped() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}

// prepare opens the storage and, when handlers are registered, creates and
// opens the processor (once). It returns the processor, or nil without
// handlers.
func (c *Client) prepare(ctx context.Context) (*processor.Processor, error) {
	if err := c.checkQueues(); err != nil {
		return nil, err
	}
	if _, err := c.reader(ctx); err != nil {
		return nil, fmt.Errorf("cmdq: open tables: %w", err)
	}
	r, _ := c.reader(ctx)
	if o, skewed := c.clockOffset(); skewed {
		c.cfg.Logger.Warn().Dur("offset", o).Msg("cmdq: this machine's clock is off from the storage service's by more than 2 s (offset: the service's ahead of ours); cmdq runs on the service's time, but the machine's time sync (NTP) needs a look")
	}
	for _, q := range c.Queues() {
		if _, err := r.Queue(ctx, q); err != nil {
			return nil, fmt.Errorf("cmdq: open queue %s: %w", c.names.Queue(q), err)
		}
	}
	if !c.Handles() {
		return nil, nil
	}
	p, err := c.processor()
	if err != nil {
		return nil, err
	}
	if err := p.Open(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// processor returns the Client's processor, creating it on first use.
func (c *Client) processor() (*processor.Processor, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		return c.proc, nil
	}
	cfg := c.cfg.processor()
	cfg.NoFastPath, cfg.NoHandOff = c.tune.NoFastPath, c.tune.NoHandOff
	cfg.ControlInterval = c.tune.ControlInterval
	cfg.HopHorizon = c.tune.HopHorizon
	cfg.RateToken = c.tune.RateToken
	cfg.Changes = changes{c}
	cfg.Doorbell = c.processorDoorbell()
	if len(c.cfg.Observers) > 0 {
		cfg.Observer = observers(c.cfg.Observers)
	}
	p, err := processor.New(c.st, c.reg, cfg)
	if err != nil {
		return nil, err
	}
	c.proc = p
	c.procLive.Store(p)
	return p, nil
}

// Stop stops taking work and issuing periodic ticks, lets running
// handlers and the ticks being issued finish (within Config.DrainTimeout,
// 30 s by default, or until ctx ends for the handlers) and returns once processing has stopped; it also stops the background
// retries of failed enqueues (issuing keeps working). The error is the
// processor's (nil after a clean stop), or ctx's when it ended first.
// Stop without Start does nothing.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	stop, done := c.stop, c.done
	iss := c.iss
	sched := c.scheduler
	c.scheduler = nil
	c.mu.Unlock()
	defer func() { _ = iss.Close() }()
	sched.stop() // no tick is started after Stop begins; the ones in flight finish

	if stop == nil {
		return nil
	}
	stop()
	select {
	case err := <-done:
		done <- err // a concurrent Stop gets it too
		c.mu.Lock()
		if c.done == done {
			c.stop, c.done, c.running = nil, nil, false
		}
		c.mu.Unlock()
		return err
	case <-ctx.Done():
		return fmt.Errorf("cmdq: stop: %w", ctx.Err())
	}
}

// Run is Start, then it blocks until ctx ends and stops as Stop does
// (within Config.DrainTimeout). It returns nil after a clean
// stop, or the error that kept it from starting. Without handlers or
// periodic schedules it fails with ErrNoHandlers.
func (c *Client) Run(ctx context.Context) error {
	if !c.Handles() && !c.hasSchedules() {
		return fmt.Errorf("%w: register a handler (cmdq.Register) or a periodic schedule (Client.Periodic) before Run", ErrNoHandlers)
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return c.Stop(context.WithoutCancel(ctx))
}

// RunFor processes for at most d and returns before d has passed, with what
// it did (see processor.RunFor: it stops taking work when the
// next handler might not finish in time, and leaves no message leased).
// Periodic schedules (Periodic) tick during the box: a start's catch-up
// first, so the ticks that fell between two runs are issued by the next
// one (up to each schedule's CatchUp).
// For a scheduler that starts a job every minute, use 55 s. Without
// handlers it fails with ErrNoHandlers; while Start's processing
// runs, with ErrStarted.
func (c *Client) RunFor(ctx context.Context, d time.Duration) (RunForSummary, error) {
	if !c.Handles() {
		return RunForSummary{}, fmt.Errorf("%w: register a handler (cmdq.Register) before RunFor", ErrNoHandlers)
	}
	start := time.Now()
	p, err := c.prepare(ctx)
	if err != nil {
		return RunForSummary{}, err
	}
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return RunForSummary{}, fmt.Errorf("%w: RunFor while Start's processing runs", ErrStarted)
	}
	c.running = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()
	entries, err := c.prepareSchedules(ctx)
	if err != nil {
		return RunForSummary{}, err
	}
	left := d - time.Since(start)
	if left <= 0 {
		return RunForSummary{}, fmt.Errorf("cmdq: RunFor %s: opening storage took %s, nothing left to run", d, time.Since(start).Round(time.Millisecond))
	}
	if entries != nil {
		// The periodic schedules tick during the time box (a start's
		// catch-up first): a deployment that only runs RunFor, every
		// minute, still issues every tick, the ones between two runs by
		// the next run's catch-up.
		sctx, cancel := context.WithTimeout(ctx, left)
		defer cancel()
		cu, _ := c.catchUp(sctx, entries)
		sched := c.runScheduler(sctx, cu)
		defer sched.stop()
		if left = d - time.Since(start); left <= 0 {
			return RunForSummary{}, fmt.Errorf("cmdq: RunFor %s: opening storage and the periodic catch-up took %s, nothing left to run", d, time.Since(start).Round(time.Millisecond))
		}
	}
	sum, err := p.RunFor(ctx, left)
	return summaryOut(sum), err
}

// isRunning reports whether processing or the scheduler runs.
func (c *Client) isRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running || c.scheduler != nil
}

// hasSchedules reports whether a periodic schedule is registered.
func (c *Client) hasSchedules() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.schedules) > 0
}

// Health returns the processor's health (state, last fault, in-flight
// count). A Client without handlers has no processor: its state is
// ProcessorStopped and it is healthy.
func (c *Client) Health() ProcessorHealth {
	h := ProcessorHealth{State: ProcessorStopped}
	if p := c.procLive.Load(); p != nil {
		h = healthOut(p.Health())
		h.Wake = p.WakeAddr()
	}
	h.Unreachable = c.unreachable()
	h.ClockOffset, h.ClockSkewed = c.clockOffset()
	h.ClockOffsetMS = h.ClockOffset.Milliseconds()
	for _, m := range storage.MembersOf(c.st) {
		h.Accounts = append(h.Accounts, AccountHealth{Name: m.Name, Healthy: m.Healthy, Since: m.Since, LastError: m.LastError})
	}
	return h
}

// ResetHealth clears an unhealthy processor's fault count: with
// Config.Flywheel it is how an operator lets it pull work again.
func (c *Client) ResetHealth() {
	if p := c.procLive.Load(); p != nil {
		p.ResetHealth()
	}
}

// Stats returns the processor's counts since the Client was created, live
// while it runs (zero without handlers).
func (c *Client) Stats() ProcessorStats {
	if p := c.procLive.Load(); p != nil {
		return ProcessorStats(p.Stats())
	}
	return ProcessorStats{}
}

// CheckStorage tells within about 2 s whether storage answers: the
// readiness probe (processor.CheckStorage; without a processor, a
// probe of the default queue). It makes no storage call when one succeeded
// within the last 5 s. The error wraps ErrStorageUnavailable, or
// ErrStorageFull while the embedded store's disk is too full to accept
// new commands (see Config.IssueHeadroom; no storage call).
func (c *Client) CheckStorage(ctx context.Context) error {
	if err := c.issueSpace(); err != nil {
		return err
	}
	err := c.checkStorage(ctx)
	if err != nil && someAccountHealthy(c.st) {
		// Several accounts, and one answers: the commands on the others
		// keep flowing, so the service is ready; Health names the
		// failing account.
		return nil
	}
	return err
}

// someAccountHealthy reports a store spread over several accounts with at
// least one healthy (after a probe that found another failing).
func someAccountHealthy(st storage.Store) bool {
	for _, m := range storage.MembersOf(st) {
		if m.Healthy {
			return true
		}
	}
	return false
}

func (c *Client) checkStorage(ctx context.Context) error {
	if p := c.procLive.Load(); p != nil {
		return p.CheckStorage(ctx)
	}
	c.mu.Lock()
	if c.probe == nil {
		c.probe = processor.NewStorageProbe(func(ctx context.Context) (storage.Queue, error) {
			r, err := c.reader(ctx)
			if err != nil {
				return nil, err
			}
			return r.Queue(ctx, model.DefaultQueue)
		}, c.cfg.ProbeTimeout, c.cfg.ProbeInterval)
	}
	probe := c.probe
	c.mu.Unlock()
	return probe.Check(ctx)
}

// DeleteStorage deletes the queues and tables of the Client's prefix (the
// queues "<prefix>-*", the tables "<prefix>commands" and "<prefix>poison"),
// with every command, event, message and poison entry in them. Queues and
// tables that do not exist are skipped. It fails with ErrStarted while
// processing runs. The Client can be used again afterwards: its storage is
// created anew on first use (Azure refuses the same names for about 30 s
// after a delete, with errors wrapping storage.ErrUnavailable).
func (c *Client) DeleteStorage(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		return fmt.Errorf("%w: stop processing before DeleteStorage", ErrStarted)
	}
	var errs []error
	queues, err := c.st.Queues(ctx, c.cfg.Prefix+"-")
	if err != nil {
		return fmt.Errorf("cmdq: delete storage: %w", err)
	}
	for _, q := range queues {
		if err := c.st.DeleteQueue(ctx, q); err != nil && !errors.Is(err, storage.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	tables, err := c.st.Tables(ctx, c.cfg.Prefix)
	if err != nil {
		return fmt.Errorf("cmdq: delete storage: %w", err)
	}
	for _, t := range tables {
		if _, day := c.names.ParseDayTable(t); !day && t != c.names.CommandsTable() && t != c.names.PoisonTable() {
			continue // another prefix's ("cmdqx…" is not "cmdq"'s)
		}
		if err := c.st.DeleteTable(ctx, t); err != nil && !errors.Is(err, storage.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	// Handles of the deleted queues and tables are stale: open anew. The
	// final statuses kept are of deleted commands.
	c.hub.mu.Lock()
	c.hub.final.clear()
	c.hub.mu.Unlock()
	c.log = nil
	_ = c.iss.Close()
	c.iss = c.newIssuer()
	c.proc = nil
	c.procLive.Store(nil)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cmdq: delete storage: %w", err)
	}
	return nil
}

// observers passes each observation to every observer, in order; a panic
// in one is recovered and dropped without keeping it from the others.
type observers []Observer

func (os observers) Observe(mo model.Observation) {
	o := observationOut(mo)
	for _, x := range os {
		observeOne(x, o)
	}
}

func observeOne(x Observer, o Observation) {
	defer func() { _ = recover() }()
	x.Observe(o)
}

// changes is the processor's change hook: it pushes the processor's
// stored changes and handler starts and ends to the Client's watchers.
type changes struct{ c *Client }

// CommandChanged pushes a stored change to the watchers.
func (ch changes) CommandChanged(st model.Status, events []model.Event) {
	ch.c.hub.push(st, events)
}

// InFlightChanged wakes the command's watchers (Client.Running changed).
func (ch changes) InFlightChanged(id string) { ch.c.hub.inFlightChanged(id) }
