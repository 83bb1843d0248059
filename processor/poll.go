package processor

import (
	"math/rand/v2"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

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

// waitCapacity blocks until the queue's in-flight count is at most
// NewBatchThreshold. It returns false when the session stops taking work.
func (p *Processor) waitCapacity(s *session, qr *queueRunner) bool {
	for {
		qr.mu.Lock()
		n := qr.inflight
		qr.mu.Unlock()
		if n <= p.cfg.NewBatchThreshold {
			return true
		}
		select {
		case <-qr.capacity:
		case <-s.take.Done():
			return false
		}
	}
}

// done marks one message of qr finished.
func (p *Processor) done(qr *queueRunner) {
	qr.mu.Lock()
	qr.inflight--
	n := qr.inflight
	qr.mu.Unlock()
	p.health.update(func(h *health) { h.inFlight-- })
	if n <= p.cfg.NewBatchThreshold {
		select {
		case qr.capacity <- struct{}{}:
		default:
		}
	}
}

// poll is one queue's poller: it dequeues batches while there is capacity,
// backs off while the queue is empty and dispatches each message.
func (p *Processor) poll(s *session, qr *queueRunner) {
	interval := p.cfg.MinPollInterval
	for {
		if !p.waitCapacity(s, qr) {
			return
		}
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
		if !s.mayTake(p) {
			return
		}
		p.health.update(func(h *health) { h.polling++ })
		vis, sent := p.visibility(qr), time.Now()
		msgs, err := qr.q.Dequeue(s.ops, p.cfg.BatchSize, vis)
		p.health.update(func(h *health) { h.polling-- })
		now := time.Now()
		var wait time.Duration
		switch {
		case err != nil:
			if s.ops.Err() != nil {
				return
			}
			p.fault(s.ops, "dequeue", qr.name, "", err)
			wait = p.jitter(interval)
			interval = min(2*interval, p.cfg.MaxPollInterval)
		case len(msgs) == 0:
			p.ok()
			wait = p.jitter(interval)
			interval = min(2*interval, p.cfg.MaxPollInterval)
		default:
			p.ok()
			interval = p.cfg.MinPollInterval
		}
		p.cfg.Metrics.Polled(qr.name, err == nil && len(msgs) == 0)
		p.cfg.Metrics.PollInterval(qr.name, wait)
		if p.cfg.OnPoll != nil {
			p.cfg.OnPoll(PollEvent{Queue: qr.name, Time: now, Received: len(msgs), Err: err, Wait: wait})
		}
		for _, m := range msgs {
			p.dispatch(s, qr, m, sent, vis)
		}
		if wait <= 0 {
			continue
		}
		if s.timed && !time.Now().Add(wait+p.margin()).Before(s.finishBy) {
			return // idle time does not fit; run stops once every poller has
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-qr.wake:
			interval = p.cfg.MinPollInterval
		case <-s.take.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

// dispatch starts handling one dequeued message (dequeued with visibility
// vis by a call sent at sent).
func (p *Processor) dispatch(s *session, qr *queueRunner, m storage.Message, sent time.Time, vis time.Duration) {
	p.markActive()
	qr.mu.Lock()
	qr.inflight++
	qr.mu.Unlock()
	p.health.update(func(h *health) { h.inFlight++ })
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer p.done(qr)
		p.handle(s, qr, m, sent, vis)
	}()
}
