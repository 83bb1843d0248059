package processor

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/storage"
)

// Paused queues and the queues' control rows (docs/processor.md, "Paused
// queues"; docs/lifecycle.md for the rows).
//
// The processor starts a command only while what it knows of its queues'
// control rows was read (one query of shared.ControlPartition, for every
// queue at once) less than ControlInterval ago; an older knowledge is read
// again first. So a pause stored at time t stops every processor from
// starting that queue's commands by t + ControlInterval (9 s), a busy
// processor reads the rows about once per ControlInterval, and an idle one
// (nothing to start) never: the idle cost is unchanged. A poller that
// knows its queue is paused dequeues nothing; it reads the rows instead,
// with the empty-poll backoff (MinPollInterval doubling to
// MaxPollInterval), until the queue is resumed: a paused idle queue costs
// what an idle one does. A poller whose last dequeue brought messages
// (busy) reads stale rows before its next dequeue, so that a busy
// processor does not dequeue a paused queue (a dequeue counts toward the
// poison ceiling); an idle one dequeues first and reads only when the
// dequeue brought messages, so the first dequeue after a pause that it
// learns of this way is released (visible again after ControlInterval).

// maxClockSkew bounds the difference between two machines' clocks that the
// fast path's cancel checks allow for (2 s, as the first delivery's age
// check does).
const maxClockSkew = model.MaxClockSkew

// control is what the processor knows of its queues' control rows.
type control struct {
	mu      sync.Mutex
	rows    map[string]shared.QueueControl
	localAt map[string]time.Time // when a row was set in process (SetControl)
	sent    time.Time            // send time of the last successful read (zero: never)
	reading chan struct{}        // closed when the read in progress ends (nil: none)
	readErr error                // the error of the last read
	known   map[string]bool      // the paused state last reported, by queue
	// released are the deliveries of each paused queue released
	// unstarted (startGate), taken back when it is resumed.
	released map[string][]pausedRelease

	// Cancels in this process (cmdq.Client.Cancel): IDs being cancelled
	// (no fast path for them) and IDs whose cancel is stored (a handler
	// about to start is not started), with when they were noted.
	cancelling, cancelled map[string]time.Time
}

// controlFresh reports whether the control rows were read less than
// ControlInterval ago.
func (p *Processor) controlFresh() bool {
	p.ctl.mu.Lock()
	defer p.ctl.mu.Unlock()
	return !p.ctl.sent.IsZero() && time.Since(p.ctl.sent) < p.cfg.ControlInterval
}

// ensureControl reads the control rows unless they are fresh.
func (p *Processor) ensureControl(ctx context.Context) error {
	if p.controlFresh() {
		return nil
	}
	return p.readControl(ctx)
}

// readControl reads the control rows (one query), or waits for the read in
// progress: every caller at a time shares one read.
func (p *Processor) readControl(ctx context.Context) error {
	p.ctl.mu.Lock()
	if ch := p.ctl.reading; ch != nil {
		p.ctl.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.ctl.mu.Lock()
		defer p.ctl.mu.Unlock()
		return p.ctl.readErr
	}
	ch := make(chan struct{})
	p.ctl.reading = ch
	p.ctl.mu.Unlock()

	sent := time.Now()
	rows, err := p.st.ReadControl(ctx)

	p.ctl.mu.Lock()
	p.ctl.reading, p.ctl.readErr = nil, err
	var changes []queueChange
	if err == nil {
		for q, local := range p.ctl.rows {
			r, read := rows[q]
			if at, ok := p.ctl.localAt[q]; ok && !sent.After(at) {
				// Set in process after this read was sent: the read may
				// predate it.
				if read && r.CancelledAt.After(local.CancelledAt) {
					local.CancelledAt = r.CancelledAt
				}
				rows[q] = local
				continue
			}
			if read && local.CancelledAt.After(r.CancelledAt) {
				r.CancelledAt = local.CancelledAt
				rows[q] = r
			}
		}
		p.ctl.rows = rows
		if sent.After(p.ctl.sent) {
			p.ctl.sent = sent
		}
		changes = p.changesLocked()
	}
	close(ch)
	p.ctl.mu.Unlock()
	if err == nil {
		p.ok()
	}
	p.reportChanges(changes)
	return err
}

// pausedRelease is a delivery of a paused queue that startGate released
// unstarted: the message (with the receipt of the release), whether it
// was handed off, and the lease it was held with. When the queue is
// resumed it is taken back with that receipt (retake): no dequeue, so its
// dequeue count — the attempt number — stays, and no lease_lost is
// recorded for a delivery that never ran.
type pausedRelease struct {
	m      storage.Message
	direct bool
	lease  time.Duration
}

// maxPausedReleases bounds the released deliveries remembered per queue
// (1024): past it the oldest are forgotten (they are dequeued again after
// the resume, as any message is).
const maxPausedReleases = 1024

// queueChange is a queue whose paused state changed as far as this
// processor knows.
type queueChange struct {
	qr     *queueRunner
	paused bool
	// retake are its deliveries released while it was paused (resumed).
	retake []pausedRelease
	by     string
}

// changesLocked returns the queues whose paused state differs from the
// one last reported, and notes the new one. Caller holds p.ctl.mu.
func (p *Processor) changesLocked() []queueChange {
	var out []queueChange
	for _, qr := range p.queues {
		r := p.ctl.rows[qr.name]
		if p.ctl.known[qr.name] != r.Paused {
			p.ctl.known[qr.name] = r.Paused
			c := queueChange{qr: qr, paused: r.Paused, by: r.By}
			if !r.Paused {
				c.retake = p.ctl.released[qr.name]
				delete(p.ctl.released, qr.name)
			}
			out = append(out, c)
		}
	}
	return out
}

// reportChanges emits an observation for each change and wakes the poller
// of a resumed queue.
func (p *Processor) reportChanges(changes []queueChange) {
	for _, c := range changes {
		kind := model.ObservedResumed
		if c.paused {
			kind = model.ObservedPaused
			p.cfg.Logger.Info().Str("queue", c.qr.name).Str("by", c.by).Msg("cmdq processor: queue paused; starting none of its commands")
		} else {
			p.cfg.Logger.Info().Str("queue", c.qr.name).Str("by", c.by).Msg("cmdq processor: queue resumed")
		}
		p.emit(model.Observation{Kind: kind, Queue: c.qr.name, By: c.by})
		select {
		case c.qr.ctlWake <- struct{}{}:
		default:
		}
		p.retake(c.qr, c.retake)
	}
}

// retake takes back deliveries of qr released while it was paused (see
// pausedRelease), now that it is resumed: each is made invisible for its
// lease again with the receipt of its release (one UpdateVisibility) and
// handled as it was delivered, dequeue count and attempt unchanged. One
// that someone else dequeued since (a processor that did not know of the
// pause), or that is gone, is left to them. Nothing is taken back once the
// session stops taking work: those messages become visible by themselves.
func (p *Processor) retake(qr *queueRunner, rs []pausedRelease) {
	if len(rs) == 0 {
		return
	}
	p.statsMu.Lock()
	s := p.current
	p.statsMu.Unlock()
	if s == nil {
		return
	}
	for _, r := range rs {
		s.hoMu.Lock()
		ok := s.hoOpen && !s.hoClosed && s.mayTake(p)
		if ok {
			s.wg.Add(1) // Run waits for it, as for a hand-off
		}
		s.hoMu.Unlock()
		if !ok {
			return
		}
		p.holdMu.Lock()
		p.busy++
		p.held++
		if p.w != nil {
			p.w.qs[qr.wi].held++
		}
		p.holdMu.Unlock()
		qr.mu.Lock()
		qr.inflight++
		qr.mu.Unlock()
		p.health.update(func(hl *health) { hl.inFlight++ })
		p.markActive()
		s.spawn(func() {
			defer s.wg.Done()
			defer p.done(qr)
			sent := time.Now()
			receipt, visible, err := qr.q.UpdateVisibility(s.ops, r.m.ID, r.m.PopReceipt, r.lease)
			if err != nil {
				if !expected(err) && s.ops.Err() == nil {
					p.fault(s.ops, "take back a released message", qr.name, "", err)
				}
				return
			}
			m := r.m
			m.PopReceipt, m.NextVisibleAt = receipt, visible
			p.handle(s, qr, m, sent, r.lease, r.direct)
		})
	}
}

// SetControl tells the processor of a control row its process has just
// written (cmdq.Client.PauseQueue, ResumeQueue): it acts on it at once,
// without waiting for its next read of the rows.
func (p *Processor) SetControl(c shared.QueueControl) {
	p.ctl.mu.Lock()
	if old, ok := p.ctl.rows[c.Queue]; ok && old.CancelledAt.After(c.CancelledAt) {
		c.CancelledAt = old.CancelledAt
	}
	p.ctl.rows[c.Queue] = c
	p.ctl.localAt[c.Queue] = time.Now()
	changes := p.changesLocked()
	p.ctl.mu.Unlock()
	p.reportChanges(changes)
}

// queuePaused reports whether logical queue is paused as far as the
// processor knows.
func (p *Processor) queuePaused(queue string) bool {
	p.ctl.mu.Lock()
	defer p.ctl.mu.Unlock()
	return p.ctl.rows[queue].Paused
}

// Paused reports whether the processor knows logical queue as paused (it
// starts none of its commands).
func (p *Processor) Paused(queue string) bool { return p.queuePaused(queue) }

// mayDequeue is asked by qr's poller before each dequeue; busy says its
// last dequeue brought messages. A busy poller whose control rows are
// stale reads them first (a failed read is a fault, and the dequeue goes
// ahead: each delivery checks again before it starts). It reports whether
// the queue is not paused.
func (p *Processor) mayDequeue(s *session, qr *queueRunner, busy bool) bool {
	if busy && !p.controlFresh() {
		if err := p.readControl(s.ops); err != nil && s.ops.Err() == nil {
			p.fault(s.ops, "read control", qr.name, "", err)
		}
	}
	return !p.queuePaused(qr.name)
}

// waitFits reports whether a poller may wait for wait before its next
// storage call: always in Run; in a RunFor, when the wait, that call (as
// long as the last one took: a loaded store answers slower) and the margin
// end before the run must finish. Otherwise the run is idle.
func (p *Processor) waitFits(s *session, wait, call time.Duration) bool {
	return !s.timed || time.Now().Add(wait+call+p.margin()).Before(s.finishBy)
}

// whilePaused waits while qr is paused: it reads the control rows instead
// of dequeuing, after MinPollInterval, doubling up to MaxPollInterval (a
// paused queue costs what an idle one does), or at once when this process
// resumes it. It returns false when the session stops taking work, or, in
// a RunFor, when the next wait no longer fits (as for an idle queue).
func (p *Processor) whilePaused(s *session, qr *queueRunner) bool {
	interval := p.cfg.MinPollInterval
	var took time.Duration // how long the last control read took
	for p.queuePaused(qr.name) {
		wait := p.jitter(interval)
		if !p.waitFits(s, wait, took) {
			return false // RunFor: the run ends idle once every poller has
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-qr.ctlWake:
		case <-s.take.Done():
			t.Stop()
			return false
		}
		t.Stop()
		if !p.queuePaused(qr.name) {
			break // resumed in this process
		}
		before := time.Now()
		err := p.readControl(s.ops)
		took = time.Since(before)
		if err != nil {
			if s.ops.Err() != nil {
				return false
			}
			p.fault(s.ops, "read control", qr.name, "", err)
		}
		interval = min(2*interval, p.cfg.MaxPollInterval)
		if paused := p.queuePaused(qr.name); paused || err != nil {
			p.emit(model.Observation{Kind: model.ObservedPolled, Queue: qr.name, Paused: paused, Err: err, Wait: p.jitter(interval)})
		}
	}
	return true
}

// startGate is asked by a delivery of message m (direct: handed off;
// tok: its claim of the command) before it starts (after it took its handler slot): the control rows are
// read first when stale; a delivery of a paused queue is released
// (visible again after ControlInterval, when every processor knows of the
// pause) and remembered, to be taken back at once when the queue is
// resumed (retake); one whose read failed is given up (its message
// reappears when its lease ends), as a failed load is.
func (p *Processor) startGate(s *session, qr *queueRunner, k *keeper, m storage.Message, direct bool, tok uint64) bool {
	if err := p.ensureControl(s.ops); err != nil {
		p.giveUp(s, k, "read control", err)
		return false
	}
	if p.queuePaused(qr.name) {
		p.releasePaused(s, qr, k, m, direct, tok)
		return false
	}
	return true
}

// releasePaused releases the delivery of m (a paused queue's), visible
// again after ControlInterval, and remembers it for retake; when the queue
// was resumed meanwhile, it is taken back at once. The delivery's claim
// of the command (tok) ends first, so that the delivery that takes it back
// can claim it.
func (p *Processor) releasePaused(s *session, qr *queueRunner, k *keeper, m storage.Message, direct bool, tok uint64) {
	lease := k.currentLease()
	receipt, held := k.stop()
	s.counter.released.Add(1)
	if !held {
		return
	}
	receipt, visible, err := k.q.UpdateVisibility(s.ops, k.id, receipt, p.cfg.ControlInterval)
	if err != nil {
		if !expected(err) {
			p.fault(s.ops, "release", k.queue, k.cmdID, err)
		}
		return
	}
	m.PopReceipt, m.NextVisibleAt = receipt, visible
	p.unclaim(k.cmdID, tok)
	r := pausedRelease{m: m, direct: direct, lease: lease}
	p.ctl.mu.Lock()
	paused := p.ctl.known[qr.name] && p.ctl.rows[qr.name].Paused
	if paused {
		rs := append(p.ctl.released[qr.name], r)
		if len(rs) > maxPausedReleases {
			rs = rs[len(rs)-maxPausedReleases:]
		}
		p.ctl.released[qr.name] = rs
	}
	p.ctl.mu.Unlock()
	if !paused {
		p.retake(qr, []pausedRelease{r}) // resumed meanwhile
	}
}

// fastPathClear reports whether a first delivery of env may still start
// from what its message carries, as far as cancels go: not while the
// command is being cancelled in this process, not when the queue's
// control row shows a cancel of a young command since about when it was
// issued (as the last read of the rows, at most ControlInterval old,
// knows), and not later than the fast path's age limit after its issue
// time (by this machine's clock, allowing maxClockSkew). A cancel of a
// command young enough for the fast path marks the row and waits
// ControlInterval before it is stored (cmdq.Client.Cancel), so no
// delivery starts a cancelled command from its message.
func (p *Processor) fastPathClear(env layout.Envelope, queue string, lease time.Duration) bool {
	if env.First == nil {
		return true // no fast path anyway
	}
	issued, ready := env.First.IssuedAt, env.First.Ready()
	p.ctl.mu.Lock()
	_, cancelling := p.ctl.cancelling[env.ID]
	at := p.ctl.rows[queue].CancelledAt
	p.ctl.mu.Unlock()
	switch {
	case cancelling:
		return false
	case !at.IsZero() && !at.Before(issued.Add(-maxClockSkew)):
		return false
	case p.since(ready) > fastPathAge(lease)+maxClockSkew:
		return false
	}
	return true
}

// cancelMemory is how long the processor remembers an in-process cancel
// (an hour: far longer than any fast-path window or load-to-start gap).
const cancelMemory = time.Hour

// Cancelling tells the processor that command id is being cancelled in its
// process: from now on no delivery here starts it from its message
// without loading it (the first delivery's fast path).
func (p *Processor) Cancelling(id string) {
	p.ctl.mu.Lock()
	defer p.ctl.mu.Unlock()
	now := time.Now()
	prune(p.ctl.cancelling, now)
	p.ctl.cancelling[id] = now
}

// Cancelled tells the processor that the cancel of command id is stored: a
// handler of it that runs here has its context cancelled at once (the
// cause wraps model.ErrCancelled) and its attempt writes nothing more;
// one about to start here does not start.
func (p *Processor) Cancelled(id string) {
	now := time.Now()
	p.ctl.mu.Lock()
	prune(p.ctl.cancelled, now)
	p.ctl.cancelled[id] = now
	p.ctl.mu.Unlock()
	p.claimMu.Lock()
	a := p.attempts[id]
	p.claimMu.Unlock()
	if a != nil {
		a.cancelled()
	}
}

// prune drops the entries of m older than cancelMemory.
func prune(m map[string]time.Time, now time.Time) {
	if len(m) < 64 {
		return
	}
	for id, at := range m {
		if now.Sub(at) > cancelMemory {
			delete(m, id)
		}
	}
}

// track records that attempt a runs (or is about to run) its handler here,
// so that an in-process cancel reaches it; the returned function forgets
// it. An attempt whose command's cancel is already stored here is
// cancelled at once.
func (p *Processor) track(a *attempt) (untrack func()) {
	id := a.rec.ID
	p.claimMu.Lock()
	if p.attempts == nil {
		p.attempts = map[string]*attempt{}
	}
	p.attempts[id] = a
	p.claimMu.Unlock()
	p.ctl.mu.Lock()
	_, done := p.ctl.cancelled[id]
	p.ctl.mu.Unlock()
	if done {
		a.cancelled()
	}
	return func() {
		p.claimMu.Lock()
		if p.attempts[id] == a {
			delete(p.attempts, id)
		}
		p.claimMu.Unlock()
	}
}

// errCancelled: the command was cancelled while this attempt ran. It wraps
// model.ErrCancelled and model.ErrSuperseded.
var errCancelled = &cancelledError{}

type cancelledError struct{}

func (*cancelledError) Error() string {
	return "processor: the command was cancelled while this attempt ran: " + model.ErrCancelled.Error()
}

func (*cancelledError) Unwrap() []error {
	return []error{model.ErrCancelled, model.ErrSuperseded}
}

// cancelled ends the attempt because its command was cancelled (unless it
// already finished): its handler's context is cancelled.
func (a *attempt) cancelled() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.finished {
		a.supersede(errCancelled)
	}
}

// renewed runs after each renewal of the attempt's lease: it writes the
// started event if it is not written yet (whose conflict ends an attempt
// that is superseded), else it reads the command row (one point read), so
// that an attempt whose command was cancelled, or ended, elsewhere learns
// it no later than its next renewal.
func (a *attempt) renewed() {
	a.mu.Lock()
	written, done := a.startedWritten, a.finished || a.over != nil
	id := a.rec.ID
	a.mu.Unlock()
	switch {
	case done:
		return
	case !written:
		a.writeStarted()
		return
	}
	cur, err := a.p.st.Load(a.s.ops, id)
	if err != nil {
		if a.s.ops.Err() == nil && !expected(err) {
			a.p.fault(a.s.ops, "read command", a.qr.name, id, err)
		}
		return
	}
	a.p.ok()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.finished || a.over != nil {
		return
	}
	if over := a.supersededBy(cur); over != nil {
		a.rec = cur
		a.supersede(over)
	}
}

// Processors running in this process, by store: an in-process cancel or
// pause reaches every one of them at once (cmdq.Client does it for each).
var local struct {
	mu      sync.Mutex
	byStore map[any][]*Processor
}

// storeKey returns st as a map key, or false when its type is not
// comparable.
func storeKey(st storage.Store) (any, bool) {
	if st == nil || !reflect.TypeOf(st).Comparable() {
		return nil, false
	}
	return st, true
}

// register adds p to the processors running in this process.
func (p *Processor) register() (unregister func()) {
	key, ok := storeKey(p.store)
	if !ok {
		return func() {}
	}
	local.mu.Lock()
	if local.byStore == nil {
		local.byStore = map[any][]*Processor{}
	}
	local.byStore[key] = append(local.byStore[key], p)
	local.mu.Unlock()
	return func() {
		local.mu.Lock()
		defer local.mu.Unlock()
		ps := local.byStore[key]
		for i, x := range ps {
			if x == p {
				ps = append(ps[:i:i], ps[i+1:]...)
				break
			}
		}
		if len(ps) == 0 {
			delete(local.byStore, key)
		} else {
			local.byStore[key] = ps
		}
	}
}

// Local returns the processors of this process that run (Run, RunFor) on
// store st now.
func Local(st storage.Store) []*Processor {
	key, ok := storeKey(st)
	if !ok {
		return nil
	}
	local.mu.Lock()
	defer local.mu.Unlock()
	return append([]*Processor(nil), local.byStore[key]...)
}

// MaxClockSkew is the difference between two machines' clocks the fast
// path's cancel checks allow for (2 s).
const MaxClockSkew = maxClockSkew

// FastPathAge is the oldest a first delivery of a command type with this
// lease may start its handler (since the issue) and still do it from its
// message without reading the command (the fast path): half the lease, and
// at least 2 s less than it; 0 for leases of 2 s and less.
func FastPathAge(lease time.Duration) time.Duration { return fastPathAge(lease) }
