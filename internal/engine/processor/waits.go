package processor

import "time"

// Waits of a message held outside a handler slot (a permit, a rate token,
// its order key's turn: permits.go, rates.go, order.go). The message's
// lease is renewed meanwhile (the keeper), so a wait spends no attempt; it
// ends early when the session stops taking work (the message is released,
// visible again at once) or the lease is lost (someone else holds it).

// waitEnd says how a wait ended.
type waitEnd int

const (
	waitCame    waitEnd = iota // what it waited for came: the turn, or the time
	waitWoken                  // the other channel given closed
	waitStopped                // the session stopped taking work; the message is released
	waitLost                   // the message's lease was lost
)

// awaitTurn waits to put a token into turn (a channel of capacity one:
// one waiting message at a time tries), or until woken closes (nil:
// never).
func (p *Processor) awaitTurn(s *session, k *keeper, turn chan struct{}, woken <-chan struct{}) waitEnd {
	select {
	case turn <- struct{}{}:
		return waitCame
	case <-woken:
		return waitWoken
	case <-s.take.Done():
		p.release(s, k)
		return waitStopped
	case <-k.lostCh():
		return waitLost
	}
}

// pause waits d, or until woken closes (nil: never).
func (p *Processor) pause(s *session, k *keeper, d time.Duration, woken <-chan struct{}) waitEnd {
	t := p.cfg.Clock.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-t.C():
		return waitCame
	case <-woken:
		return waitWoken
	case <-s.take.Done():
		p.release(s, k)
		return waitStopped
	case <-k.lostCh():
		return waitLost
	}
}
