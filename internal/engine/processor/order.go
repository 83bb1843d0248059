package processor

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/storage"
)

// Order keys (docs/lifecycle.md, "Order keys"): the commands issued with
// one order key run one at a time, in issue order, whatever their types.
// Each has a place in its key (shared.AppendOrder, at the issue); the
// lowest place not yet final is the key's head, the only one that may
// run. A delivery of another command of the key gives its handler slot
// (and permit) back and waits, holding its message (the keeper renews the
// lease, so no attempt is spent), until it is the head: it reads the head
// again when a command of the key leaves it in this process, when
// another process says one left (a permit wake of the queue), or after a
// backoff from orderRetryMin to orderRetryMax (one waiting delivery per
// key and process reads the head at a time, and tells the one it finds
// is the head when that one waits here too). A head that stays the
// same for orderCheckAfter is looked at: a command that is final (its
// leave was cut short) or was never stored (its issue failed after it
// joined) is taken out of the key.
//
// Storage calls: one query per start of a command of a key (is it the
// head?), one batch when it becomes final (its leave); while waiting,
// one query per retry and a point read of a head that stays.

const (
	orderRetryMin   = 100 * time.Millisecond
	orderRetryMax   = 2 * time.Second
	orderCheckAfter = 2 * time.Second
	// orderGhostAfter: a head whose command is not stored this long after
	// it joined its key is an issue that failed after joining.
	orderGhostAfter = time.Minute
)

// orderWait is what a delivery of a command waits for: its turn in its
// order key.
type orderWait struct {
	key, id, queue string
	seq            int64
	head           shared.OrderHead
	parked         bool // parked by deliver (park): awaitOrder unparks it
}

// orderHopDelay is how long a waiting message that finds as many waiting
// in its process already (orderParkLimit) is put back for: an eighth of
// its command's age (a long wait so far says a long backlog ahead),
// 500 ms to 10 s, ±20 %.
func orderHopDelay(issued time.Time) time.Duration {
	d := min(max(time.Since(issued)/8, 500*time.Millisecond), 10*time.Second)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// orderParkLimit is the most deliveries a process keeps waiting for their
// order keys' heads: 4 × Concurrency, at least 64. Each renews its
// message's lease (one call per half lease).
func (p *Processor) orderParkLimit() int { return max(4*p.cfg.Concurrency, 64) }

// orderGates are the waits of this processor, by order key.
type orderGates struct {
	mu sync.Mutex
	by map[string]*orderGate
}

// orderGate is one order key's waits here.
type orderGate struct {
	n    int           // deliveries waiting (guarded by orderGates.mu)
	turn chan struct{} // cap 1: the waiting delivery that reads the head
	poke chan struct{} // closed (and replaced) when a command of the key leaves here
	// heads: each waiting delivery's channel, by command ID, closed when
	// the delivery that reads the head finds that command is the head
	// (guarded by orderGates.mu).
	heads map[string]chan struct{}
}

// enter registers a delivery of command id waiting for key's head; its
// channel is closed when another waiting delivery finds id is the head.
func (o *orderGates) enter(key, id string) (*orderGate, chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.by == nil {
		o.by = map[string]*orderGate{}
	}
	g := o.by[key]
	if g == nil {
		g = &orderGate{turn: make(chan struct{}, 1), poke: make(chan struct{}), heads: map[string]chan struct{}{}}
		o.by[key] = g
	}
	g.n++
	me := make(chan struct{})
	g.heads[id] = me
	return g, me
}

func (o *orderGates) exit(key, id string, g *orderGate) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(g.heads, id)
	if g.n--; g.n == 0 {
		delete(o.by, key)
	}
}

// headFound tells the delivery of command id waiting here, if any, that
// it is its key's head.
func (o *orderGates) headFound(g *orderGate, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ch := g.heads[id]; ch != nil {
		close(ch)
		delete(g.heads, id)
	}
}

func (o *orderGates) poked(g *orderGate) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return g.poke
}

// wake wakes the waits of key here; false when there are none.
func (o *orderGates) wake(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	g := o.by[key]
	if g == nil {
		return false
	}
	close(g.poke)
	g.poke = make(chan struct{})
	return true
}

// wakeAll wakes every wait here (a permit wake: another process's command
// left a key, which one is not said).
func (o *orderGates) wakeAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, g := range o.by {
		close(g.poke)
		g.poke = make(chan struct{})
	}
}

// orderTurn reads rec's order key's head: nil when rec is the head (it
// may run), else what to wait for. A command that has no place in its key
// (it left when it was poisoned, and an operator requeued it) joins it
// again at its end.
func (p *Processor) orderTurn(s *session, qr *queueRunner, rec *record.Record) (*orderWait, error) {
	head, ok, err := p.st.ReadOrderHead(s.ops, rec.OrderKey)
	if err != nil {
		return nil, err
	}
	if ok && head.Command == rec.ID {
		return nil, nil
	}
	seq := rec.OrderSeq
	if !ok || head.Seq > seq {
		// Not in the key (its place is before the head's, or the key is
		// empty): join it again.
		if seq, err = p.st.AppendOrder(s.ops, rec.OrderKey, qr.name, rec.ID, rec.Type); err != nil {
			return nil, err
		}
		if head, ok, err = p.st.ReadOrderHead(s.ops, rec.OrderKey); err != nil {
			return nil, err
		}
		if !ok || head.Command == rec.ID {
			return nil, nil
		}
	}
	return &orderWait{key: rec.OrderKey, id: rec.ID, queue: qr.name, seq: seq, head: head}, nil
}

// awaitOrder waits until w's command is its key's head (see the top of
// this file), holding its message but no handler slot. false: the session
// stopped taking work (the message is released) or the lease was lost.
func (p *Processor) awaitOrder(s *session, qr *queueRunner, k *keeper, w *orderWait) bool {
	g, me := p.order.enter(w.key, w.id)
	defer p.order.exit(w.key, w.id, g)
	if w.parked {
		defer p.unpark(qr, orderParkKey)
	}
	switch p.awaitTurn(s, k, g.turn, me) {
	case waitCame:
	case waitWoken:
		return true // the delivery that reads the head found it is this one
	default:
		return false
	}
	defer func() { <-g.turn }()
	backoff := orderRetryMin
	head, since, checked := w.head, time.Now(), time.Time{}
	for {
		poke := p.order.poked(g)
		switch p.pause(s, k, backoff, poke) {
		case waitCame:
			backoff = min(2*backoff, orderRetryMax)
		case waitWoken:
			backoff = orderRetryMin
		default:
			return false
		}
		cur, ok, err := p.st.ReadOrderHead(s.ops, w.key)
		switch {
		case err != nil:
			if s.ops.Err() != nil {
				return false
			}
			p.fault(s.ops, "read an order key's head", w.queue, w.id, err)
			continue
		case !ok || cur.Command == w.id || cur.Seq > w.seq:
			// Its turn (or it is no longer in the key: the delivery finds
			// out and joins again).
			return true
		case cur.Seq != head.Seq:
			// Another command's turn: when it waits here, tell it.
			p.order.headFound(g, cur.Command)
			head, since, checked = cur, time.Now(), time.Time{}
			continue
		}
		p.order.headFound(g, cur.Command)
		if time.Since(since) >= orderCheckAfter && time.Since(checked) >= orderCheckAfter {
			checked = time.Now()
			if p.clearHead(s.ops, w.key, cur) {
				backoff = orderRetryMin
			}
		}
	}
}

// orderParkKey is the parked count of deliveries waiting for their order
// key's head (park), apart from those waiting for a slot or a permit.
const orderParkKey = "\x00order"

// clearHead looks at head, a head that stays: when its command is final
// (and a lease has passed since its last write, lastWrite, or it was never
// delivered: headMayLeave), or was never stored though it joined long
// ago, it is taken out of the key (true). One point read, and a batch
// when it leaves.
func (p *Processor) clearHead(ctx context.Context, key string, head shared.OrderHead) bool {
	rec, err := p.st.Load(ctx, head.Command)
	switch {
	case err == nil && !headMayLeave(rec.Status, p.since(lastWrite(rec)), p.leaseFor(rec.Type)):
		return false
	case err == nil, errors.Is(err, model.ErrExpired):
	case errors.Is(err, storage.ErrNotFound) || errors.Is(err, model.ErrNotFound):
		if p.now().Sub(head.Since) < orderGhostAfter {
			return false
		}
	default:
		return false
	}
	if err := p.st.LeaveOrder(ctx, key, head.Seq, head.Command); err != nil {
		return false
	}
	p.cfg.Logger.Info().Str("command", head.Command).Msg("cmdq processor: took a command that is final, or was never stored, out of its order key")
	return true
}

// lastWrite is when rec's last write happened: its outcome's time, or
// when storage says the row's last write landed if that is later (a
// batch that storage held lands after its writer decided; a handler of
// the command that another delivery runs learns of the outcome only from
// the landed row).
func lastWrite(rec *record.Record) time.Time {
	if rec.WrittenAt.After(rec.Status.UpdatedAt) {
		return rec.WrittenAt
	}
	return rec.Status.UpdatedAt
}

// headMayLeave reports whether a head whose command has status st, last
// written ago, may be taken out of its key by a delivery waiting for it.
// Not before it is final; and a final head that its own delivery did not
// take out — cancelled or discarded, or completed or poisoned by an
// outcome that landed after its lease ended (or by a process that died
// before it left) — only a lease (lease) and maxClockSkew after its last
// write: a handler of it that another delivery may be running learns of
// the outcome at its next lease renewal and ends within a lease, so the
// next command never overlaps it. A command that was never delivered
// leaves at once.
func headMayLeave(st model.Status, ago, lease time.Duration) bool {
	if !st.State.Final() {
		return false
	}
	return ago >= lease+maxClockSkew || neverDelivered(st)
}

// neverDelivered reports whether st, final, is a command no handler can
// have run: it has no attempt and was due (RunAt, from its creation) well
// after it became final. Its message was invisible until then (the
// storage service's clock), and no processor takes a command that is not
// due by its own clock (at most maxClockSkew off, as is the clock of the
// process that cancelled it), so no delivery of it can have started — a
// cancelled scheduled head hands its key on at once instead of a lease
// after the cancel.
func neverDelivered(st model.Status) bool {
	return st.Attempts == 0 && st.RunAt.After(st.UpdatedAt.Add(2*maxClockSkew))
}

// leaveOrder takes rec, final, out of its order key (one batch) and wakes
// whoever waits for the key: a delivery here, or else the other
// processors of its queue (a permit wake). A leave that fails is logged:
// a waiting delivery clears the head (clearHead).
func (p *Processor) leaveOrder(s *session, rec *record.Record) {
	if rec.OrderKey == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ops), 10*time.Second)
	err := p.st.LeaveOrder(ctx, rec.OrderKey, rec.OrderSeq, rec.ID)
	cancel()
	if err != nil {
		p.cfg.Logger.Warn().Err(err).Str("command", rec.ID).Msg("cmdq processor: a final command did not leave its order key; the next command's delivery takes it out")
		return
	}
	if !p.order.wake(rec.OrderKey) {
		if ring := p.cfg.Doorbell.RingPermit; ring != nil {
			go ring(rec.Queue)
		}
	}
}
