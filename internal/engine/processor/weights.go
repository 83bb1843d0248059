package processor

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

// Queue weights (Config.QueueWeights; docs/processor.md, "Queue
// weights"): stride scheduling of the handler slots between the queues a
// processor polls.
//
// Every queue has a pass, its place in virtual time; a start of one of
// its messages moves its pass on by its stride, 1/weight of a round (in a
// round every queue starts its weight in messages). A free handler slot
// goes to the message waiting the longest of the queue whose effective
// pass is the lowest (ties: the heavier queue, then the first by name)
// among the queues with a message waiting for a slot: a queue with none
// lends its turns to the others (work-conserving). A queue that comes
// back after a while without waiting messages is at most one round
// behind the virtual time (the highest effective pass a start went to),
// so an idle queue does not bank its turns: its effective pass is
// max(pass, vt − 1 round). The credit lets a queue whose dequeue was out
// when its turn came catch up on the turns it missed (up to its weight in
// starts).
//
// Under saturation the starts follow the weights exactly over time, and a
// queue q that always has a message waiting waits for at most
// Σ_{r≠q} (w_r + ⌊w_r/w_q⌋ + 1) starts of the other queues between two of
// its own, or from its arrival to its first (gapBound; 20 for the
// lightest of 6:3:1). Proof (in rounds): after q started at effective
// pass p, the virtual time stays at most p + 1/w_q until q's next start
// (every start goes to the lowest effective pass, q's being p + 1/w_q),
// so every start of another queue r in between is at an effective pass
// in [p − 1, p + 1/w_q], its starts at least 1/w_r apart: at most w_r +
// ⌊w_r/w_q⌋ + 1 of them. (An arriving q's effective pass is in [vt − 1,
// vt + 1/w_q]: the same.) TestWeightedLendsAndBounds reaches the bound.
//
// Messages are in hand for a queue's turn because each queue dequeues
// for itself (places):
//   - its share of the prefetch: the messages it holds waiting for a slot
//     are at most prefetch × its weight / the weights of the queues that
//     have ready work (their last dequeue was full), fetched as one batch
//     when that many fit, so they start within the prefetch horizon at
//     the queue's share of the starts;
//   - and places for the slots it wins next, by the same stride order:
//     slots no held message takes (every queue drained, or no prefetch),
//     and with a prefetch, the next slot to free when the queue would get
//     it (a light queue whose share of the prefetch is under one
//     message).
//
// Without a prefetch (slow handlers) a message is held only for a free
// slot, as without weights, so the slower start of a light queue never
// holds its messages past their lease.
//
// The state is guarded by Processor.holdMu.

// Passes are integers, exact: one round (pass unit 1) is round, the
// least common multiple of the weights (at most maxRound; beyond it the
// strides are rounded down), and a queue's stride is round / its weight.
// The credit is one round. Passes are moved back together (rebase) before
// they could overflow.
const (
	maxRound = 1 << 32
	rebaseAt = 1 << 60
)

// weighted is the slot scheduler of a processor with QueueWeights.
type weighted struct {
	slots int       // free handler slots
	round int64     // one round in pass units: the credit
	vt    int64     // virtual time: the highest effective pass a start went to
	qs    []*wqueue // the processor's queues, in p.queues order (by name)
}

// wqueue is one queue's state in weighted.
type wqueue struct {
	name    string
	weight  int
	stride  int64 // round/weight
	pass    int64 // the virtual time of its next start
	held    int   // places held for it: reserved for a dequeue, or its messages in hand and not finished (not parked)
	started int   // its messages holding a handler slot
	waiting []chan struct{}
	wanting bool // its poller waits for places to dequeue into
	fresh   bool // its poller has not looked for places yet this session (it is about to)
	ready   bool // its last dequeue brought as many messages as it asked for
}

// newWeighted returns the scheduler of queues (sorted) with weights (a
// queue left out weighs 1) and concurrency handler slots.
func newWeighted(queues []string, weights map[string]int, concurrency int) *weighted {
	w := &weighted{slots: concurrency, round: 1}
	for _, q := range queues {
		n := weights[q]
		if n <= 0 {
			n = 1
		}
		w.qs = append(w.qs, &wqueue{name: q, weight: n, ready: true})
		if w.round <= maxRound {
			w.round = lcm(w.round, int64(n))
		}
	}
	w.round = min(w.round, maxRound)
	for _, q := range w.qs {
		q.stride = w.round / int64(q.weight)
	}
	return w
}

func lcm(a, b int64) int64 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// eff is queue i's effective pass.
func (w *weighted) eff(i int) int64 { return max(w.qs[i].pass, w.vt-w.round) }

// before reports whether a queue at effective pass pa (index a) goes
// before one at pb (index b).
func (w *weighted) before(a int, pa int64, b int, pb int64) bool {
	if pa != pb {
		return pa < pb
	}
	if wa, wb := w.qs[a].weight, w.qs[b].weight; wa != wb {
		return wa > wb
	}
	return a < b
}

// next returns the queue whose waiting message gets the next free slot,
// or -1 when no message waits.
func (w *weighted) next() int {
	best, bp := -1, int64(0)
	for i, q := range w.qs {
		if len(q.waiting) == 0 {
			continue
		}
		if p := w.eff(i); best < 0 || w.before(i, p, best, bp) {
			best, bp = i, p
		}
	}
	return best
}

// start moves queue i's pass on for one start (and the virtual time).
func (w *weighted) start(i int) {
	p := w.eff(i)
	w.vt = max(w.vt, p)
	w.qs[i].pass = p + w.qs[i].stride
	w.qs[i].started++
	if w.vt > rebaseAt {
		base := w.vt - w.round
		for _, q := range w.qs {
			q.pass = max(q.pass-base, 0)
		}
		w.vt -= base
	}
}

// grant gives the free slots to the waiting messages, in stride order,
// and reports whether it gave any.
func (w *weighted) grant() bool {
	granted := false
	for w.slots > 0 {
		i := w.next()
		if i < 0 {
			break
		}
		q := w.qs[i]
		ch := q.waiting[0]
		q.waiting = q.waiting[1:]
		w.start(i)
		w.slots--
		close(ch)
		granted = true
	}
	return granted
}

// free gives back a slot one of queue i's messages held.
func (w *weighted) free(i int) {
	w.qs[i].started--
	w.slots++
}

// withdraw takes a message's wait (ch) off queue i; false when it was
// granted a slot meanwhile.
func (w *weighted) withdraw(i int, ch chan struct{}) bool {
	q := w.qs[i]
	for j, c := range q.waiting {
		if c == ch {
			q.waiting = slices.Delete(q.waiting, j, j+1)
			return true
		}
	}
	return false
}

// places returns how many messages queue i may dequeue now (0: none),
// with a prefetch of prefetch messages (beyond the slots), concurrency
// slots and batches of at most batch (see above): its share of the
// prefetch when it has no message waiting for a slot; else the places of
// the free slots no message in hand will take that it wins, in stride
// order after the starts of the messages in hand; else, with a prefetch,
// one place for the next slot to free when that is its turn.
func (w *weighted) places(i, prefetch, concurrency, batch int) int {
	q := w.qs[i]
	unstarted := max(q.held-q.started, 0)
	if prefetch > 0 {
		weights := 0
		for j, r := range w.qs {
			if r.ready || j == i {
				weights += r.weight
			}
		}
		quota := prefetch * q.weight / weights
		if room := quota - unstarted; quota > 0 && room >= min(batch, quota) {
			return min(batch, room)
		}
	}
	idle := concurrency
	for _, r := range w.qs {
		idle -= r.held
	}
	if idle > 0 {
		return w.wins(i, min(idle, batch*len(w.qs)), batch)
	}
	if prefetch == 0 || unstarted > 0 {
		return 0
	}
	for j, r := range w.qs {
		if j != i && (r.held > r.started || r.wanting || r.fresh) && w.before(j, w.eff(j), i, w.eff(i)) {
			return 0
		}
	}
	return 1
}

// wins returns how many of f free slots queue i would get (at most
// limit) if the queues waiting to dequeue (i among them, and those whose
// pollers are about to look at the start of a session) took them in
// stride order, after the starts of the messages every queue has in hand.
// (Without the fresh pollers, the first poller of a session to look
// would take every free slot.)
func (w *weighted) wins(i, f, limit int) int {
	pass := make([]int64, len(w.qs))
	for j, r := range w.qs {
		pass[j] = w.eff(j) + int64(max(r.held-r.started, 0))*r.stride
	}
	won := 0
	for range f {
		best := -1
		for j, r := range w.qs {
			if (j == i || r.wanting || r.fresh) && (best < 0 || w.before(j, pass[j], best, pass[best])) {
				best = j
			}
		}
		pass[best] += w.qs[best].stride
		if best == i {
			if won++; won >= limit {
				break
			}
		}
	}
	return won
}

// gapBound returns the most starts of the other queues between two starts
// of queue i while i always has a message waiting (see above).
func (w *weighted) gapBound(i int) int {
	n := 0
	for j, r := range w.qs {
		if j != i {
			n += r.weight + r.weight/w.qs[i].weight + 1
		}
	}
	return n
}

// UnknownWeights returns the error (wrapping ErrInvalidConfig) for
// weights (Config.QueueWeights) naming queues that no registered or
// declared type of reg routes to, or nil.
func UnknownWeights(weights map[string]int, reg *registry.Registry) error {
	known := map[string]bool{}
	for _, t := range reg.Types() {
		if q, ok := reg.QueueOf(t); ok {
			known[q] = true
		}
	}
	var unknown []string
	for _, q := range slices.Sorted(maps.Keys(weights)) {
		if !known[q] {
			unknown = append(unknown, q)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	names := "none"
	if len(known) > 0 {
		names = strings.Join(slices.Sorted(maps.Keys(known)), ", ")
	}
	return fmt.Errorf("%w: QueueWeights: weights for unknown queues %s: no registered or declared type routes to them (the queues known: %s); register or declare the types first, or leave these queues out",
		ErrInvalidConfig, strings.Join(unknown, ", "), names)
}

// weightedReserve is reserve with QueueWeights: it waits until queue qr
// may dequeue (weighted.places) and reserves the places; 0 when the
// session stops taking work.
func (p *Processor) weightedReserve(s *session, qr *queueRunner) int {
	q := p.w.qs[qr.wi]
	for {
		p.holdMu.Lock()
		q.fresh = false
		n := p.w.places(qr.wi, p.prefetch(), p.cfg.Concurrency, p.cfg.BatchSize)
		if n > 0 {
			q.wanting = false
			q.held += n
			p.held += n
			p.holdMu.Unlock()
			p.kick() // the others' turns changed
			return n
		}
		q.wanting = true
		p.holdMu.Unlock()
		select {
		case <-qr.capacity:
		case <-s.take.Done():
			p.holdMu.Lock()
			q.wanting = false
			p.holdMu.Unlock()
			return 0
		}
	}
}

// weightedBegin marks every queue's poller about to look for places, at
// the start of a session (before they run).
func (p *Processor) weightedBegin() {
	if p.w == nil {
		return
	}
	p.holdMu.Lock()
	for _, q := range p.w.qs {
		q.fresh = true
	}
	p.holdMu.Unlock()
}

// weightedSlot waits for a handler slot for a message of qr, in stride
// order, until deadline or until the session stops taking work; late says
// the deadline passed.
func (p *Processor) weightedSlot(s *session, qr *queueRunner, deadline time.Time) (got, late bool) {
	ch := make(chan struct{})
	p.holdMu.Lock()
	p.w.qs[qr.wi].waiting = append(p.w.qs[qr.wi].waiting, ch)
	granted := p.w.grant()
	p.holdMu.Unlock()
	if granted {
		p.kick()
	}
	select {
	case <-ch:
		return true, false
	default:
	}
	t := p.cfg.Clock.NewTimer(p.until(deadline))
	defer t.Stop()
	select {
	case <-ch:
		return true, false
	case <-s.take.Done():
	case <-t.C():
		late = true
	}
	p.holdMu.Lock()
	if !p.w.withdraw(qr.wi, ch) {
		// Granted meanwhile: give the slot on.
		p.w.free(qr.wi)
		p.w.grant()
	}
	p.holdMu.Unlock()
	p.kick()
	return false, late
}

// weightedFree gives back the slot a message of qr held.
func (p *Processor) weightedFree(qr *queueRunner) {
	p.holdMu.Lock()
	p.w.free(qr.wi)
	p.w.grant()
	p.holdMu.Unlock()
	p.kick()
}

// dequeued records what a dequeue of qr that asked for n messages got:
// with QueueWeights, whether the queue has ready work (a full batch).
func (p *Processor) dequeued(qr *queueRunner, n, got int, err error) {
	if p.w == nil || err != nil {
		return
	}
	p.holdMu.Lock()
	p.w.qs[qr.wi].ready = got == n
	p.holdMu.Unlock()
}

// kick wakes every poller waiting in reserve to look again.
func (p *Processor) kick() {
	for _, qr := range p.queues {
		select {
		case qr.capacity <- struct{}{}:
		default:
		}
	}
}

// Weights returns the weight of every queue the processor polls (1 for
// those QueueWeights leaves out), or nil when it has no weights (none
// given, or one queue polled).
func (p *Processor) Weights() map[string]int {
	if p.w == nil {
		return nil
	}
	out := make(map[string]int, len(p.w.qs))
	for _, q := range p.w.qs {
		out[q.name] = q.weight
	}
	return out
}
