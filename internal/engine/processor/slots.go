package processor

import "time"

// Handler slots: Concurrency for the whole processor, and MaxConcurrency
// for each command type that declares one (docs/processor.md, "Per-type
// concurrency").

// takeSlot waits for a handler slot for a message of cmdType (dequeued
// with visibility vis by a call sent at sent): first one of its type's
// slots, when the type has a MaxConcurrency (takeTypeSlot; typeHeld: the
// caller took it already), then one of the processor's.
//
// A message waiting for one of the processor's slots (handlers slower
// than the prefetch expected) is released when the wait reaches the time
// its lease would need renewing (half of it, from sent or from the end of
// a wait for its type's slot): a message is not hoarded by a processor
// whose handlers are all busy. free gives the slots back, the type's too
// when the caller took it.
func (p *Processor) takeSlot(s *session, k *keeper, cmdType string, sent time.Time, vis time.Duration, typeHeld bool) (free func(), ok bool) {
	deadline := sent.Add(vis / 2)
	qr := p.byName[k.queue]
	typed := p.typeSlots[cmdType]
	if typed != nil && !typeHeld {
		waited, ok := p.takeTypeSlot(s, k, cmdType)
		if !ok {
			return nil, false
		}
		if waited {
			deadline = p.now().Add(k.currentLease() / 2)
		}
	}
	got, late := true, false
	if p.w != nil {
		// QueueWeights: the slot goes by the queues' turns (weights.go).
		got, late = p.weightedSlot(s, qr, deadline)
	} else {
		select {
		case p.sem <- struct{}{}:
		default:
			got, late = p.waitSlot(s, p.sem, deadline)
		}
	}
	if !got {
		if late {
			// Handlers are slower than the average says: no prefetch
			// until one finishes.
			p.overheld.Store(true)
		}
		if typed != nil {
			<-typed
		}
		p.release(s, k)
		return nil, false
	}
	return func() {
		if p.w != nil {
			p.weightedFree(qr)
		} else {
			<-p.sem
		}
		if typed != nil {
			<-typed
		}
	}, true
}

// takeTypeSlot takes one of cmdType's MaxConcurrency slots (the type has
// a cap), waiting for one when they are all taken (waited).
//
// A message waiting for its type's slot holds none of the processor's
// slots and keeps its lease (the keeper renews it): it is never released
// or put back for the wait, as either would count a dequeue toward the
// poison ceiling without an attempt (a backlog of a capped type was
// poisoned unrun). Up to typeParkLimit such messages of a type are
// parked: not counted as held, so the poller goes on fetching (the other
// types' messages start at once); past it a message waits counted as
// held, and the poller's prefetch bound then stops fetching, as for a
// permit (permits.go). ok is false when the session stopped taking work
// (the message is released, visible again at once) or the lease was lost.
func (p *Processor) takeTypeSlot(s *session, k *keeper, cmdType string) (waited, ok bool) {
	typed := p.typeSlots[cmdType]
	select {
	case typed <- struct{}{}:
		return false, true
	default:
	}
	qr := p.byName[k.queue]
	parked := p.park(qr, cmdType, p.typeParkLimit())
	end := p.awaitTurn(s, k, typed, nil)
	if parked {
		p.unpark(qr, cmdType)
	}
	return true, end == waitCame
}

// typeParkLimit is how many messages of one capped type may wait for its
// slots parked (2 × Concurrency, as for a permit).
func (p *Processor) typeParkLimit() int { return 2 * p.cfg.Concurrency }

// freeTypeSlot gives back one of cmdType's slots taken by takeTypeSlot.
func (p *Processor) freeTypeSlot(cmdType string) { <-p.typeSlots[cmdType] }

// waitSlot waits for a place in slots until deadline or until the session
// stops taking work; late says the deadline passed.
func (p *Processor) waitSlot(s *session, slots chan struct{}, deadline time.Time) (got, late bool) {
	t := p.cfg.Clock.NewTimer(p.until(deadline))
	defer t.Stop()
	select {
	case slots <- struct{}{}:
		return true, false
	case <-s.take.Done():
		return false, false
	case <-t.C():
		return false, true
	}
}

// park notes a message of cmdType (on qr) that waits for one of its type's slots,
// unless limit of them wait already (false). A parked message is not held
// and holds no handler slot: the pollers may fetch in its place.
func (p *Processor) park(qr *queueRunner, cmdType string, limit int) bool {
	p.holdMu.Lock()
	if p.parked[cmdType] >= limit {
		p.holdMu.Unlock()
		return false
	}
	p.parked[cmdType]++
	p.held--
	p.busy--
	if p.w != nil {
		p.w.qs[qr.wi].held--
	}
	p.holdMu.Unlock()
	for _, qr := range p.queues {
		select {
		case qr.capacity <- struct{}{}:
		default:
		}
	}
	return true
}

// unpark ends a park: the message is held again (it runs, or it is
// released and then finished as any held message is).
func (p *Processor) unpark(qr *queueRunner, cmdType string) {
	p.holdMu.Lock()
	p.parked[cmdType]--
	p.held++
	p.busy++
	if p.w != nil {
		p.w.qs[qr.wi].held++
	}
	p.holdMu.Unlock()
}

// typeSlotFree reports whether a handler of cmdType could start now as far
// as its type's MaxConcurrency goes (the in-process hand-off asks).
func (p *Processor) typeSlotFree(cmdType string) bool {
	typed := p.typeSlots[cmdType]
	return typed == nil || len(typed) < cap(typed)
}
