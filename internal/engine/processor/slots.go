package processor

import "time"

// Handler slots: Concurrency for the whole processor, and MaxConcurrency
// for each command type that declares one (docs/processor.md, "Per-type
// concurrency").

// takeSlot waits for a handler slot for a message of cmdType (dequeued
// with visibility vis by a call sent at sent): first one of its type's
// slots, when the type has a MaxConcurrency, then one of the processor's.
//
// A message waiting for its type's slot is parked: it holds none of the
// processor's slots and does not count as held (so the poller goes on
// fetching messages of the other types), and at most MaxConcurrency
// messages of a type are parked at a time: one that finds as many parked
// already is released at once, invisible until about when it would have
// stopped waiting. When the session stops taking work, or a wait reaches
// the time the message's lease would need renewing (half of it), the
// message is released (visible again at once) and ok is false: a message
// is not hoarded by a processor that cannot start it. free gives the slots
// back.
func (p *Processor) takeSlot(s *session, k *keeper, cmdType string, sent time.Time, vis time.Duration) (free func(), ok bool) {
	deadline := sent.Add(vis / 2)
	qr := p.byName[k.queue]
	typed := p.typeSlots[cmdType]
	if typed != nil {
		select {
		case typed <- struct{}{}:
		default:
			if !p.park(qr, cmdType, cap(typed)) {
				p.releaseFor(s, k, max(p.until(deadline), 0))
				return nil, false
			}
			got, _ := p.waitSlot(s, typed, deadline)
			p.unpark(qr, cmdType)
			if !got {
				p.release(s, k)
				return nil, false
			}
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
