package processor

import (
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/shared"
)

// Global concurrency (docs/processor.md, "Global concurrency"): a command
// type with a GlobalConcurrency runs at most that many handlers at once
// across every process that shares the store and prefix. Each run holds a
// permit: a row of shared.PermitPartition, taken before the handler slot,
// renewed with the message's lease, and given back at the outcome. A
// message that finds every permit held waits here, holding its message
// (the keeper renews its lease, so no attempt is spent) but no handler
// slot. One waiting message of a type at a time tries again (the others
// wait for their turn), when a permit is given back in this process, when
// another process says it gave one back (a permit wake through the
// doorbell), when a held permit will have expired, or else after a
// backoff from permitRetryMin to permitRetryMax.
//
// Storage calls: taking a free permit is one insert (when this process's
// guess of a free slot is right; else one query and one insert or
// conditional update), giving it back one delete, and each lease renewal
// of a running handler one update. A waiting type costs one query per
// retry.

const (
	permitRetryMin = 100 * time.Millisecond
	permitRetryMax = 2 * time.Second
)

// gate is one globally limited type's permits as this processor sees
// them.
type gate struct {
	typ   string
	key   string // the limit key of a per-key gate (keys.go), "" for the type's
	queue string // its logical queue
	limit int
	turn  chan struct{} // cap 1: the waiting message whose turn it is to try

	waiting atomic.Int32 // messages waiting for a permit here
	holding atomic.Int32 // permits this processor holds

	mu   sync.Mutex
	mine map[int]bool    // slots this processor holds
	view []shared.Permit // the type's permits as last read
	poke chan struct{}   // closed (and replaced) to wake the waiter
}

func newGate(typ, queue string, limit int) *gate {
	return &gate{typ: typ, queue: queue, limit: limit, turn: make(chan struct{}, 1), mine: map[int]bool{}, poke: make(chan struct{})}
}

// scope is what the gate's permits limit (shared.Scope).
func (g *gate) scope() string { return shared.Scope(g.typ, g.key) }

// parkKey is the park key of the gate's waiting messages: one per type,
// and one for every key of a type.
func (g *gate) parkKey() string {
	if g.key != "" {
		return keyedParkKey(g.typ)
	}
	return permitParkKey + g.typ
}

// poked returns the channel the next wake closes.
func (g *gate) poked() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.poke
}

// wake makes the waiting message try again at once.
func (g *gate) wake() {
	g.mu.Lock()
	close(g.poke)
	g.poke = make(chan struct{})
	g.mu.Unlock()
}

// permitHold is one permit held for one run.
type permitHold struct {
	g    *gate
	mu   sync.Mutex // held across a renewal, so that a give-back waits for it
	perm shared.Permit
	done bool
	lost bool // taken over by another process (it had expired)
}

// PermitState is one globally limited type as a processor sees it.
type PermitState struct {
	// Type is the command type, Queue its logical queue.
	Type, Queue string
	// Limit is its global concurrency.
	Limit int
	// Holding is how many permits this processor holds; Waiting how many
	// of its messages wait for one here.
	Holding, Waiting int
}

// Permits returns the processor's globally limited types, by type name.
func (p *Processor) Permits() []PermitState {
	out := make([]PermitState, 0, len(p.gates))
	for _, g := range p.gates {
		out = append(out, PermitState{Type: g.typ, Queue: g.queue, Limit: g.limit, Holding: int(g.holding.Load()), Waiting: int(g.waiting.Load())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

// clearPermits gives back every permit in the store (one query and one
// delete each): on a store only this process uses, they were left by an
// earlier process that was killed, and would hold their types until they
// expired.
func (p *Processor) clearPermits(ctx context.Context) {
	perms, err := p.st.ReadPermits(ctx, "")
	if err != nil {
		p.cfg.Logger.Warn().Err(err).Msg("cmdq processor: the permits of an earlier process were not read; they free themselves when they expire")
		return
	}
	for _, pm := range perms {
		if err := p.st.ReleasePermit(ctx, pm); err != nil {
			p.cfg.Logger.Warn().Err(err).Msg("cmdq processor: a permit of an earlier process was not given back; it frees itself when it expires")
			return
		}
	}
	if len(perms) > 0 {
		p.cfg.Logger.Info().Int("permits", len(perms)).Msg("cmdq processor: gave back the permits an earlier process left in this store")
	}
}

// permitWoken acts on a permit wake of queue (another process gave a
// permit back, or a command of an order key left it): the waiting
// messages of its limited types, and those waiting for an order key's
// head, try again.
func (p *Processor) permitWoken(queue string) {
	p.order.wakeAll()
	for _, g := range p.gates {
		if g.queue == queue && g.waiting.Load() > 0 {
			g.wake()
		}
	}
	for _, g := range p.keyedGates(queue) {
		if g.waiting.Load() > 0 {
			g.wake()
		}
	}
}

// takePermit takes a permit of g for the command cmdID whose message k
// holds, waiting as long as it takes (see the top of this file). ok is
// false when the wait ended without one: the session stopped taking work
// (the message is released), the message's lease was lost, or hop (nil:
// none) put the message back on its queue because as many wait parked
// already (keys.go).
func (p *Processor) takePermit(s *session, qr *queueRunner, k *keeper, g *gate, cmdID string, hop func() bool) (h *permitHold, ok bool) {
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	parked := false
	defer func() {
		if parked {
			p.unpark(qr, g.parkKey())
		}
	}()
	select {
	case g.turn <- struct{}{}:
	default:
		// Others of the type wait already: wait for the turn holding no
		// slot and, up to a bound, not counted as held, so that the
		// poller goes on fetching other work. Past the bound the
		// message waits counted as held (the poller's prefetch bound
		// then stops fetching): it is never released for it.
		if parked = p.park(qr, g.parkKey(), 2*p.cfg.Concurrency); !parked && hop != nil {
			hop()
			return nil, false
		}
		if p.awaitTurn(s, k, g.turn, nil) != waitCame {
			return nil, false
		}
	}
	defer func() { <-g.turn }()
	backoff := permitRetryMin
	for {
		poke := g.poked()
		perm, next, err := p.tryPermit(s.ops, g, cmdID, k.currentLease())
		if err == nil {
			g.holding.Add(1)
			return &permitHold{g: g, perm: perm}, true
		}
		if !errors.Is(err, shared.ErrPermitHeld) {
			if s.ops.Err() != nil {
				return nil, false
			}
			p.fault(s.ops, "take a permit", g.queue, cmdID, err)
		}
		if !parked {
			if parked = p.park(qr, g.parkKey(), 2*p.cfg.Concurrency); !parked && hop != nil {
				hop()
				return nil, false
			}
		}
		wait := backoff
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(p.now()), time.Millisecond))
		}
		switch p.pause(s, k, wait, poke) {
		case waitCame:
			backoff = min(2*backoff, permitRetryMax)
		case waitWoken:
			backoff = permitRetryMin
		default:
			return nil, false
		}
	}
}

// permitParkKey prefixes the parked counts of messages waiting for a
// permit (park), apart from those waiting for a slot of their type.
const permitParkKey = "\x00permit "

// tryPermit makes one attempt at a permit of g: an insert at a slot this
// process believes free, and when that finds it held, a read of the
// type's permits and a take of a free or expired one. next, when not
// zero, is when a held permit will have expired (worth a try then).
func (p *Processor) tryPermit(ctx context.Context, g *gate, cmdID string, lease time.Duration) (perm shared.Permit, next time.Time, err error) {
	now := p.now()
	want := shared.Permit{Type: g.typ, Key: g.key, Holder: p.instance, Worker: p.cfg.Worker, Command: cmdID, Expires: now.Add(lease)}
	g.mu.Lock()
	known := map[int]bool{} // held as last read (a stale read only skips a guess)
	for _, v := range g.view {
		if !v.Expired(now) {
			known[v.Slot] = true
		}
	}
	guess := -1
	start := rand.IntN(g.limit)
	for i := range g.limit {
		if s := (start + i) % g.limit; !g.mine[s] && !known[s] {
			guess = s
			break
		}
	}
	g.mu.Unlock()
	if guess >= 0 {
		want.Slot = guess
		got, err := p.st.TakePermit(ctx, want)
		if err == nil {
			p.tookPermit(g, got)
			return got, time.Time{}, nil
		}
		if !errors.Is(err, shared.ErrPermitHeld) {
			return shared.Permit{}, time.Time{}, err
		}
	}
	view, err := p.st.ReadPermits(ctx, g.scope())
	if err != nil {
		return shared.Permit{}, time.Time{}, err
	}
	now = p.now()
	bySlot := map[int]shared.Permit{}
	held := 0
	for _, v := range view {
		bySlot[v.Slot] = v
		if !v.Expired(now) {
			held++
			if at := v.Expires.Add(p.skewAllowance()); next.IsZero() || at.Before(next) {
				next = at
			}
		}
	}
	g.mu.Lock()
	g.view = view
	g.mu.Unlock()
	if held >= g.limit {
		return shared.Permit{}, next, shared.ErrPermitHeld
	}
	for slot := range g.limit {
		old, taken := bySlot[slot]
		want.Slot = slot
		want.Expires = p.now().Add(lease)
		switch {
		case !taken:
			perm, err = p.st.TakePermit(ctx, want)
		case old.Expired(now):
			perm, err = p.st.TakeOverPermit(ctx, old, want)
			if err == nil {
				p.cfg.Logger.Info().Str("type", g.typ).Str("key", g.key).Str("holder", old.Worker).Str("command", old.Command).
					Msg("cmdq processor: took over a permit its holder did not renew (gone, or its clock far behind)")
			}
		default:
			continue
		}
		if err == nil {
			p.tookPermit(g, perm)
			return perm, time.Time{}, nil
		}
		if !errors.Is(err, shared.ErrPermitHeld) {
			return shared.Permit{}, next, err
		}
	}
	return shared.Permit{}, next, shared.ErrPermitHeld
}

// skewAllowance is how long after a permit's expiry a reader waits
// before it takes it over (shared.Permit.Expired), and a little more.
func (p *Processor) skewAllowance() time.Duration { return maxClockSkew + 10*time.Millisecond }

func (p *Processor) tookPermit(g *gate, perm shared.Permit) {
	g.mu.Lock()
	g.mine[perm.Slot] = true
	g.mu.Unlock()
}

// renewPermit moves h's expiry to a lease from now (the message's lease
// was renewed): one update.
func (p *Processor) renewPermit(ctx context.Context, h *permitHold, lease time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done || h.lost {
		return
	}
	perm, err := p.st.RenewPermit(ctx, h.perm, p.now().Add(lease))
	switch {
	case err == nil:
		h.perm = perm
	case errors.Is(err, shared.ErrPermitHeld):
		h.lost = true
		p.cfg.Logger.Warn().Str("type", h.g.typ).Str("command", h.perm.Command).
			Msg("cmdq processor: a running handler's permit was taken over (it expired before its renewal: the global limit may be passed by one until this handler ends)")
	default:
		if ctx.Err() == nil {
			p.fault(ctx, "renew a permit", h.g.queue, h.perm.Command, err)
		}
	}
}

// givePermit gives h back (one delete) and wakes whoever waits for it:
// a waiting message here, or else the other processors of its queue (a
// permit wake through the doorbell).
func (p *Processor) givePermit(s *session, h *permitHold) {
	h.mu.Lock()
	h.done = true
	perm, lost := h.perm, h.lost
	h.mu.Unlock()
	g := h.g
	g.holding.Add(-1)
	if !lost {
		// Not cancelled with the run: a permit left behind blocks the type
		// for a lease.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ops), 10*time.Second)
		err := p.st.ReleasePermit(ctx, perm)
		cancel()
		if err != nil {
			p.cfg.Logger.Warn().Err(err).Str("type", g.typ).Msg("cmdq processor: a permit was not given back; it frees itself when its lease ends")
		}
	}
	g.mu.Lock()
	delete(g.mine, perm.Slot)
	for i, v := range g.view {
		if v.Slot == perm.Slot {
			g.view = append(g.view[:i:i], g.view[i+1:]...)
			break
		}
	}
	g.mu.Unlock()
	if g.waiting.Load() > 0 {
		g.wake()
	} else if ring := p.cfg.Doorbell.RingPermit; ring != nil {
		go ring(g.queue) // its first call may wait for the list of peers
	}
}
