package processor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
)

// Rate limits (docs/processor.md, "Rate limits"): a command type with a
// Rate starts at most Limit handlers in any window of Per across every
// process that shares the store and prefix. Each start takes a token
// from the type's ledger (a row of shared.RatePartition: the grants that
// count for Per and a start allowance, shared.Rate.Span) with the
// handler slot in hand, right before the command is loaded and run: a
// token taken before a wait for a slot could start long after it and
// bunch up with later ones. The queues' control rows are read first when
// they would turn stale soon, so that only the command's load (when it
// is not started from its message) lies between a token and its
// handler. A grant is stamped when its handlers are expected to start:
// the longest of this process's last 8 ledger writes after it is
// decided. A handler that starts within the start allowance of its
// grant's stamp keeps the bound exact (shared.Rate.StartAllowance).
//
// A message that finds no token free gives its slot back and waits
// holding its message (the keeper renews its lease, so no attempt is
// spent) but no handler slot, parked as a message waiting for a permit
// is, until the ledger says one frees (exact: later grants only make it
// later), then takes a slot and tries again. One waiting message of a
// type at a time tries (the others wait for their turn).
//
// Blocks: a grant takes a token for the message that asks and one for
// each other message of the type waiting here that a free handler slot
// could start now, up to shared.Rate.MaxBlock; this process hands the
// extra tokens to those messages until half the start allowance after
// the grant's stamp, and drops (never gives back) the ones it has not
// handed out by then. The bound holds for them as for single tokens.
//
// Storage calls: a token from this process's block none; a grant one
// conditional write of the ledger when this process's copy is current
// (its own last write), else one point read and one write; each write
// lost to another process's adds a read and a write. A wait makes no
// ledger call (the keeper renews the waiting message's lease).

// maxRateTries bounds the reads and writes of one try for a grant that
// keep losing to other processes' writes; the try then waits a few ms.
const maxRateTries = 5

// rateParkKey prefixes the parked counts of messages waiting for a rate
// token (park).
const rateParkKey = "\x00rate "

// rater is one rated type's tokens as this processor sees them.
type rater struct {
	typ   string
	key   string // the limit key of a per-key rater (keys.go), "" for the type's
	queue string // its logical queue
	rate  shared.Rate
	turn  chan struct{} // cap 1: the waiting message whose turn it is to try

	waiting atomic.Int32 // messages asking for a token here

	mu     sync.Mutex
	ledger shared.RateLedger // as this process last read or wrote it
	known  bool              // ledger is set
	pool   int               // tokens of this process's last grant not handed out yet
	poolAt time.Time         // their grant's stamp
	poolBy time.Time         // they are handed out until then, dropped after
	writes [8]time.Duration  // how long the last grants' writes took (a ring)
	wrote  int               // grants written
}

// lead is how long after a grant's decision its handler is expected to
// start: the longest of this process's last 8 grant writes.
func (r *rater) lead() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Max(r.writes[:])
}

// wroteIn notes how long a grant's write took.
func (r *rater) wroteIn(d time.Duration) {
	r.mu.Lock()
	r.writes[r.wrote%len(r.writes)] = d
	r.wrote++
	r.mu.Unlock()
}

// RateState is one rated type as a processor sees it.
type RateState struct {
	// Type is the command type, Queue its logical queue.
	Type, Queue string
	// Rate is its rate as this processor applies it.
	Rate model.Rate
	// Waiting counts its messages waiting for a token here.
	Waiting int
}

// Rates returns the processor's rated types, by type name.
func (p *Processor) Rates() []RateState {
	out := make([]RateState, 0, len(p.rates))
	for _, r := range p.rates {
		out = append(out, RateState{Type: r.typ, Queue: r.queue, Rate: model.Rate{Limit: r.rate.Limit, Per: r.rate.Per},
			Waiting: int(r.waiting.Load())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

// setupRates makes the raters of the handled types polled here that have
// a rate (Config.Rates over each type's own).
func (p *Processor) setupRates(reg *registry.Registry) error {
	p.rates = map[string]*rater{}
	for _, def := range reg.Handlers() {
		if p.byName[def.Queue] == nil {
			continue
		}
		r := def.Rate
		if o, ok := p.cfg.Rates[def.Type]; ok {
			r = o
		}
		if !r.IsZero() {
			p.rates[def.Type] = &rater{typ: def.Type, queue: def.Queue, rate: shared.Rate{Limit: r.Limit, Per: r.Per}, turn: make(chan struct{}, 1)}
		}
	}
	for t := range p.cfg.Rates {
		if def, ok := reg.Lookup(t); !ok || !def.Handled() {
			return fmt.Errorf("%w: Rates names command type %q, which has no handler here; register it, or remove it from the rates", ErrInvalidConfig, t)
		}
	}
	return nil
}

// takeToken takes a token of r for the command cmdID whose message k
// holds, with a handler slot in hand (free gives it back), waiting as
// long as it takes (see the top of this file). It returns what gives the
// slot back then (the slot is given back during a wait, and another
// taken after it), and the stamp of the token's grant. ok is false when
// the wait ended without one: the session stopped taking work (the
// message is released), the message's lease was lost, a wait for the slot
// ended (takeSlot), or hop (nil: none) put the message back on its queue
// because as many wait parked already (keys.go); no slot is held then.
func (p *Processor) takeToken(s *session, k *keeper, r *rater, cmdID string, free func(), hop func() bool) (_ func(), stamp time.Time, ok bool) {
	r.waiting.Add(1)
	defer r.waiting.Add(-1)
	key := rateParkKey + r.typ
	if r.key != "" {
		key = keyedParkKey(r.typ)
	}
	qr := p.byName[k.queue]
	parked := false
	unpark := func() {
		if parked {
			p.unpark(qr, key)
			parked = false
		}
	}
	defer unpark()
	select {
	case r.turn <- struct{}{}:
	default:
		// Another message of the type tries: wait for the turn holding no
		// slot, parked (up to a bound) as a message waiting for a permit.
		free()
		free = nil
		if parked = p.park(qr, key, 2*p.cfg.Concurrency); !parked && hop != nil {
			hop()
			return nil, time.Time{}, false
		}
		if p.awaitTurn(s, k, r.turn, nil) != waitCame {
			return nil, time.Time{}, false
		}
	}
	defer func() { <-r.turn }()
	backoff := permitRetryMin
	for {
		if free == nil {
			unpark()
			f, ok := p.takeSlot(s, k, r.typ, p.now(), k.currentLease(), false)
			if !ok {
				return nil, time.Time{}, false
			}
			free = f
		}
		p.freshControl(s.ops)
		stamp, next, err := p.tryToken(s.ops, r)
		if err == nil && next.IsZero() {
			if f := p.cfg.RateToken; f != nil {
				f(r.typ, cmdID, stamp)
			}
			return free, stamp, true
		}
		free()
		free = nil
		wait := next.Sub(p.now())
		if err != nil {
			if s.ops.Err() != nil {
				return nil, time.Time{}, false
			}
			p.fault(s.ops, "take a rate token", r.queue, cmdID, err)
			wait = backoff
			backoff = min(2*backoff, permitRetryMax)
		} else {
			backoff = permitRetryMin
		}
		if !parked {
			if parked = p.park(qr, key, 2*p.cfg.Concurrency); !parked && hop != nil {
				hop()
				return nil, time.Time{}, false
			}
		}
		if p.pause(s, k, wait, nil) != waitCame {
			return nil, time.Time{}, false
		}
	}
}

// freshControl reads the queues' control rows now when they would turn
// stale soon, so that the start that follows a token does not read them
// between its token and its handler (startGate, control.go).
func (p *Processor) freshControl(ctx context.Context) {
	p.ctl.mu.Lock()
	sent := p.ctl.sent
	p.ctl.mu.Unlock()
	margin := min(time.Second, p.cfg.ControlInterval/4)
	if !sent.IsZero() && time.Since(sent) < p.cfg.ControlInterval-margin {
		return
	}
	_ = p.readControl(ctx) // an error is startGate's to act on: it reads them again
}

// tryToken takes a token of r now: one of this process's last grant (no
// storage call), else a grant from the ledger; stamp is its grant's.
// next, when not zero, is when one is free (none was taken).
func (p *Processor) tryToken(ctx context.Context, r *rater) (stamp, next time.Time, err error) {
	r.mu.Lock()
	now := p.now()
	if r.pool > 0 && now.Before(r.poolBy) {
		r.pool--
		stamp = r.poolAt
		r.mu.Unlock()
		return stamp, time.Time{}, nil
	}
	r.pool = 0
	l, known := r.ledger, r.known
	r.mu.Unlock()
	if known {
		// Full as this process last saw the ledger: no call before it frees
		// (other processes' grants since only make that later).
		if nf := l.NextFree(now, r.rate); nf.After(now) {
			return time.Time{}, nf, nil
		}
	}
	want := p.rateBlock(r)
	for range maxRateTries {
		if !known {
			if l, err = p.st.ReadRate(ctx, r.typ, r.key); err != nil {
				p.forgetLedger(r)
				return time.Time{}, time.Time{}, err
			}
			known = true
		}
		now = p.now()
		n, out, nf := l.Take(now, r.rate, want, r.lead())
		if n == 0 {
			p.keepLedger(r, l, 0, time.Time{})
			return time.Time{}, nf, nil
		}
		written, err := p.st.WriteRate(ctx, out)
		r.wroteIn(p.now().Sub(now))
		if errors.Is(err, shared.ErrRateChanged) {
			known = false
			continue
		}
		if err != nil {
			// The grant may have landed (its answer lost): its tokens are
			// not used, which only starts fewer.
			p.forgetLedger(r)
			return time.Time{}, time.Time{}, err
		}
		stamp = out.Grants[len(out.Grants)-1].At // the new grant: none is later
		p.keepLedger(r, written, n-1, stamp)
		return stamp, time.Time{}, nil
	}
	// Lost every write to other processes: try again in a moment.
	p.forgetLedger(r)
	return time.Time{}, p.now().Add(time.Millisecond + rand.N(20*time.Millisecond)), nil
}

// keepLedger notes the ledger as read or written, and the extra tokens
// its grant (stamped at) took for this process's waiting messages.
func (p *Processor) keepLedger(r *rater, l shared.RateLedger, extra int, at time.Time) {
	r.mu.Lock()
	r.ledger, r.known = l, true
	if extra > 0 {
		r.pool, r.poolAt, r.poolBy = extra, at, at.Add(r.rate.StartAllowance()/2)
	}
	r.mu.Unlock()
}

// forgetLedger makes the next try read the ledger.
func (p *Processor) forgetLedger(r *rater) {
	r.mu.Lock()
	r.known = false
	r.mu.Unlock()
}

// rateBlock is how many tokens a grant of r asks for: one for the message
// that asks, and one for each other message of the type waiting here that
// a free handler slot could start now, up to the rate's MaxBlock.
func (p *Processor) rateBlock(r *rater) int {
	others := int(r.waiting.Load()) - 1
	var slots int
	if p.w != nil {
		p.holdMu.Lock()
		slots = p.w.slots // QueueWeights (weights.go)
		p.holdMu.Unlock()
	} else {
		slots = cap(p.sem) - len(p.sem)
	}
	if typed := p.typeSlots[r.typ]; typed != nil {
		slots = min(slots, cap(typed)-len(typed))
	}
	return 1 + max(0, min(others, slots, r.rate.MaxBlock()-1))
}
