package processor

import (
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/storage"
)

// HandOff reserves a handler slot for the issue's own message of a command
// of cmdType about to be enqueued on queue (logical or storage name) by an
// Issuer in this process (issuer.IssuerOptions.HandOff; cmdq.Client
// wires it): nil unless this processor is running and taking work, polls
// that queue, handles the type, is not holding back (Flywheel), and has a
// free handler slot (fewer than Concurrency messages held). The Issuer
// enqueues the message invisible for the slot's Visibility (the type's
// lease) and hands it over with Take; the processor runs it like a
// dequeued message (renewals, delete, retry delay by UpdateVisibility),
// without a dequeue. Should the process die, the message becomes visible
// when that lease ends and any processor takes it (attempt 2: see
// docs/lifecycle.md, "In-process hand-off"). Config.NoHandOff turns it
// off.
func (p *Processor) HandOff(queue, cmdType string) issuer.HandOffSlot {
	if p.cfg.NoHandOff {
		return nil
	}
	qr := p.byName[queue]
	if qr == nil {
		return nil
	}
	def, ok := p.reg.Lookup(cmdType)
	if !ok || !def.Handled() || def.Queue != qr.name {
		return nil
	}
	if ok, _ := p.pulling(); !ok {
		return nil
	}
	if p.queuePaused(qr.name) || !p.typeSlotFree(cmdType) {
		return nil // paused, or the type runs as many handlers as it may
	}
	p.statsMu.Lock()
	s := p.current
	p.statsMu.Unlock()
	if s == nil {
		return nil
	}
	s.hoMu.Lock()
	defer s.hoMu.Unlock()
	if !s.hoOpen || s.hoClosed || !s.mayTake(p) {
		return nil
	}
	// A free handler slot: fewer messages being handled (dispatched, or
	// handed off) than Concurrency. Places a dequeue in flight reserved do
	// not count: what it brings waits for a slot as usual.
	p.holdMu.Lock()
	if p.busy >= p.cfg.Concurrency {
		p.holdMu.Unlock()
		return nil
	}
	p.busy++
	p.held++
	if p.w != nil {
		p.w.qs[qr.wi].held++
	}
	p.holdMu.Unlock()
	s.wg.Add(1) // Run waits for it (see session.closeHandOff)
	return &handOff{p: p, s: s, qr: qr, lease: p.leaseFor(cmdType)}
}

// handOff is a reserved slot (HandOff).
type handOff struct {
	p     *Processor
	s     *session
	qr    *queueRunner
	lease time.Duration
	once  sync.Once
}

func (h *handOff) Visibility() time.Duration { return h.lease }

// Take runs the handed-off message m as a delivery (its text is text; the
// Enqueue result carries none).
func (h *handOff) Take(m storage.Message, text string, sent time.Time) {
	h.once.Do(func() {
		p, s, qr := h.p, h.s, h.qr
		m.Text = text
		p.markActive()
		s.counter.handedOff.Add(1)
		qr.mu.Lock()
		qr.inflight++
		qr.mu.Unlock()
		p.health.update(func(hl *health) { hl.inFlight++ })
		s.spawn(func() {
			defer s.wg.Done()
			defer p.done(qr)
			p.handle(s, qr, m, sent, h.lease, true)
		})
	})
}

// Cancel gives the slot back.
func (h *handOff) Cancel() {
	h.once.Do(func() {
		h.p.holdMu.Lock()
		h.p.busy--
		h.p.holdMu.Unlock()
		h.p.unreserve(h.qr, 1)
		h.s.wg.Done()
	})
}

// closeHandOff ends hand-offs and dispatches to s: called before Run
// waits for s's handlers, so no handler is counted (s.wg.Add) once it
// waits; a dispatch after it releases its message (releaseLate).
func (s *session) closeHandOff() {
	s.hoMu.Lock()
	s.hoClosed = true
	s.hoMu.Unlock()
}
