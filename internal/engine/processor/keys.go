package processor

import (
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/storage"
)

// Per-key limits (docs/processor.md, "Per-key limits"): a type with
// GlobalConcurrencyPerKey or RatePerKey limits the commands of each limit
// key (the command's LimitKey method) as a type-wide limit limits the
// type: each key has its own permits (rows of shared.PermitPartition,
// scope shared.Scope(type, key)) and its own rate ledger. The key is read
// from the parameters the message carries, else from the
// command's row (one point read). A delivery takes its key's permit
// before the type's (so that a key that is full never holds one of the
// type's permits while it waits), and its type's token before its key's
// (a token is good only right before its start: the key's is taken last,
// and again when waiting for the type's made it stale).
//
// The gates and raters of keys are made when a delivery of the key asks
// and dropped when none uses them. Waiting messages of every key of a
// type park under one bound (2 × Concurrency); past it, a command not
// started yet is put back on its queue for a while (a hop: the wait
// spends no attempt) instead of waiting counted as held, so that one busy
// key cannot fill the processor's prefetch and keep the other keys'
// commands from being fetched.

// keyLimits are the per-key gates and raters in use here, by scope.
type keyLimits struct {
	mu     sync.Mutex
	gates  map[string]*keyGate
	raters map[string]*keyRater
}

type keyGate struct {
	g    *gate
	refs int
}

type keyRater struct {
	r    *rater
	refs int
}

// keyedParkKey is the park key of a type's deliveries waiting for their
// keys' permits or tokens.
func keyedParkKey(cmdType string) string { return "\x00keyed " + cmdType }

// gateOf returns the gate of def's key (taking a reference: done drops
// it).
func (p *Processor) gateOf(def *registry.Definition, key string) (g *gate, done func()) {
	scope := shared.Scope(def.Type, key)
	p.keys.mu.Lock()
	defer p.keys.mu.Unlock()
	if p.keys.gates == nil {
		p.keys.gates = map[string]*keyGate{}
	}
	kg := p.keys.gates[scope]
	if kg == nil {
		g := newGate(def.Type, def.Queue, def.GlobalConcurrencyPerKey)
		g.key = key
		kg = &keyGate{g: g}
		p.keys.gates[scope] = kg
	}
	kg.refs++
	return kg.g, func() {
		p.keys.mu.Lock()
		defer p.keys.mu.Unlock()
		if kg.refs--; kg.refs == 0 {
			delete(p.keys.gates, scope)
		}
	}
}

// raterOf returns the rater of def's key (taking a reference: done drops
// it).
func (p *Processor) raterOf(def *registry.Definition, key string) (r *rater, done func()) {
	scope := shared.Scope(def.Type, key)
	p.keys.mu.Lock()
	defer p.keys.mu.Unlock()
	if p.keys.raters == nil {
		p.keys.raters = map[string]*keyRater{}
	}
	kr := p.keys.raters[scope]
	if kr == nil {
		kr = &keyRater{r: &rater{typ: def.Type, key: key, queue: def.Queue,
			rate: shared.Rate{Limit: def.RatePerKey.Limit, Per: def.RatePerKey.Per}, turn: make(chan struct{}, 1)}}
		p.keys.raters[scope] = kr
	}
	kr.refs++
	return kr.r, func() {
		p.keys.mu.Lock()
		defer p.keys.mu.Unlock()
		if kr.refs--; kr.refs == 0 {
			delete(p.keys.raters, scope)
		}
	}
}

// keyedGates returns the per-key gates in use here whose queue is queue.
func (p *Processor) keyedGates(queue string) []*gate {
	p.keys.mu.Lock()
	defer p.keys.mu.Unlock()
	var out []*gate
	for _, kg := range p.keys.gates {
		if kg.g.queue == queue {
			out = append(out, kg.g)
		}
	}
	return out
}

// keyLimitsUsed reports whether any type handled here limits per key.
func (p *Processor) keyLimitsUsed() bool {
	for _, def := range p.reg.Handlers() {
		if def.KeyLimited() && p.byName[def.Queue] != nil {
			return true
		}
	}
	return false
}

// limitKeyOf returns the limit key of the command whose message holds env
// (def limits per key): from the parameters the message carries, else
// from its row (one point read). rec is what it read (nil when it read
// nothing or the load failed: the delivery loads again and acts on the
// failure). A key of "" limits nothing.
func (p *Processor) limitKeyOf(s *session, env layout.Envelope, def *registry.Definition) (key string, rec *record.Record) {
	if env.First.Usable() {
		return def.LimitKey(env.First.Params), record.FirstRecord(env)
	}
	rec, err := p.st.Load(s.ops, env.ID)
	if err != nil {
		return "", nil
	}
	return def.LimitKey(rec.Params), rec
}

// keyHop returns what puts a message waiting for its key back on its
// queue for a while (hopTo: a fresh message, so the wait spends no
// attempt), or nil when it may not be: a command started already (its
// message owns it) or not read.
func (p *Processor) keyHop(s *session, qr *queueRunner, k *keeper, env layout.Envelope, m storage.Message, rec *record.Record) func() bool {
	if rec == nil || rec.Owner != "" || rec.Status.State != model.StatePending {
		return nil
	}
	return func() bool {
		plain, pm := withoutFirst(env, m)
		s.counter.hops.Add(1)
		return p.hopTo(s, qr, k, plain, pm, rec, p.now().Add(orderHopDelay(rec.IssuedAt)))
	}
}

// withoutFirst returns the message m (of envelope env) as a hop of a
// waiting command re-sends it: without First, so that its next delivery
// loads the command (the copy is old by then, and the hop's new
// message would pass for a young first delivery).
func withoutFirst(env layout.Envelope, m storage.Message) (layout.Envelope, storage.Message) {
	plain := env
	plain.First = nil
	plain.HandedOff = false
	m.Text = plain.Marshal()
	return plain, m
}

// takeTokens takes the tokens a start of cmdID needs with its handler
// slot in hand (free gives it back; see takeToken): its key's, then its
// type's (either nil: none). A key's token taken long enough before the
// type's came that its start would fall outside its grant's allowance is
// dropped and another taken (both limits then bind: dropping only starts
// fewer).
func (p *Processor) takeTokens(s *session, k *keeper, cmdID string, free func(), typeRater, keyRater *rater, hop func() bool) (func(), bool) {
	var ok bool
	for {
		var keyStamp time.Time
		if keyRater != nil {
			if free, keyStamp, ok = p.takeToken(s, k, keyRater, cmdID, free, hop); !ok {
				return nil, false
			}
		}
		if typeRater == nil {
			return free, true
		}
		if free, _, ok = p.takeToken(s, k, typeRater, cmdID, free, nil); !ok {
			return nil, false
		}
		if keyRater == nil || p.now().Sub(keyStamp) < keyRater.rate.StartAllowance()/2 {
			return free, true
		}
	}
}
