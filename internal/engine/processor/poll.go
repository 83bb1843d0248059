package processor

import (
	"math/bits"
	"math/rand/v2"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// prefetchHorizon: the processor holds, beyond its Concurrency, only the
// messages its handler slots start within this time at the average handler
// duration (500 ms), so what it holds it starts at once, and competing
// processors share a queue fairly.
const prefetchHorizon = 500 * time.Millisecond

// jitter spreads w upwards by up to PollJitter × w, never past
// MaxPollInterval: processors that started together drift apart while they
// back off, and an idle queue is polled exactly once per MaxPollInterval
// (60 dequeues an hour at the default of one minute).
func (p *Processor) jitter(w time.Duration) time.Duration {
	if p.cfg.PollJitter <= 0 || w <= 0 {
		return w
	}
	return min(w+time.Duration(rand.Float64()*p.cfg.PollJitter*float64(w)), p.cfg.MaxPollInterval)
}

// prefetch is how many messages the processor may hold beyond Concurrency:
// those its Concurrency slots start within prefetchHorizon at the average
// handler duration (HandlerDurationEstimate before the first), at most
// NewBatchThreshold; none after a waiting message had to be released, until
// a handler finishes.
func (p *Processor) prefetch() int {
	if p.overheld.Load() {
		// Messages waited so long for a slot that they were released:
		// the handlers are slower than the average says. No prefetch until
		// one finishes.
		return 0
	}
	avg := p.avgDuration()
	n := p.cfg.NewBatchThreshold
	if avg > 0 {
		n = min(n, int(float64(p.cfg.Concurrency)*float64(prefetchHorizon)/float64(avg)))
	}
	return max(n, 0)
}

// reserve waits until the processor may hold more messages and reserves up
// to BatchSize of them for one dequeue of qr: it holds at most Concurrency
// + prefetch messages (dequeued and not finished), and fetches when a full
// batch fits or a handler slot would otherwise stay idle. It returns 0 when
// the session stops taking work. With QueueWeights, weightedReserve
// decides instead (weights.go).
func (p *Processor) reserve(s *session, qr *queueRunner) int {
	if p.w != nil {
		return p.weightedReserve(s, qr)
	}
	for {
		p.holdMu.Lock()
		limit := p.cfg.Concurrency + p.prefetch()
		room := limit - p.held
		if room >= min(p.cfg.BatchSize, limit) || (p.held < p.cfg.Concurrency && room > 0) {
			n := min(p.cfg.BatchSize, room)
			p.held += n
			p.holdMu.Unlock()
			return n
		}
		p.holdMu.Unlock()
		select {
		case <-qr.capacity:
		case <-s.take.Done():
			return 0
		}
	}
}

// unreserve gives back n reserved (or held) message places of qr.
func (p *Processor) unreserve(qr *queueRunner, n int) {
	if n <= 0 {
		return
	}
	p.holdMu.Lock()
	p.held -= n
	if p.w != nil {
		p.w.qs[qr.wi].held -= n
	}
	p.holdMu.Unlock()
	for _, qr := range p.queues {
		select {
		case qr.capacity <- struct{}{}:
		default:
		}
	}
}

// holding reports whether qr has messages dequeued and not finished.
func (qr *queueRunner) holding() bool {
	qr.mu.Lock()
	defer qr.mu.Unlock()
	return qr.inflight > 0
}

// done marks one message of qr finished.
func (p *Processor) done(qr *queueRunner) {
	qr.mu.Lock()
	qr.inflight--
	qr.mu.Unlock()
	p.holdMu.Lock()
	p.busy--
	p.holdMu.Unlock()
	p.health.update(func(h *health) { h.inFlight-- })
	p.unreserve(qr, 1)
}

// poll is one queue's poller: it dequeues as many messages as the processor
// can start (see reserve), backs off while the queue is empty and dispatches
// each message. It dequeues again at once after a full batch, or when a
// wake-up (Notify) came while the last dequeue was out; wake-ups are
// coalesced (qr.wake holds one), so a stream of them costs at most one
// dequeue each, fewer when they arrive during a dequeue.
//
// A sharded queue (several storage queues) is polled in rounds of one
// dequeue per shard, in turn, so that every shard gets its turn however
// full another is (a flooded shard does not delay the others). Within a
// round the poller moves to the next shard at once while the round has
// brought messages; a round whose dequeues find nothing waits, as an
// empty poll does, before each next shard, so an idle queue costs one
// dequeue per wait however many shards it has. At the end of a round the
// wait is decided as for one queue's dequeue: at once after a full batch
// (or a wake-up), the minimum after messages, the backoff after nothing.
// A wake-up naming a shard (the enqueue path's) dequeues that shard first,
// as a round of its own; one naming the queue, or wake-ups naming several
// shards before the poller looked, start a round that visits every shard
// at once.
func (p *Processor) poll(s *session, qr *queueRunner) {
	interval := p.cfg.MinPollInterval
	busy := false // the last dequeue brought messages
	var r round
	rewoken := false // a wake-up ended the last wait (its token is spent)
	for {
		for {
			ok, reset := p.pulling()
			if ok {
				break
			}
			select {
			case <-reset:
			case <-s.take.Done():
				return
			}
		}
		if !p.roomToTake(s) {
			return
		}
		n := p.reserve(s, qr)
		if n == 0 {
			return
		}
		if !s.mayTake(p) {
			p.unreserve(qr, n)
			return
		}
		if !p.mayDequeue(s, qr, busy) {
			// Paused: no dequeue until it is resumed (control.go).
			p.unreserve(qr, n)
			if !p.whilePaused(s, qr) {
				return
			}
			busy = false
			continue
		}
		// This dequeue sees every message whose wake-up came before it is
		// sent: those wake-ups are spent. Wake-ups arriving from here on,
		// however many, leave one token: one follow-up dequeue (coalesced).
		woke := qr.spendWake() || rewoken
		rewoken = false
		shard := r.next(qr, woke)
		p.health.update(func(h *health) { h.polling++ })
		vis, sent := p.visibility(qr), p.now()
		var msgs []storage.Message
		var err error
		if qr.sq != nil {
			msgs, err = qr.sq.DequeueShard(s.ops, shard, n, vis)
		} else {
			msgs, err = qr.q.Dequeue(s.ops, n, vis)
		}
		p.health.update(func(h *health) { h.polling-- })
		p.dequeued(qr, n, len(msgs), err)
		p.unreserve(qr, n-len(msgs))
		busy = len(msgs) > 0
		now := p.now()
		var wait time.Duration
		full, more := r.done(qr, err, len(msgs), n)
		switch {
		case more:
			// A round with messages goes on to the next shard at once.
		case !full && r.idle():
			// An idle round: wait, as after an empty poll, before each shard.
			wait = p.jitter(interval)
			interval = min(2*interval, p.cfg.MaxPollInterval)
		case err != nil:
			if s.ops.Err() != nil {
				return
			}
			p.fault(s.ops, "dequeue", qr.name, "", err)
			wait = p.jitter(interval)
			interval = min(2*interval, p.cfg.MaxPollInterval)
		case !r.got:
			p.ok()
			wait = p.jitter(interval)
			interval = min(2*interval, p.cfg.MaxPollInterval)
		case full || qr.woken():
			// As many as asked: more are likely waiting (a burst); or a
			// wake-up came while the dequeue was out: look again at once.
			p.ok()
			interval = p.cfg.MinPollInterval
		default:
			// Fewer than asked and no wake-up since: the queue was empty
			// when the dequeue read it. Wait as after an empty poll rather
			// than paying for a second dequeue that would find nothing
			// (a wake-up, or the timer, brings the next one).
			p.ok()
			wait = p.jitter(p.cfg.MinPollInterval)
			interval = min(2*p.cfg.MinPollInterval, p.cfg.MaxPollInterval)
		}
		p.emit(model.Observation{Kind: model.ObservedPolled, Time: now, Queue: qr.name, Received: len(msgs), Err: err, Wait: wait})
		for _, m := range msgs {
			p.dispatch(s, qr, m, sent, vis)
		}
		if full && p.saturated() {
			// More work than free slots: the idle processors of the queue
			// in other processes take part (doorbell.go).
			p.ringPeers(qr)
		}
		if wait <= 0 {
			continue
		}
		if !p.waitFits(s, wait, now.Sub(sent)) {
			if !qr.holding() {
				return // idle time does not fit; run stops once every poller has
			}
			// Messages in hand: work through them, then look again (the
			// deadline check stops the run when the margin no longer fits).
		held:
			for qr.holding() {
				select {
				case <-qr.capacity:
				case <-qr.wake:
					rewoken = true
					break held
				case <-s.take.Done():
					return
				}
			}
			continue
		}
		t := p.cfg.Clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-qr.wake:
			interval = p.cfg.MinPollInterval
			rewoken = true
		case <-s.take.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

// spendWake drops a pending wake-up of qr, and reports whether there was
// one: the dequeue about to be sent covers it.
func (qr *queueRunner) spendWake() bool {
	select {
	case <-qr.wake:
		return true
	default:
		return false
	}
}

// round is a sharded queue's poller state (see poll): the shards the
// current round has still to dequeue and what its dequeues have found.
type round struct {
	cursor  int    // where the search for the next shard starts
	todo    uint64 // the shards the round has still to dequeue (bit i: shard i)
	visited int    // dequeues in this round
	got     bool   // a dequeue of the round brought messages
	full    bool   // one brought as many as asked
	err     bool   // one failed
	forced  bool   // woken: visit the round's shards at once
}

// allShards is the set of n shards.
func allShards(n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// next returns the shard to dequeue, starting a round if none is open. A
// wake-up adds the shards it named (every shard when it named none) to
// the round, opening one if none is open: a wake-up naming one shard when
// no round is open makes that shard a round of its own, and one arriving
// in the middle of a round never cuts off the shards the round has still
// to visit (a message whose wake-up was spent at the round's start would
// wait for the idle poll).
func (r *round) next(qr *queueRunner, woke bool) int {
	if qr.shards == 1 {
		*r = round{todo: 1}
		return 0
	}
	if woke {
		named := qr.hint.Swap(0)
		if named == 0 {
			named = allShards(qr.shards)
		}
		if r.todo == 0 {
			*r = round{cursor: bits.TrailingZeros64(named)}
		}
		r.todo |= named
		r.forced = true
	} else if r.todo == 0 {
		*r = round{cursor: r.cursor, todo: allShards(qr.shards)}
	}
	// The first shard still to do at or after the cursor, wrapping.
	rot := bits.RotateLeft64(r.todo, -r.cursor) & allShards(qr.shards)
	if rot == 0 { // the bits past the shards wrap to the low end
		rot = r.todo
		r.cursor = 0
	}
	r.cursor = (r.cursor + bits.TrailingZeros64(rot)) % qr.shards
	return r.cursor
}

// done records a dequeue's outcome (err, got of asked messages) of the
// shard next returned. full reports a round that ended with a full batch
// in it; more that the round goes on at once.
func (r *round) done(qr *queueRunner, err error, got, asked int) (full, more bool) {
	r.todo &^= 1 << r.cursor
	r.cursor = (r.cursor + 1) % qr.shards
	r.visited++
	r.got = r.got || got > 0
	r.full = r.full || got == asked
	r.err = r.err || err != nil
	if r.todo != 0 && err == nil {
		if r.got || r.forced {
			return false, true
		}
		return false, false // idle: the caller waits before the next shard
	}
	full = r.full
	r.todo, r.visited, r.forced = 0, 0, false
	r.got = r.got && !r.err
	return full, false
}

// idle reports a round in progress whose dequeues found nothing.
func (r *round) idle() bool { return r.visited > 0 && !r.got && !r.forced }

// woken reports whether a wake-up of qr is pending (it stays pending).
func (qr *queueRunner) woken() bool {
	return len(qr.wake) > 0
}

// dispatch starts handling one dequeued message (dequeued with visibility
// vis by a call sent at sent; its place is already reserved).
func (p *Processor) dispatch(s *session, qr *queueRunner, m storage.Message, sent time.Time, vis time.Duration) {
	// A handler is counted (s.wg) under hoMu, before Run closes intake
	// there and waits for the handlers: a dequeue that was out when the
	// session stopped taking work may return messages after that, and a
	// handler added then (from zero) would run unwaited-for.
	s.hoMu.Lock()
	if s.hoClosed {
		s.hoMu.Unlock()
		p.releaseLate(s, qr, m)
		return
	}
	s.wg.Add(1)
	s.hoMu.Unlock()
	p.markActive()
	p.holdMu.Lock()
	p.busy++
	p.holdMu.Unlock()
	qr.mu.Lock()
	qr.inflight++
	qr.mu.Unlock()
	p.health.update(func(h *health) { h.inFlight++ })
	s.spawn(func() {
		defer s.wg.Done()
		defer p.done(qr)
		p.handle(s, qr, m, sent, vis, false)
	})
}

// releaseLate makes visible again at once a message received after Run
// began waiting for the handlers: it is not started here, and its
// reserved place is given back (as done does for a handled one). The
// poller does it itself. It is best effort: Run cancels s.ops once the
// drain ends, and a release that comes after leaves the message to
// reappear when its dequeue's visibility ends. Cost: 1 UpdateVisibility.
func (p *Processor) releaseLate(s *session, qr *queueRunner, m storage.Message) {
	defer p.unreserve(qr, 1)
	s.counter.released.Add(1)
	if _, _, err := qr.q.UpdateVisibility(s.ops, m.ID, m.PopReceipt, 0); err != nil && !expected(err) {
		p.fault(s.ops, "release", qr.name, "", err)
	}
}

// spawn runs f on an idle handler goroutine of s, or on a new one. A
// handler goroutine waits for the next f once it has run one, until the
// session's handlers are cancelled (s.hard): a dispatch then reuses its
// grown stack instead of growing a new one (a delivery's storage reads
// and parameter decoding need tens of KiB, and growing a stack copies it,
// about 12 µs per command at 15,000 commands/s).
func (s *session) spawn(f func()) {
	select {
	case s.jobs <- f:
	default:
		go s.worker(f)
	}
}

// workerStackReserve is the stack a handler goroutine keeps in use while
// it waits for its next job (8 KiB). The garbage collector halves a
// goroutine's stack when less than a quarter of it is in use, so an idle
// worker's 32 KiB stack, grown by a delivery, was halved at every
// collection and grown again (copied) by the next delivery: about 15,000
// instructions per command (docs/performance.md). With a quarter kept in
// use, a stack of up to 32 KiB stays; a larger one (a deep handler) is
// halved back to 32 KiB.
const workerStackReserve = 8 << 10

func (s *session) worker(f func()) {
	var reserve [workerStackReserve]byte
	keepStack(&reserve)
	for {
		f()
		select {
		case f = <-s.jobs:
		case <-s.hard.Done():
			return
		}
	}
}

// keepStack keeps its argument (a worker's stack reserve) in the caller's
// frame.
//
//go:noinline
func keepStack(*[workerStackReserve]byte) {}
