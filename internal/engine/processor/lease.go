package processor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/clock"
	"github.com/cmdq-dev/cmdq/storage"
)

// errLeaseLost is the cancellation cause of a handler whose lease was lost.
var errLeaseLost = errors.New("processor: the message's lease was lost; another processor may run it")

// errLeaseExpiring is the cancellation cause when renewals kept failing and
// the lease is about to end.
var errLeaseExpiring = errors.New("processor: the message's lease is about to expire (renewals failed)")

// staleReceipt reports whether err is a queue call's answer to a pop
// receipt that is no longer the message's (Azure: 400 PopReceiptMismatch or
// 404 MessageNotFound; see storage/azure).
func staleReceipt(err error) bool {
	return errors.Is(err, storage.ErrLeaseLost) || errors.Is(err, storage.ErrNotFound)
}

// keeper owns one dequeued message's pop receipt and renews its lease at half
// time until stopped.
//
// When does a stale-receipt answer mean the lease was lost? A message's
// receipt changes only when it is dequeued (possible once its visibility
// timeout has passed) or updated or deleted with its current receipt (which
// only the holder knows). expires is a lower bound of the end of our lease by
// our own clock (the send time of the dequeue or renewal that set it, plus
// its visibility), so while now is before expires nobody else can have taken
// the message: a stale receipt or a missing message answered then comes from
// one of our own calls whose first try landed and whose answer was lost (the
// transport's retry met its effect). Only an answer that came back after
// expires can mean that someone else holds the message: that is a lost lease.
type keeper struct {
	p     *Processor
	q     storage.Queue
	queue string
	id    string // message ID
	cmdID string
	ctx   context.Context

	mu       sync.Mutex
	receipt  string
	expires  time.Time // our lease lasts at least until then (our clock)
	lease    time.Duration
	lost     bool // the lease ended: someone else may hold the message
	orphaned bool // our own renewal landed unanswered: the lease is ours until expires, its receipt unknown
	failing  bool // the last renewal failed (a fault): the lease may end at expires
	stopped  bool
	onLost   func(cause error)         // cancels the handler
	onRenew  func()                    // each renewal: write the started event if it is not written yet
	renewed  func(lease time.Duration) // each renewal: renew what follows the lease (a permit)
	gone     bool                      // a renewal found the lease lost or orphaned (lostCh is closed)
	goneCh   chan struct{}             // lostCh's channel, made when first asked for
	cmdType  string
	renewals int
	// The renewals run in the callback of timer (tick), not in a goroutine
	// of their own: a command that ends within half its lease, the common
	// case, costs one timer and no goroutine. timer is nil until start;
	// ticking is set while a tick runs; stop waits for it on idle (made by
	// stop, closed by the tick).
	timer   clock.Timer
	ticking bool
	idle    chan struct{}
}

// newKeeper takes over message m, dequeued with visibility vis by a call
// sent at sent.
func newKeeper(p *Processor, ctx context.Context, qr *queueRunner, m storage.Message, sent time.Time, vis time.Duration) *keeper {
	return &keeper{p: p, q: qr.q, queue: qr.name, id: m.ID, ctx: ctx, receipt: m.PopReceipt, expires: sent.Add(vis), lease: vis}
}

// endedBefore reports whether the lease could not be kept (lost, a
// renewal's receipt unknown, or the last renewal failed) and may have
// ended before t: someone else may have dequeued the message by then.
func (k *keeper) endedBefore(t time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return (k.lost || k.orphaned || k.failing) && !t.Before(k.expires)
}

// ours reports whether the lease still holds at t (see keeper).
func (k *keeper) ours(t time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return t.Before(k.expires)
}

// start begins renewing at half of lease (the command type's current
// lease). A lease longer than the one the message was dequeued with (a
// type whose lease grew) is taken at once with one UpdateVisibility.
func (k *keeper) start(lease time.Duration, cmdType string) {
	k.mu.Lock()
	extend := lease > k.lease
	k.lease, k.cmdType = lease, cmdType
	k.mu.Unlock()
	if extend {
		k.renew()
		k.mu.Lock()
		k.renewals = 0 // taking the grown lease is not the renewal that writes `started`
		k.mu.Unlock()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.timer != nil || k.stopped {
		return
	}
	next := k.p.now().Add(k.lease / 2)
	if until := k.p.until(k.expires); until > 0 && until < k.lease {
		next = k.p.now().Add(until / 2)
	}
	k.arm(next)
}

// arm schedules the next tick at next (under mu).
func (k *keeper) arm(next time.Time) {
	k.timer = k.p.cfg.Clock.AfterFunc(k.p.until(next), k.tick)
}

// safety is how long before the lease's end the handler is cancelled when
// renewals keep failing.
func safety(lease time.Duration) time.Duration {
	return min(lease/10, time.Second)
}

// renew extends the lease by one UpdateVisibility. It returns false when the
// keeper should stop renewing (the lease is lost, or orphaned, or the keeper
// stopped).
func (k *keeper) renew() (again bool) {
	k.mu.Lock()
	if k.stopped || k.lost || k.orphaned {
		k.mu.Unlock()
		return false
	}
	receipt, lease, expires := k.receipt, k.lease, k.expires
	k.mu.Unlock()
	// A renewal that has not answered shortly before the lease ends is no
	// use (and must not keep the handler running past it): give up then,
	// so that the loop cancels the handler in time.
	ctx, cancel := context.WithTimeout(k.ctx, k.p.until(expires.Add(-safety(lease)/2)))
	sent := k.p.now()
	nr, _, err := k.q.UpdateVisibility(ctx, k.id, receipt, lease)
	cancel()
	answered := k.p.now()
	k.mu.Lock()
	if k.stopped {
		// Finished while renewing: keep the new receipt for nothing; the
		// final operation used the old one, or will use this one.
		if err == nil {
			k.receipt, k.expires = nr, sent.Add(lease)
		}
		k.mu.Unlock()
		return false
	}
	switch {
	case err == nil:
		k.receipt, k.expires, k.failing = nr, sent.Add(lease), false
		k.renewals++
		onRenew, renewed := k.onRenew, k.renewed
		k.mu.Unlock()
		k.p.ok()
		if renewed != nil {
			go renewed(lease)
		}
		if onRenew != nil {
			// The first renewal writes started (a handler that runs that
			// long); later ones retry it if it failed, so a running
			// command does not look pending for longer than a lease.
			go onRenew()
		}
		return true
	case staleReceipt(err) && answered.Before(k.expires):
		// This renewal's first try landed and its answer was lost: the
		// message is ours until sent+lease, under a receipt we do not
		// know. The handler may go on until then; the message cannot be
		// renewed or deleted and reappears when that lease ends (a
		// completed command's message is then deleted without running).
		k.orphaned = true
		k.expires = sent.Add(lease)
		k.markGone()
		k.mu.Unlock()
		logCmd(k.p.cfg.Logger.Debug(), k.cmdID, k.p.traceIDOf(k.cmdID)).Str("type", k.cmdType).Msg("cmdq processor: a renewal landed but its answer was lost; keeping the lease until it ends")
		return false
	case staleReceipt(err):
		k.lost = true
		k.markGone()
		onLost := k.onLost
		k.mu.Unlock()
		k.p.leaseLost(k)
		logCmd(k.p.cfg.Logger.Warn(), k.cmdID, k.p.traceIDOf(k.cmdID)).Str("type", k.cmdType).Msg("cmdq processor: lease lost while running")
		if onLost != nil {
			onLost(errLeaseLost)
		}
		return false
	default:
		k.failing = true
		k.mu.Unlock()
		if k.ctx.Err() != nil {
			return false
		}
		k.p.fault(k.ctx, "renew lease", k.queue, k.cmdID, err)
		return true
	}
}

// tick is one turn of the renewals, in its timer's callback: it renews
// the lease, or ends the handler when the lease cannot be kept, and arms
// the next turn unless the keeper stopped or has nothing more to do.
func (k *keeper) tick() {
	k.mu.Lock()
	if k.stopped || k.lost {
		k.mu.Unlock()
		return
	}
	k.ticking = true
	lease, expires, orphaned, onLost := k.lease, k.expires, k.orphaned, k.onLost
	k.mu.Unlock()
	next, again := k.turn(lease, expires, orphaned, onLost)
	k.mu.Lock()
	k.ticking = false
	if again && !k.stopped {
		k.arm(next)
	}
	if k.idle != nil {
		close(k.idle)
		k.idle = nil
	}
	k.mu.Unlock()
}

// turn is tick's work, outside mu: it returns when the next turn is due
// (again false: none).
func (k *keeper) turn(lease time.Duration, expires time.Time, orphaned bool, onLost func(error)) (next time.Time, again bool) {
	if orphaned {
		// The lease cannot be renewed: end the handler before it ends.
		if onLost != nil {
			onLost(errLeaseExpiring)
		}
		return time.Time{}, false
	}
	renewals := k.renewalCount()
	if !k.renew() {
		k.mu.Lock()
		orphaned, expires = k.orphaned, k.expires
		k.mu.Unlock()
		if !orphaned {
			return time.Time{}, false
		}
		return expires.Add(-safety(lease)), true
	}
	if k.renewalCount() > renewals {
		return k.p.now().Add(lease / 2), true
	}
	// The renewal failed (a fault): retry soon, and give up shortly
	// before the lease would end.
	if !k.p.now().Add(safety(lease)).Before(expires) {
		if onLost != nil {
			onLost(errLeaseExpiring)
		}
		return time.Time{}, false
	}
	return k.p.now().Add(max(lease/10, 50*time.Millisecond)), true
}

// lostCh returns a channel closed when the lease is lost, or renewed
// under a receipt this keeper does not know (orphaned), by a renewal.
func (k *keeper) lostCh() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.goneCh == nil {
		k.goneCh = make(chan struct{})
		if k.gone {
			close(k.goneCh)
		}
	}
	return k.goneCh
}

// markGone records that a renewal found the lease lost or orphaned (under
// mu): lostCh's channel closes.
func (k *keeper) markGone() {
	k.gone = true
	if k.goneCh != nil {
		close(k.goneCh)
	}
}

// currentLease returns the lease the keeper renews.
func (k *keeper) currentLease() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}

// onRenewed sets what each successful renewal also does, with the lease
// it took (nil: nothing).
func (k *keeper) onRenewed(f func(lease time.Duration)) {
	k.mu.Lock()
	k.renewed = f
	k.mu.Unlock()
}

func (k *keeper) renewalCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.renewals
}

// stop ends renewals and returns the current receipt (after any renewal in
// progress finished) and whether the lease is still held with a known
// receipt (false when it was lost or orphaned: the message must not be
// touched).
func (k *keeper) stop() (receipt string, held bool) {
	k.mu.Lock()
	if !k.stopped {
		k.stopped = true
		if k.timer != nil {
			k.timer.Stop()
		}
	}
	var wait chan struct{}
	if k.ticking {
		if k.idle == nil {
			k.idle = make(chan struct{})
		}
		wait = k.idle
	}
	k.mu.Unlock()
	if wait != nil {
		<-wait
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.receipt, !k.lost && !k.orphaned
}

// settle classifies the answer err of a final queue call (delete, retry
// delay) made with the receipt stop returned and answered at answered. It
// reports whether the lease turned out lost (counted as such); a
// stale-receipt answer that came back while the lease was still ours is
// our own first try having landed, not a loss.
func (k *keeper) settle(err error, answered time.Time) (lost bool) {
	if !staleReceipt(err) || k.ours(answered) {
		return false
	}
	k.mu.Lock()
	k.lost = true
	k.mu.Unlock()
	k.p.leaseLost(k)
	return true
}
