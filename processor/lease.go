package processor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// errLeaseLost is the cancellation cause of a handler whose lease was lost.
var errLeaseLost = errors.New("processor: the message's lease was lost; another processor may run it")

// errLeaseExpiring is the cancellation cause when renewals kept failing and
// the lease is about to end.
var errLeaseExpiring = errors.New("processor: the message's lease is about to expire (renewals failed)")

// keeper owns one dequeued message's pop receipt and renews its lease at half
// time until stopped.
type keeper struct {
	p     *Processor
	q     storage.Queue
	queue string
	id    string // message ID
	cmdID string
	ctx   context.Context

	mu       sync.Mutex
	receipt  string
	expires  time.Time
	lease    time.Duration
	lost     bool
	stopped  bool
	onLost   func(cause error) // cancels the handler
	onRenew  func()            // first renewal: write the started event
	cmdType  string
	stopCh   chan struct{}
	doneCh   chan struct{}
	renewals int
	looping  bool
}

func newKeeper(p *Processor, ctx context.Context, qr *queueRunner, m storage.Message) *keeper {
	k := &keeper{p: p, q: qr.q, queue: qr.name, id: m.ID, ctx: ctx, receipt: m.PopReceipt,
		expires: m.NextVisibleAt, lease: time.Until(m.NextVisibleAt), stopCh: make(chan struct{}), doneCh: make(chan struct{})}
	return k
}

// start begins renewing at half of lease (the command type's lease).
func (k *keeper) start(lease time.Duration, cmdType string) {
	k.mu.Lock()
	k.lease, k.cmdType, k.looping = lease, cmdType, true
	k.mu.Unlock()
	go k.loop()
}

// safety is how long before the lease's end the handler is cancelled when
// renewals keep failing.
func safety(lease time.Duration) time.Duration {
	return min(lease/10, time.Second)
}

func (k *keeper) loop() {
	defer close(k.doneCh)
	k.mu.Lock()
	next := time.Now().Add(k.lease / 2)
	if until := time.Until(k.expires); until > 0 && until < k.lease {
		next = time.Now().Add(until / 2)
	}
	k.mu.Unlock()
	for {
		t := time.NewTimer(time.Until(next))
		select {
		case <-k.stopCh:
			t.Stop()
			return
		case <-t.C:
		}
		k.mu.Lock()
		if k.stopped || k.lost {
			k.mu.Unlock()
			return
		}
		receipt, lease := k.receipt, k.lease
		k.mu.Unlock()
		nr, nv, err := k.q.UpdateVisibility(k.ctx, k.id, receipt, lease)
		k.mu.Lock()
		if k.stopped {
			// Finished while renewing: keep the new receipt for nothing; the
			// final operation used the old one, or will use this one.
			if err == nil {
				k.receipt, k.expires = nr, nv
			}
			k.mu.Unlock()
			return
		}
		switch {
		case err == nil:
			k.receipt, k.expires = nr, nv
			k.renewals++
			first := k.renewals == 1
			onRenew := k.onRenew
			next = time.Now().Add(lease / 2)
			k.mu.Unlock()
			k.p.ok()
			if first && onRenew != nil {
				go onRenew()
			}
		case errors.Is(err, storage.ErrLeaseLost) || errors.Is(err, storage.ErrNotFound):
			k.lost = true
			onLost := k.onLost
			k.mu.Unlock()
			k.p.leaseLost(k.cmdType)
			k.p.cfg.Logger.Warn().Str("command", k.cmdID).Str("type", k.cmdType).Msg("cmdq processor: lease lost while running")
			if onLost != nil {
				onLost(errLeaseLost)
			}
			return
		default:
			expires := k.expires
			onLost := k.onLost
			k.mu.Unlock()
			if k.ctx.Err() != nil {
				return
			}
			k.p.fault(k.ctx, "renew lease", k.queue, k.cmdID, err)
			if !time.Now().Add(safety(lease)).Before(expires) {
				if onLost != nil {
					onLost(errLeaseExpiring)
				}
				return
			}
			next = time.Now().Add(max(lease/10, 50*time.Millisecond))
		}
	}
}

// stop ends renewals and returns the current receipt (after any renewal in
// progress finished) and whether the lease is still held.
func (k *keeper) stop() (receipt string, held bool) {
	k.mu.Lock()
	if !k.stopped {
		k.stopped = true
		close(k.stopCh)
	}
	looping := k.looping
	k.mu.Unlock()
	if looping {
		<-k.doneCh
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.receipt, !k.lost
}
