package processor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage"
)

// errFinal: the command became final (completed, poisoned, discarded)
// elsewhere while this attempt ran. It wraps registry.ErrSuperseded.
var errFinal = fmt.Errorf("processor: the command finished elsewhere while this attempt ran: %w", model.ErrSuperseded)

// errTakenOver: another delivery of the command started it, or recorded
// this attempt's lease as lost, while this attempt ran. It wraps
// registry.ErrSuperseded.
var errTakenOver = fmt.Errorf("processor: another delivery took the command over while this attempt ran: %w", model.ErrSuperseded)

// superseded reports whether err says the attempt is over (errFinal,
// errTakenOver).
func superseded(err error) bool { return errors.Is(err, model.ErrSuperseded) }

// errTimeout is the cancellation cause when a handler exceeds its Timeout.
var errTimeout = errors.New("processor: handler timed out")

// timeoutCause is the cause of a handler's timeout: errTimeout after the
// handler's Timeout (its text is made only when read; every attempt
// carries one).
type timeoutCause time.Duration

func (c timeoutCause) Error() string { return fmt.Sprintf("%v after %s", errTimeout, time.Duration(c)) }

func (c timeoutCause) Unwrap() error { return errTimeout }

// handle processes one dequeued message from start to finish.
//
// direct: the message was handed off by an Issuer in this process right
// after its enqueue (never dequeued: dequeue count 0).
func (p *Processor) handle(s *session, qr *queueRunner, m storage.Message, sent time.Time, vis time.Duration, direct bool) {
	s.counter.processed.Add(1)
	k := newKeeper(p, s.ops, qr, m, sent, vis)
	env, err := parseMessage(m.Text)
	if err != nil {
		k.start(vis, "")
		p.poisonOrphan(s, qr, k, m, model.ReasonMalformed, err, msgKey(m.ID))
		return
	}
	// The attempt number: the dequeue count, + 1 for a handed-off message
	// (its hand-off was attempt 1, without a dequeue).
	n := env.Attempt(m.DequeueCount)
	if direct {
		n = 1
	}
	k.cmdID = env.ID
	tok, ok := p.claim(env.ID)
	if !ok {
		// A second message for a command this processor is handling (from
		// a re-issue or the reconciler). Leave it invisible until its
		// dequeue visibility ends: by then the command is usually final and
		// the message is deleted without running, so the handler never runs
		// twice at once here. Costs nothing.
		s.counter.duplicates.Add(1)
		return
	}
	defer p.unclaim(env.ID, tok)
	def, known := p.reg.Lookup(env.Type)
	known = known && def.Handled() // a declared type has no handler here
	lease := vis
	if known {
		// The type's current lease; a grown one is taken now with one
		// UpdateVisibility (only grown types pay it).
		lease = p.leaseFor(def.Type)
	}
	k.start(lease, env.Type)

	// A type with a global limit takes a permit first, waiting for one
	// holding no handler slot (permits.go); it is given back at the
	// outcome. Then the handler slot: stop taking work releases the
	// message, and so does a wait that reaches the time its lease would
	// need renewing: a message is not hoarded by a processor that cannot
	// start it. The command is loaded once the slot is taken, so what the
	// delivery decides from (and runs on) is as fresh as it can be. A
	// command with an order key that is not its key's head gives both
	// back and waits for its turn (order.go), then starts over.
	// A type limited per key reads the command's limit key first, and
	// takes its key's permit before its type's (keys.go).
	var keyGate *gate
	var keyRater *rater
	var hop func() bool
	if known && def.KeyLimited() {
		if key, rec := p.limitKeyOf(s, env, def); key != "" {
			hop = p.keyHop(s, qr, k, env, m, rec)
			if def.GlobalConcurrencyPerKey > 0 {
				g, done := p.gateOf(def, key)
				defer done()
				keyGate = g
			}
			if !def.RatePerKey.IsZero() {
				r, done := p.raterOf(def, key)
				defer done()
				keyRater = r
			}
		}
	}
	var gates []*gate
	if keyGate != nil {
		gates = append(gates, keyGate)
	}
	if g := p.gates[env.Type]; g != nil && known {
		gates = append(gates, g)
	}
	typeRater := p.rates[env.Type]
	if !known {
		typeRater = nil
	}
	slotSent, slotVis := sent, vis
	// A capped type that also takes permits takes its MaxConcurrency slot
	// first: a message waiting for its type's slot holds no permit that
	// another process's handler could use.
	typeFirst := known && len(gates) > 0 && p.typeSlots[env.Type] != nil
	for {
		var holds []*permitHold
		typeHeld := false
		giveBack := func() {
			if len(holds) > 0 {
				k.onRenewed(nil)
				for _, h := range holds {
					p.givePermit(s, h)
				}
			}
		}
		if typeFirst {
			if _, ok := p.takeTypeSlot(s, k, env.Type); !ok {
				return
			}
			typeHeld = true
		}
		for _, g := range gates {
			var gateHop func() bool
			if g == keyGate {
				gateHop = hop
			}
			h, ok := p.takePermit(s, qr, k, g, env.ID, gateHop)
			if !ok {
				giveBack()
				if typeHeld {
					p.freeTypeSlot(env.Type)
				}
				return
			}
			holds = append(holds, h)
			held := slices.Clone(holds)
			k.onRenewed(func(lease time.Duration) {
				for _, h := range held {
					p.renewPermit(s.ops, h, lease)
				}
			})
			slotSent, slotVis = p.now(), k.currentLease()
		}
		free, ok := p.takeSlot(s, k, env.Type, slotSent, slotVis, typeHeld)
		if ok {
			// A type with a rate takes its tokens with its slot in hand,
			// waiting for them holding no slot (rates.go).
			free, ok = p.takeTokens(s, k, env.ID, free, typeRater, keyRater, hop)
		}
		if !ok {
			giveBack()
			return
		}
		wait := p.deliver(s, qr, k, env, m, n, direct, sent, vis, def, known, tok)
		free()
		giveBack()
		if wait == nil || !p.awaitOrder(s, qr, k, wait) {
			return
		}
		slotSent, slotVis = p.now(), k.currentLease()
	}
}

// deliver loads the command of message m (env, attempt n), decides what
// the delivery does and does it: run its handler, or delete, hop,
// release or poison the message. It holds a handler slot (and the
// command type's permit, if it has a global limit). It returns, instead,
// what to wait for when the command has an order key whose head is
// another command: the caller gives the slot back and waits.
func (p *Processor) deliver(s *session, qr *queueRunner, k *keeper, env layout.Envelope, m storage.Message, n int64, direct bool,
	sent time.Time, vis time.Duration, def *registry.Definition, known bool, tok uint64) *orderWait {
	var err error
	var rec *record.Record
	var ref time.Time // see attempt.startedBy
	fast := false
	for {
		if !s.mayTake(p) {
			p.release(s, k)
			return nil
		}
		if !p.startGate(s, qr, k, m, direct, tok) { // a paused queue starts nothing (control.go)
			return nil
		}
		rec, fast = nil, false
		if !known || p.fastPathClear(env, qr.name, def.Lease) {
			rec = p.firstRecord(env, m, n, direct, sent, vis, def, known)
			fast = rec != nil
		}
		if fast {
			// The earliest a recovery's requeue can have been written: the
			// issue (by the issuer's clock, within the skew of ours).
			ref = env.First.Ready().Add(-maxClockSkew)
		}
		if rec == nil {
			ref = p.now() // a requeue written after this load is not seen by it
			if rec, err = p.st.Load(s.ops, env.ID); err != nil {
				if errors.Is(err, model.ErrExpired) {
					// A late duplicate of a command removed after its retention:
					// it was final, so there is nothing to run.
					p.deleteMsg(s, k, env.Type)
					return nil
				}
				if errors.Is(err, storage.ErrNotFound) || errors.Is(err, model.ErrNotFound) {
					p.poisonOrphan(s, qr, k, m, model.ReasonNoCommand, fmt.Errorf("no command %s of type %s is stored in table %s: %w", env.ID, env.Type, p.names.TableOf(env.ID), err), env.ID)
					return nil
				}
				p.giveUp(s, k, "load", err)
				return nil
			}
		}
		if rec.Status.State.Final() {
			// Redelivered (a duplicate, or a lease lost after the final write).
			p.deleteMsg(s, k, rec.Type)
			p.leaveOrder(s, rec) // left already, unless the last delivery was cut short
			return nil
		}
		// Due means due: a scheduled command, or a retry whose delay has
		// not ended, never starts before its time by this machine's clock,
		// however early its message shows up (docs/lifecycle.md,
		// "Scheduled commands").
		wait := p.until(rec.Status.RunAt)
		if enqueue.Due(rec.Status, p.now()) || wait <= 0 {
			break
		}
		if wait > holdLimit {
			p.notDue(s, qr, k, env, m, rec)
			return nil
		}
		// Due within the clocks' skew: hold the message (and its slot)
		// until then, and decide again from scratch (the control rows, the
		// fast path or a fresh load).
		if !p.hold(s, wait) {
			p.release(s, k)
			return nil
		}
	}
	if fast {
		s.counter.fast.Add(1)
	}
	if started := rec.Status.State == model.StateRunning || rec.Status.State == model.StateRetrying; started &&
		(rec.Owner != "" && rec.Owner != m.ID || rec.Owner == "" && n == 1) {
		// A command another message has started (its started event names
		// that message; without one, a message never delivered before
		// cannot be the one): this is a second message (a recovery
		// enqueue, sent with a delay of at least the lease so that the
		// first one has been started by now). The other message owns the
		// command and is never deleted before it is final: delete this
		// one without running it, recording nothing. See
		// docs/lifecycle.md, "Duplicate messages".
		s.counter.duplicates.Add(1)
		logCmd(p.cfg.Logger.Debug(), rec.ID, record.TraceIDOf(rec.TraceParent)).Str("type", rec.Type).Str("status", string(rec.Status.State)).Msg("cmdq processor: a second message for a command another message runs; deleted without running")
		p.deleteMsg(s, k, rec.Type)
		return nil
	}
	if rec.OrderKey != "" && known && rec.Type == env.Type {
		// One command of an order key runs at a time: its head.
		w, err := p.orderTurn(s, qr, rec)
		if err != nil {
			p.giveUp(s, k, "order key", err)
			return nil
		}
		if w != nil {
			// It waits parked: holding no slot and not counted as held, so
			// that the poller goes on fetching (the key's head among
			// others).
			w.parked = p.park(qr, orderParkKey, p.orderParkLimit())
			if !w.parked && rec.Status.State == model.StatePending && rec.Owner == "" {
				// As many wait here already: put it back on its queue
				// until later (a hop: a fresh dequeue count, so the wait
				// spends no attempt), so that waiting messages never keep
				// the poller from fetching their heads.
				s.counter.hops.Add(1)
				plain, pm := withoutFirst(env, m)
				p.hopTo(s, qr, k, plain, pm, rec, p.now().Add(orderHopDelay(rec.IssuedAt)))
				return nil
			}
			return w
		}
	}
	a := &attempt{p: p, s: s, qr: qr, k: k, def: def, rec: rec, msg: m, n: int(n), claimTok: tok, issueTrace: record.TraceIDOf(rec.TraceParent),
		loadedState: rec.Status.State, loadedAttempts: rec.Attempts,
		// A requeued command (by an operator, the reconciler or the
		// Issuer's recovery) may have more than one message: its first
		// delivery claims it with the started event before running.
		claim: rec.Status.State == model.StatePending && rec.EventSeq > 1}
	if rec.Status.State == model.StatePending && !a.claim && known {
		a.startedBy = ref.Add(p.minRecoveryDelay(def) - safety(def.Lease))
	}
	switch {
	case rec.Type != env.Type:
		a.poison(model.ReasonTypeMismatch, fmt.Errorf("message says type %q, the stored command is %q", env.Type, rec.Type))
	case !known:
		a.poison(model.ReasonUnknownType, fmt.Errorf("%w: %q (queue %s); register a handler for it on every processor that polls this queue", registry.ErrUnknownType, env.Type, qr.name))
	default:
		// Deferrals (RetryAfter, up to the type's MaxDeferrals) do not
		// count toward the ceiling.
		if ceiling, deferrals := p.ceiling(def), min(rec.Deferrals, p.maxDeferrals(def)); n-int64(deferrals) > int64(ceiling) {
			dequeued := fmt.Sprintf("dequeued %d times", m.DequeueCount)
			if deferrals > 0 {
				dequeued += fmt.Sprintf(", %d deferrals not counted", deferrals)
			}
			a.poison(model.ReasonCeiling, fmt.Errorf("attempt %d (%s), over the poison ceiling of %d; last error: %s", n-int64(deferrals), dequeued, ceiling, rec.LastError))
		} else {
			a.run()
		}
	}
	if rec.OrderKey != "" {
		// A command that became final here hands its key to the next —
		// unless its outcome landed after its lease ended: a delivery
		// that took the message meanwhile may be running the handler
		// until it learns of the outcome (within a lease), and the next
		// command must not overlap it. The waiting deliveries then take
		// the head out a lease after its last write (clearHead).
		if cur, late := a.final(); cur.Status.State.Final() && !late {
			p.leaveOrder(s, cur)
		}
	}
	return nil
}

// firstRecord returns the command as its issue left it, built from the
// issue's own message (record.FirstRecord), when this delivery may run it
// without loading (the fast path): the message carries it (Envelope.First),
// this is its first delivery (DequeueCount 1), its type has a handler here,
// and the handler starts soon after the issue — within fastPathAge of the
// type's lease since the message was enqueued (by the queue service's
// clock, plus the time since the dequeue by ours). Otherwise nil: load.
//
// Why the age: any other message of the command (a recovery enqueue) is
// sent after a requeued event and stays invisible for at least the type's
// lease plus StartedWriteDelay, so a handler started within half a lease of
// the issue writes its started event (conditional on the issue's ETag, as
// is every write of the attempt) before another delivery can load the
// command: another message then finds it started and is deleted unrun,
// exactly as for a delivery that loaded the command before the requeued
// event (docs/lifecycle.md, "Duplicate messages"). A command written by
// anyone since the issue makes the attempt's first write conflict; the
// attempt then goes on from the command as reloaded, by the usual rules.
func (p *Processor) firstRecord(env layout.Envelope, m storage.Message, n int64, direct bool, sent time.Time, vis time.Duration, def *registry.Definition, known bool) *record.Record {
	// The first run of the message: its first dequeue, or its hand-off
	// (a handed-off message dequeued later is attempt 2 or more).
	first := direct || (m.DequeueCount == 1 && !env.HandedOff)
	if p.cfg.NoFastPath || !known || !first || n != 1 || !env.First.Usable() ||
		m.InsertedAt.IsZero() || m.NextVisibleAt.IsZero() {
		return nil
	}
	if f := env.First; f.RunAt.After(f.IssuedAt) {
		// A scheduled command: its age counts from its run-at time (by
		// this machine's clock, so one clock skew less). Before it, the
		// record only serves to see that it is not due (a hop, a hold):
		// nothing is written from it.
		age := p.since(f.RunAt)
		if age > fastPathAge(def.Lease)-maxClockSkew {
			return nil
		}
		return record.FirstRecord(env)
	}
	age := m.NextVisibleAt.Add(-vis).Sub(m.InsertedAt) + p.since(sent)
	if limit := fastPathAge(def.Lease); limit <= 0 || age < -time.Second || age > limit {
		return nil
	}
	return record.FirstRecord(env)
}

// fastPathAge is the oldest a first delivery may start its handler (since
// its message was enqueued) and still take the fast path: half the type's
// lease, and at least 2 s less than the lease (queue times have whole
// seconds on Azure). 0 for leases of 2 s and less: never.
func fastPathAge(lease time.Duration) time.Duration {
	return max(min(lease/2, lease-2*time.Second), 0)
}

// parseMessage parses and checks a queue message: an Envelope with a valid
// command ID and type. Errors wrap record.ErrMalformedMessage.
func parseMessage(text string) (layout.Envelope, error) {
	env, err := layout.ParseEnvelope(text)
	if err != nil {
		return layout.Envelope{}, err
	}
	if err := model.ValidateID(env.ID); err != nil {
		return layout.Envelope{}, fmt.Errorf("%w: %w", layout.ErrMalformedMessage, err)
	}
	if err := model.ValidateType(env.Type); err != nil {
		return layout.Envelope{}, fmt.Errorf("%w: %w", layout.ErrMalformedMessage, err)
	}
	return env, nil
}

// msgKey makes a poison-table key from a queue message ID.
func msgKey(id string) string {
	if storage.ValidateKey("PartitionKey", id) == nil && id != "" {
		return id
	}
	b := []byte(id)
	for i, c := range b {
		if c == '/' || c == '\\' || c == '#' || c == '?' || c < 0x20 || c == 0x7f {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "message-without-id"
	}
	return string(b)
}

// giveUp handles an infrastructure fault in the middle of a message: the
// message is left to reappear when its lease ends.
func (p *Processor) giveUp(s *session, k *keeper, op string, err error) {
	k.stop()
	if s.ops.Err() != nil {
		return
	}
	p.fault(s.ops, op, k.queue, k.cmdID, err)
}

// release makes a message visible again at once (not started, or
// interrupted in a time-boxed run).
func (p *Processor) release(s *session, k *keeper) {
	receipt, held := k.stop()
	s.counter.released.Add(1)
	if !held {
		return
	}
	if _, _, err := k.q.UpdateVisibility(s.ops, k.id, receipt, 0); err != nil && !expected(err) {
		p.fault(s.ops, "release", k.queue, k.cmdID, err)
	}
}

// deleteMsg deletes a finished message. It reports whether the lease
// turned out lost (see deleted).
func (p *Processor) deleteMsg(s *session, k *keeper, cmdType string) (lost bool) {
	receipt, held := k.stop()
	if !held {
		return false
	}
	err := k.q.Delete(s.ops, k.id, receipt)
	return p.deleted(s, k, cmdType, err, p.now())
}

// deleted records the outcome of deleting a finished message (answered at
// answered). It reports whether the lease had ended before the delete (a
// lost lease: someone else may hold the message).
func (p *Processor) deleted(s *session, k *keeper, cmdType string, err error, answered time.Time) (lost bool) {
	switch {
	case err == nil:
		p.ok()
		p.leaseClean(cmdType)
	case staleReceipt(err):
		if k.settle(err, answered) {
			// The lease ended before the delete: someone else may hold the
			// message now; they will find the command final.
			return true
		}
		// Answered while the lease was still ours: the first try of this
		// delete landed (404), or one of our renewals did unanswered and
		// the message reappears when that lease ends (400). Not a loss.
		p.ok()
		p.leaseClean(cmdType)
	default:
		p.fault(s.ops, "delete", k.queue, k.cmdID, err)
	}
	return false
}

// poisonOrphan poisons a message that has no command record.
func (p *Processor) poisonOrphan(s *session, qr *queueRunner, k *keeper, m storage.Message, reason string, cause error, key string) {
	text := m.Text
	if len(text) > 1024 {
		text = text[:1024] + "…"
	}
	entry := model.PoisonEntry{CommandID: key, DequeueCount: m.DequeueCount, Reason: reason,
		LastError: fmt.Sprintf("%v; message %s text: %s", cause, m.ID, text), Queue: qr.name, Worker: p.cfg.Worker}
	if env, err := parseMessage(m.Text); err == nil {
		entry.Type = env.Type
	}
	if err := p.st.PoisonMessage(s.ops, entry); err != nil {
		p.giveUp(s, k, "poison", err)
		return
	}
	p.cfg.Logger.Warn().Str("message", m.ID).Str("reason", reason).Err(cause).Msg("cmdq processor: message poisoned")
	s.counter.poisoned.Add(1)
	p.emit(model.Observation{Kind: model.ObservedPoisoned, CommandID: entry.CommandID, Type: entry.Type, Queue: qr.name,
		Attempt: int(m.DequeueCount), Reason: reason, Err: cause})
	p.deleteMsg(s, k, entry.Type)
}

// attempt is one run of one command.
type attempt struct {
	p   *Processor
	s   *session
	qr  *queueRunner
	k   *keeper
	def *registry.Definition
	msg storage.Message
	n   int // attempt number (dequeue count)
	// claimTok is this delivery's claim on the command (Processor.claim).
	claimTok uint64

	// loadedState and loadedAttempts are the command's status and attempts
	// when this delivery loaded it (see supersededBy).
	loadedState    model.State
	loadedAttempts int
	// claim: write started before running the handler (a requeued
	// command, which may have more than one message).
	claim bool
	// startedBy (zero: none) is when a first run that does not claim must
	// have its started event written, or its handler ends: a recovery
	// (a requeued event, then a second message hidden for at least
	// minRecoveryDelay) may have been written since this delivery read
	// the command as pending (its load, or the issue for the fast path),
	// and the second message's delivery, which claims, would then run
	// beside this one. A handler that has not started by then claims
	// first instead.
	startedBy time.Time

	mu             sync.Mutex // guards rec, startedAt, running, startedWritten, finished, over, cancel, lateFinal
	rec            *record.Record
	startedAt      time.Time
	dur            time.Duration // the handler's run time, once it returned
	running        bool
	startedWritten bool
	finished       bool
	// over is set (errFinal, errTakenOver) once the attempt learned that it
	// is superseded: every later write returns it without touching storage.
	over   error
	cancel context.CancelCauseFunc // the handler's context
	// lateFinal is set when the attempt's outcome landed after its lease
	// ended (landedLate): another delivery may still be running the
	// handler, so the command's order key is not handed on here.
	lateFinal bool

	// hrun is the handler's Run once the handler is invoked; outcome and
	// outcomeErr are what became of the attempt (run.End reports them).
	hrun       atomic.Pointer[registry.Attempt]
	outcome    string
	outcomeErr error
	issueTrace string // the issuing trace's ID ("" = none); fixed
}

// final returns the command as the attempt last wrote or read it, and
// whether the attempt's outcome landed after its lease ended (lateFinal).
func (a *attempt) final() (*record.Record, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rec, a.lateFinal
}

// ended sets the attempt's outcome (reported to the Run's OnEnd callbacks
// once the attempt is over).
func (a *attempt) ended(kind string, err error) { a.outcome, a.outcomeErr = kind, err }

// traceID is the trace ID for the attempt's log lines: its span's, else
// the issuing trace's ("" = none).
func (a *attempt) traceID() string {
	if r := a.hrun.Load(); r != nil {
		return r.TraceID()
	}
	return a.issueTrace
}

// traceIDOf returns the trace ID of the command id's attempt this
// processor runs, or "".
func (p *Processor) traceIDOf(id string) string {
	if id == "" {
		return ""
	}
	p.claimMu.Lock()
	a := p.attempts[id]
	p.claimMu.Unlock()
	if a == nil {
		return ""
	}
	return a.traceID()
}

// logCmd adds a command's ID and, when it has one, its trace ID to a log
// line: every log line about a command carries both.
func logCmd(ev *zerolog.Event, id, traceID string) *zerolog.Event {
	ev = ev.Str("command", id)
	if traceID != "" {
		ev = ev.Str("trace_id", traceID)
	}
	return ev
}

func (a *attempt) worker() string { return a.p.cfg.Worker }

func (a *attempt) startedEvent() model.Event {
	return model.Event{Kind: model.EventStarted, Time: a.startedAt, Attempt: a.n, Worker: a.worker(), MessageID: a.msg.ID}
}

// maxLostEvents bounds the lease_lost events one delivery records for the
// deliveries before it (10).
const maxLostEvents = 10

// LostRangeNote is what the first of those events' note adds (a format
// of the first and last delivery numbers) when earlier deliveries left no
// outcome either: they get no event of their own. The reliability suite's
// checker reads it.
const LostRangeNote = "(deliveries %d-%d left none either)"

// lostBefore returns lease_lost events for the deliveries before this one
// that left no outcome: attempts rec.Settled+1 … n-1 (at most the last
// maxLostEvents of them). Their handlers may have run, so every extra run
// is explained in the history. Caller holds a.mu.
func (a *attempt) lostBefore() []model.Event {
	first := a.rec.Settled + 1
	if first >= a.n {
		return nil
	}
	from := max(first, a.n-maxLostEvents)
	evs := make([]model.Event, 0, a.n-from)
	for at := from; at < a.n; at++ {
		note := fmt.Sprintf("delivery %d left no outcome (its processor lost the lease, stopped or crashed, or released it unstarted); the handler may have run; found by delivery %d", at, a.n)
		if at == from && from > first {
			note += " " + fmt.Sprintf(LostRangeNote, first, from-1)
		}
		evs = append(evs, model.Event{Kind: model.EventLeaseLost, Attempt: at, Worker: a.worker(), Note: note})
	}
	return evs
}

// withStarted returns evs preceded by the lease_lost events of earlier
// deliveries without an outcome and by the started event if the handler is
// running and that event is not written yet. Caller holds a.mu.
func (a *attempt) withStarted(evs ...model.Event) []model.Event {
	lost := a.lostBefore()
	started := a.running && !a.startedWritten
	if len(lost) == 0 && !started {
		return evs
	}
	out := make([]model.Event, 0, len(lost)+1+len(evs))
	out = append(out, lost...)
	if started {
		out = append(out, a.startedEvent())
	}
	return append(out, evs...)
}

// leaseLostEvent is this delivery's own lease_lost event.
func (a *attempt) leaseLostEvent(note string) model.Event {
	return model.Event{Kind: model.EventLeaseLost, Attempt: a.n, Worker: a.worker(), Note: note}
}

// recordLost writes this delivery's lease_lost event (with what withStarted
// adds), unless one is recorded already (another delivery found the gap) or
// the attempt is superseded. Caller holds a.mu. Cost: one batch.
func (a *attempt) recordLost(ctx context.Context, note string) {
	err := a.retryConflict(ctx, func() error {
		if a.rec.Settled >= a.n {
			return nil
		}
		if err := a.p.st.Append(ctx, a.rec, a.withStarted(a.leaseLostEvent(note))...); err != nil {
			return err
		}
		a.written()
		return nil
	})
	if err != nil && !superseded(err) && !expected(err) {
		a.p.fault(ctx, "write lease_lost", a.qr.name, a.rec.ID, err)
	}
}

// recordLostAfterCompletion writes this delivery's lease_lost event after
// its own completed event (the lease ended before the message was deleted,
// so a delivery that loaded the command before the completion may run the
// handler again). It is the one event record.Store writes on a final
// command for an attempt: the completing attempt's own. Caller holds a.mu.
// Cost: one batch.
func (a *attempt) recordLostAfterCompletion(ctx context.Context, note string) {
	err := a.p.st.Append(ctx, a.rec, a.leaseLostEvent(note))
	var ce *record.ConflictError
	if errors.As(err, &ce) && ce.Current != nil {
		// Written by someone else since (nothing but an attempt of ours
		// may write on a completed command): try once on the fresh record.
		a.rec = ce.Current
		err = a.p.st.Append(ctx, a.rec, a.leaseLostEvent(note))
	}
	if err != nil && !expected(err) {
		a.p.fault(ctx, "write lease_lost", a.qr.name, a.rec.ID, err)
	}
}

// retryConflict runs try, a conditional write on a.rec. On a conflict (a
// write by someone else: record.Append already recognised its own landed
// writes) it takes the command as reloaded: if that shows the attempt
// superseded (supersededBy) it ends the attempt (supersede) and returns
// errFinal or errTakenOver; otherwise it tries again with the fresh record
// (at most 3 tries in all). Once the attempt is superseded it returns that
// at once, without touching storage. Caller holds a.mu.
func (a *attempt) retryConflict(ctx context.Context, try func() error) error {
	if a.over != nil {
		return a.over
	}
	for i := 0; ; i++ {
		err := try()
		if err == nil || !errors.Is(err, storage.ErrConflict) || i >= 2 {
			return err
		}
		var rec *record.Record
		var ce *record.ConflictError
		if errors.As(err, &ce) && ce.Current != nil {
			rec = ce.Current
		} else {
			var lerr error
			if rec, lerr = a.p.st.Load(ctx, a.rec.ID); lerr != nil {
				return lerr
			}
		}
		a.rec = rec
		if over := a.supersededBy(rec); over != nil {
			a.supersede(over)
			return over
		}
	}
}

// supersededBy says whether the command as reloaded after a conflict (cur)
// ends this attempt: it is final (errFinal); or another delivery recorded
// an outcome for this attempt or a later one (its lease_lost for this
// one: errTakenOver); or, while this attempt's started is not written,
// another delivery started the command since this one loaded it (a second
// message: errTakenOver). nil: write again on cur — also when cur shows
// this attempt's own started event (same message, same attempt), written
// by a call whose answer was lost: it is then noted as written. Caller
// holds a.mu.
func (a *attempt) supersededBy(cur *record.Record) error {
	switch {
	case cur.Status.State == model.StateCancelled:
		return errCancelled
	case cur.Status.State.Final():
		return errFinal
	case cur.Settled >= a.n:
		return errTakenOver
	case !a.startedWritten && cur.Status.State == model.StateRunning && cur.Owner == a.msg.ID && cur.Attempts == a.n:
		// This attempt's own started event: an earlier write of it landed
		// although its call failed (the answer lost, the retry refused).
		// It is written; the attempt goes on.
		a.startedWritten = true
		return nil
	case !a.startedWritten && cur.Status.State == model.StateRunning &&
		(a.loadedState != model.StateRunning || cur.Attempts != a.loadedAttempts):
		return errTakenOver
	}
	return nil
}

// supersede ends the attempt: every later write returns over without
// touching storage, and the handler's context is cancelled with it.
// Caller holds a.mu.
func (a *attempt) supersede(over error) {
	if a.over != nil {
		return
	}
	a.over = over
	if a.cancel != nil {
		a.cancel(over)
	}
	logCmd(a.p.cfg.Logger.Info(), a.rec.ID, a.traceID()).Str("type", a.rec.Type).Int("attempt", a.n).Str("status", string(a.rec.Status.State)).Err(over).Msg("cmdq processor: attempt superseded; it writes nothing more")
}

// written notes a successful write of withStarted's events. Caller holds a.mu.
func (a *attempt) written() {
	if a.running {
		a.startedWritten = true
	}
	a.p.ok()
}

// writeLocked appends events, preceded by the started event if it is not
// written yet, conditionally on the record's ETag, retrying on a conflict
// (see retryConflict). Caller holds a.mu.
func (a *attempt) writeLocked(ctx context.Context, evs ...model.Event) error {
	return a.retryConflict(ctx, func() error {
		if err := a.p.st.Append(ctx, a.rec, a.withStarted(evs...)...); err != nil {
			return err
		}
		a.written()
		return nil
	})
}

// startedWriteIn is how long after the handler starts its started event
// is written when it runs on: StartedWriteDelay, or the lease's first
// renewal if that comes sooner.
func (a *attempt) startedWriteIn() time.Duration {
	a.k.mu.Lock()
	lease := a.k.lease
	a.k.mu.Unlock()
	return min(a.p.cfg.StartedWriteDelay, lease/2)
}

// errUnclaimed is the cancellation cause of a handler whose started event
// could not be written by attempt.startedBy.
var errUnclaimed = errors.New("processor: the started event could not be written before a second message of the command could show up; another delivery may run it")

// unclaimedTooLong ends the handler when its started event is still not
// written at startedBy (see there): renewals stop and the message
// reappears when its lease ends.
func (a *attempt) unclaimedTooLong() {
	a.mu.Lock()
	end := !a.startedWritten && !a.finished && a.over == nil && a.cancel != nil
	id, typ, cancel := a.rec.ID, a.rec.Type, a.cancel
	a.mu.Unlock()
	if end {
		logCmd(a.p.cfg.Logger.Warn(), id, a.traceID()).Str("type", typ).Int("attempt", a.n).Msg("cmdq processor: started not written in time; handler cancelled")
		cancel(errUnclaimed)
	}
}

// minRecoveryDelay is the shortest delay a recovery's message of def's
// type is sent with by any process (Processor.RecoveryDelay with the
// type's base lease, or record.DefaultRecoveryDelay where the type has no
// handler), assuming the processes share StartedWriteDelay.
func (p *Processor) minRecoveryDelay(def *registry.Definition) time.Duration {
	return min(def.Lease+p.cfg.StartedWriteDelay, record.DefaultRecoveryDelay)
}

// writeStarted writes the started event on its own (a handler that runs
// longer than StartedWriteDelay, or whose lease was renewed).
func (a *attempt) writeStarted() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.finished || a.startedWritten || !a.running {
		return
	}
	if err := a.writeLocked(a.s.ops); err != nil && !superseded(err) && !expected(err) {
		a.p.fault(a.s.ops, "write started", a.qr.name, a.rec.ID, err)
	}
}

// recordStep is registry.RunInfo.Record: a step_completed event.
func (a *attempt) recordStep(ctx context.Context, step int, note string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.finished {
		return fmt.Errorf("processor: command %s: step %d recorded after the attempt finished", a.rec.ID, step)
	}
	err := a.writeLocked(ctx, model.Event{Kind: model.EventStepCompleted, Attempt: a.n, Worker: a.worker(), Step: step, Note: note})
	if superseded(err) {
		return fmt.Errorf("command %s is %s: %w", a.rec.ID, a.rec.Status.State, err)
	}
	if err != nil && !expected(err) && ctx.Err() == nil {
		a.p.fault(a.s.ops, "record step", a.qr.name, a.rec.ID, err)
	}
	return err
}

// finish marks the attempt finished and runs f with the lock held.
func (a *attempt) finish(f func() error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.finished = true
	return f()
}

// poison moves the command to the poison table and deletes the message.
func (a *attempt) poison(reason string, cause error, extra ...model.Event) {
	p, s := a.p, a.s
	entry := model.PoisonEntry{DequeueCount: int64(a.n), Reason: reason, LastError: cause.Error(), Queue: a.qr.name, Worker: a.worker()}
	err := a.finish(func() error {
		return a.retryConflict(s.ops, func() error {
			return p.st.Poison(s.ops, a.rec, entry, a.withStarted(extra...)...)
		})
	})
	answered := p.now()
	switch {
	case err == nil:
		// This delivery is done with the command: a requeue may put it
		// back at once (an operator, or a program woken by the outcome
		// below), and its delivery must not find it claimed while this
		// one deletes its message, or it would leave the message hidden
		// for a whole lease (as a second message). The handler has
		// returned, so the claim has nothing left to guard.
		p.unclaim(a.rec.ID, a.claimTok)
		a.ended(registry.OutcomePoisoned, cause)
		logCmd(p.cfg.Logger.Warn(), a.rec.ID, a.traceID()).Str("type", a.rec.Type).Int("attempt", a.n).Str("reason", reason).Err(cause).Msg("cmdq processor: command poisoned")
		s.counter.poisoned.Add(1)
		a.emit(model.ObservedPoisoned, reason, cause)
		p.ok()
		a.landedLate(p.deleteMsg(s, a.k, a.rec.Type), answered)
	case superseded(err):
		a.ended(supersededOutcome(err), err)
		p.deleteMsg(s, a.k, a.rec.Type)
	default:
		a.ended(registry.OutcomeUnrecorded, err)
		p.giveUp(s, a.k, "poison", err)
	}
}

// supersededOutcome is the outcome of an attempt that err (errFinal,
// errTakenOver, errCancelled) ended.
func supersededOutcome(err error) string {
	if errors.Is(err, model.ErrCancelled) {
		return registry.OutcomeCancelled
	}
	return registry.OutcomeSuperseded
}

// run invokes the handler and records the outcome.
func (a *attempt) run() {
	p, s, def := a.p, a.s, a.def
	timeout := def.Timeout // defaulted by registry.Register (10 × Lease)
	hctx, cancel := context.WithCancelCause(s.hard)
	defer cancel(nil)
	hctx, cancelT := context.WithTimeoutCause(hctx, timeout, timeoutCause(timeout))
	defer cancelT()

	a.mu.Lock()
	a.startedAt = p.now()
	a.running = true
	a.cancel = cancel
	a.mu.Unlock()
	defer p.track(a)() // an in-process cancel reaches it (control.go)
	a.k.mu.Lock()
	a.k.onLost = cancel
	a.k.onRenew = a.renewed
	// A lease that has ended by our clock (a renewal failed, and the wait
	// for a slot, the load or the control check took the rest of it) may
	// already be another processor's delivery: the handler does not start
	// (the message reappears; its next delivery runs it). Seen in the
	// chaos suite on Azurite: a renewal timed out, the handler began 0.7 s
	// after another worker's delivery of the same message had begun.
	lost := a.k.lost || !p.now().Before(a.k.expires)
	a.k.mu.Unlock()
	if lost {
		a.k.stop()
		return
	}
	if !a.startedBy.IsZero() && p.until(a.startedBy) < a.startedWriteIn()+safety(a.def.Lease) {
		// Too late to run unclaimed: started would be written (after
		// StartedWriteDelay, or at the first renewal) too close to
		// startedBy, or past it.
		a.claim = true
	}
	if a.claim {
		// A requeued command may have another message: claim it with the
		// started event (a conditional write) before running, so that
		// only one delivery runs it. Cost: one batch, requeued commands
		// only.
		a.mu.Lock()
		err := a.writeLocked(s.ops)
		a.mu.Unlock()
		switch {
		case superseded(err):
			_ = a.finish(func() error { return nil })
			p.deleteMsg(s, a.k, a.rec.Type)
			return
		case err != nil:
			_ = a.finish(func() error { return nil })
			p.giveUp(s, a.k, "write started", err)
			return
		}
	}
	a.mu.Lock()
	lastStep, id, typ, params := a.rec.Step, a.rec.ID, a.rec.Type, a.rec.Params
	a.mu.Unlock()
	defer p.handlerStarted(model.InFlight{ID: id, Type: typ, Queue: a.qr.name, Attempt: a.n, Started: a.startedAt, Worker: a.worker()})()
	startedTimer := p.cfg.Clock.AfterFunc(p.cfg.StartedWriteDelay, a.writeStarted)
	if !a.claim && !a.startedBy.IsZero() {
		deadline := p.cfg.Clock.AfterFunc(p.until(a.startedBy), a.unclaimedTooLong)
		defer deadline.Stop()
	}
	a.mu.Lock()
	run := registry.NewRun(registry.RunInfo{ID: id, Type: typ, Attempt: a.n, LastStep: lastStep, Record: a.recordStep,
		Queue: a.qr.name, CorrelationID: a.rec.CorrelationID, TraceParent: a.rec.TraceParent, TraceState: a.rec.TraceState, TraceID: a.issueTrace})
	a.hrun.Store(run)
	a.outcome = registry.OutcomeUnrecorded
	a.mu.Unlock()
	// Middleware that started something for the attempt (a span) learns
	// its outcome once it is recorded, whichever way the attempt ends.
	defer func() { run.End(registry.Outcome{Kind: a.outcome, Err: a.outcomeErr}) }()

	stack, herr := invoke(hctx, p.reg, def, params, run)
	dur := p.since(a.startedAt)
	a.dur = dur
	startedTimer.Stop()
	cause := context.Cause(hctx)

	a.mu.Lock()
	over := a.over
	a.mu.Unlock()
	switch {
	case over != nil:
		// The command finished elsewhere, or another delivery took it
		// over: whatever the handler returned, nothing more is written.
		a.ended(supersededOutcome(over), over)
		p.observe(dur)
		_ = a.finish(func() error { return nil })
		p.deleteMsg(s, a.k, a.rec.Type)
	case herr == nil:
		p.observe(dur)
		if out, oerr := run.Output(); oerr != nil {
			// SetOutput failed (too large, not JSON) and the handler
			// went on: the attempt fails with that error.
			a.fail(oerr, "")
		} else if ferr := record.OutputFits(a.rec, out); ferr != nil {
			a.fail(ferr, "")
		} else {
			a.complete(out)
		}
	case errors.Is(cause, errLeaseLost), errors.Is(cause, errLeaseExpiring), errors.Is(cause, errUnclaimed):
		// Someone else may be running it (lost), or will once the lease
		// ends (renewals kept failing, or the last one's receipt is
		// unknown, so the handler was cancelled before the lease ended):
		// record only that this delivery's lease ended without an outcome.
		// A failed event would be wrong: the handler did not fail, and
		// the retry delay cannot be set on a message the processor no
		// longer reaches.
		a.k.stop()
		a.ended(registry.OutcomeLeaseLost, cause)
		note := "lease lost while running: a renewal found the message taken after the lease ended; the handler was cancelled and another delivery may run it"
		switch {
		case errors.Is(cause, errLeaseExpiring):
			note = "lease not renewed: renewals failed (or the last one's answer was lost), so the handler was cancelled before the lease ended; the message reappears then and another delivery may run it"
		case errors.Is(cause, errUnclaimed):
			note = "started not written in time: the started event could not be written before a recovery's second message could show up, so the handler was cancelled and the lease left to end; another delivery may run it"
		}
		_ = a.finish(func() error {
			a.recordLost(s.ops, note)
			return nil
		})
	case s.hard.Err() != nil && stack == "" && !errors.Is(cause, errTimeout):
		// Interrupted by shutdown (drain timeout or RunFor's end).
		a.ended(registry.OutcomeInterrupted, cause)
		a.finish(func() error { return nil })
		s.counter.interrupted.Add(1)
		if s.release {
			p.release(s, a.k)
		} else {
			a.k.stop()
		}
	default:
		p.observe(dur)
		if errors.Is(cause, errTimeout) && hctx.Err() != nil && !errors.Is(herr, errTimeout) {
			herr = fmt.Errorf("%w (%w)", herr, cause)
		}
		a.fail(herr, stack)
	}
}

// invoke runs the handler inside its middleware (registry.Invoke),
// turning a panic into an error and its stack.
func invoke(ctx context.Context, reg *registry.Registry, def *registry.Definition, params []byte, run *registry.Attempt) (stack string, err error) {
	defer func() {
		if r := recover(); r != nil {
			stack = string(debug.Stack())
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return "", reg.Invoke(ctx, def, params, run)
}

// complete writes the final batch (started + completed, with the recorded
// output) and deletes the message.
func (a *attempt) complete(output []byte) {
	p, s := a.p, a.s
	if cb, ok := p.store.(storage.Combiner); ok {
		if a.completeCombined(cb, output) {
			return
		}
	}
	var answered time.Time
	err := a.finish(func() error {
		err := a.retryConflict(s.ops, func() error {
			a.withOutput(output)
			if err := a.p.st.Append(s.ops, a.rec, a.withStarted(a.completedEvent())...); err != nil {
				return err
			}
			a.written()
			return nil
		})
		answered = p.now()
		return err
	})
	a.completed(err)
	switch {
	case err == nil:
		s.counter.completed.Add(1)
		a.emit(model.ObservedCompleted, "", nil)
		// The lease may have ended before the completion landed: when the
		// delete finds the message taken, or when the lease could not be
		// kept (lost, or a renewal's receipt unknown) and the completion
		// was answered after its end, a delivery that loaded the command
		// before the completion may run the handler again.
		if a.landedLate(p.deleteMsg(s, a.k, a.rec.Type), answered) {
			a.lostAfterCompletion()
		}
	case superseded(err):
		p.deleteMsg(s, a.k, a.rec.Type)
	default:
		// The message reappears and the handler runs again (at least once).
		p.giveUp(s, a.k, "write completed", err)
	}
}

// landedLate reports whether the attempt's final outcome, answered at
// answered, landed after its lease ended: the delete of its message found
// the message taken (deleteLost), or the lease could not be kept (lost,
// or a renewal's receipt unknown) and ended before the answer. A delivery
// that took the message meanwhile may be running the handler until it
// learns of the outcome, so such an attempt does not hand its order key
// on (lateFinal).
func (a *attempt) landedLate(deleteLost bool, answered time.Time) bool {
	if !deleteLost && !a.k.endedBefore(answered) {
		return false
	}
	a.mu.Lock()
	a.lateFinal = true
	a.mu.Unlock()
	return true
}

// lostAfterCompletion records that the lease of this delivery ended before
// its message was deleted: a delivery that loaded the command before the
// completion may run the handler once more.
func (a *attempt) lostAfterCompletion() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recordLostAfterCompletion(a.s.ops, "lease lost before the message was deleted (the completion was recorded after the lease ended); another delivery may have run the handler again")
}

// completedEvent is the attempt's completed event.
func (a *attempt) completedEvent() model.Event {
	return model.Event{Kind: model.EventCompleted, Attempt: a.n, Worker: a.worker()}
}

// withOutput puts the recorded output (nil: none) into the projection the
// final batch writes: the completed command's row stores it (property
// Output), with no extra call. Set again before every try: a conflict
// reloads the record. Caller holds a.mu.
func (a *attempt) withOutput(output []byte) {
	a.rec.Status.Output = model.JSON(output)
}

// completed sets the attempt's outcome from the final batch's error.
func (a *attempt) completed(err error) {
	switch {
	case err == nil:
		a.ended(registry.OutcomeCompleted, nil)
	case superseded(err):
		a.ended(supersededOutcome(err), err)
	default:
		a.ended(registry.OutcomeUnrecorded, err)
	}
}

// completeCombined writes the final batch and deletes the message in one
// durable write (storage.Combiner: one commit on the embedded store instead
// of two). It stops the lease keeper first, so the receipt cannot change
// under the write. It returns false, having done nothing, when the lease is
// already lost: complete then records the outcome without deleting.
func (a *attempt) completeCombined(cb storage.Combiner, output []byte) bool {
	p, s := a.p, a.s
	receipt, held := a.k.stop()
	if !held {
		return false
	}
	var deleteErr error
	var answered time.Time
	err := a.finish(func() error {
		ev := a.completedEvent()
		return a.retryConflict(s.ops, func() error {
			var err error
			a.withOutput(output)
			deleteErr, err = p.appendAndDelete(s.ops, a.rec, cb, a.k.q.Name(), a.k.id, receipt, a.withStarted(ev)...)
			answered = p.now()
			if err != nil {
				return err
			}
			a.written()
			return nil
		})
	})
	a.completed(err)
	switch {
	case err == nil:
		s.counter.completed.Add(1)
		a.emit(model.ObservedCompleted, "", nil)
		if a.landedLate(p.deleted(s, a.k, a.rec.Type, deleteErr, answered), answered) {
			a.lostAfterCompletion()
		}
	case superseded(err):
		p.deleteMsg(s, a.k, a.rec.Type)
	default:
		// The message reappears when its lease ends and the handler runs
		// again (at least once).
		p.giveUp(s, a.k, "write completed", err)
	}
	return true
}

// appendAndDelete writes a completion's final batch and deletes its
// message in one durable write: with the completions ready at the same
// moment through the completer (storage.GroupCombiner: one write for the
// group), else on its own through cb. Either way it returns once the
// write is durable, and the record store's change hook has run.
func (p *Processor) appendAndDelete(ctx context.Context, rec *record.Record, cb storage.Combiner, queue, id, receipt string, evs ...model.Event) (deleteErr, err error) {
	if p.completer != nil {
		return p.completer.AppendAndDelete(ctx, rec, queue, id, receipt, evs...)
	}
	return p.st.AppendAndDelete(ctx, rec, cb, queue, id, receipt, evs...)
}

// fail records a failed attempt: poisoned if permanent or the attempts are
// spent, otherwise a failed event and the retry delay on the message. A
// deferral (registry.RetryAfter) within the type's MaxDeferrals is
// recorded as a deferred event instead, retried after its own delay and
// not counted toward the poison ceiling; past them it counts as a failed
// attempt (retried after its delay all the same).
func (a *attempt) fail(herr error, stack string) {
	p, s, def := a.p, a.s, a.def
	ceiling, maxDeferrals := p.ceiling(def), p.maxDeferrals(def)
	a.mu.Lock()
	deferrals := min(a.rec.Deferrals, maxDeferrals) // so far: not counted
	a.mu.Unlock()
	// This attempt's number toward the ceiling, if it counts.
	counted := a.n - deferrals
	// The retry delay is chosen first: the event records when the next
	// attempt is due (Status.RunAt), which no delivery starts it before,
	// and from which an operator may make it due now (RunNow).
	delay := def.Retry.Delay(counted)
	ev := model.Event{Kind: model.EventFailed, Attempt: a.n, Worker: a.worker(), Error: herr.Error(), Detail: stack}
	d, deferral := registry.IsRetryAfter(herr)
	if deferral {
		if d > 0 { // d <= 0: the type's retry delay
			delay = d
		}
		delay = min(delay, model.MaxDelay)
		if deferrals < maxDeferrals {
			ev.Kind = model.EventDeferred
			ev.Detail = fmt.Sprintf("deferred by RetryAfter for %s: deferral %d of at most %d (MaxDeferrals); not counted toward the poison ceiling of %d",
				delay, deferrals+1, maxDeferrals, ceiling)
		} else {
			ev.Detail = fmt.Sprintf("deferred by RetryAfter for %s, but the %d deferrals MaxDeferrals allows are spent: counted as failed attempt %d of at most %d",
				delay, maxDeferrals, counted, ceiling)
		}
	}
	delay = min(max(delay, 0), storage.MaxVisibility)
	// The event's time is the decision's: its RunAt is that time plus the
	// delay (the message's delay counts from later, when it is set).
	ev.Time = p.now()
	ev.RunAt = ev.Time.Add(delay)
	// A poisoning attempt's failed event names no retry: none comes.
	noRetry := ev
	noRetry.RunAt = time.Time{}
	var de *registry.DecodeError
	switch {
	case errors.As(herr, &de):
		a.poison(model.ReasonDecode, herr, noRetry)
		return
	case registry.IsPermanent(herr):
		a.poison(model.ReasonPermanent, herr, noRetry)
		return
	case ev.Kind == model.EventDeferred:
	case counted >= ceiling:
		cause := fmt.Errorf("attempt %d of at most %d failed: %w", a.n, ceiling, herr)
		if deferrals > 0 {
			cause = fmt.Errorf("attempt %d of at most %d failed (delivery %d; %d deferrals did not count): %w", counted, ceiling, a.n, deferrals, herr)
		}
		a.poison(model.ReasonAttemptsSpent, cause, noRetry)
		return
	}
	err := a.finish(func() error { return a.writeLocked(s.ops, ev) })
	switch {
	case superseded(err):
		a.ended(supersededOutcome(err), err)
		p.deleteMsg(s, a.k, a.rec.Type)
		return
	case err != nil:
		a.ended(registry.OutcomeUnrecorded, err)
		p.giveUp(s, a.k, "write "+string(ev.Kind), err)
		return
	}
	if ev.Kind == model.EventDeferred {
		a.ended(registry.OutcomeDeferred, herr)
		s.counter.deferred.Add(1)
		a.emit(model.ObservedDeferred, "", herr)
		logCmd(p.cfg.Logger.Info(), a.rec.ID, a.traceID()).Str("type", a.rec.Type).Int("attempt", a.n).Dur("delay", delay).Err(herr).Msg("cmdq processor: attempt deferred; will retry")
	} else {
		a.ended(registry.OutcomeRetrying, herr)
		s.counter.failed.Add(1)
		a.emit(model.ObservedFailed, "", herr)
		logCmd(p.cfg.Logger.Info(), a.rec.ID, a.traceID()).Str("type", a.rec.Type).Int("attempt", a.n).Err(herr).Msg("cmdq processor: attempt failed; will retry")
	}
	receipt, held := a.k.stop()
	if !held {
		return
	}
	// This delivery is done with the command: the retry's delivery (here,
	// at once for a retry due now) must not find it claimed, or it would
	// leave the message hidden for a whole lease (a second message).
	p.unclaim(a.rec.ID, a.claimTok)
	_, visible, err := a.k.q.UpdateVisibility(s.ops, a.k.id, receipt, delay)
	answered := p.now()
	switch {
	case err == nil:
		p.leaseClean(a.rec.Type)
		// Due means due: this processor dequeues the retry when its
		// delay ends, not at its next empty poll: the delay counts from
		// when the queue received the call, before it answered (and
		// Azure's visible time is cut to the second).
		p.wakeAt(a.qr, p.wakeName(a.qr, a.k.id), latest(answered.Add(delay), visible))
	case staleReceipt(err):
		// Answered while the lease was ours: this call's first try landed
		// (the delay is set). Later: the lease had ended (a loss).
		if !a.k.settle(err, p.now()) {
			p.leaseClean(a.rec.Type)
		}
	default:
		p.fault(s.ops, "retry delay", a.qr.name, a.rec.ID, err)
	}
}
