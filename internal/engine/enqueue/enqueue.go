package enqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/storage"
)

// Enqueuer is the one enqueue path: every queue message of a stored
// command — its issue, a re-issue, a background retry, a requeue and a
// reconcile — is put on the command's queue by the Enqueuer (Enqueue,
// Recover, Requeue, Reconcile; for an issue on a store that commits both in
// one write, Create), sent with no transport retries, which wakes
// an in-process processor through the wake function as soon as the message
// is on its queue. Recover is the recovery enqueue of a command that may
// have a message already (see docs/lifecycle.md, "Duplicate messages").
// Safe for concurrent use.
type Enqueuer struct {
	st      storage.Store
	names   layout.Names
	rec     *record.Store
	wake    func(queue string)
	wakeAt  func(queue string, at time.Time)
	handOff func(queue, cmdType string) Slot
	horizon time.Duration // the longest visibility delay of a message (SetHorizon)

	mu     sync.Mutex
	queues map[string]storage.Queue
}

// NewEnqueuer returns the enqueue path on st's queues named by names, with
// rec for the commands' records and markers. wake, if not nil, is called
// with the logical queue after every message put on it; it must not block
// (processor.Processor.Notify).
func NewEnqueuer(st storage.Store, names layout.Names, rec *record.Store, wake func(queue string)) *Enqueuer {
	return &Enqueuer{st: st, names: names, rec: rec, wake: wake, horizon: storage.MaxVisibility, queues: map[string]storage.Queue{}}
}

// SetWakeAt sets what is told of a message put on a logical queue with a
// visibility delay: wakeAt(queue, at) with the time it becomes visible
// (processor.Processor.WakeAt: the in-process processor wakes itself
// then). It must not block. Call it before the Enqueuer is used. Default
// nil: nobody is told (a delayed message never calls the wake function:
// there is nothing to dequeue yet).
func (e *Enqueuer) SetWakeAt(wakeAt func(queue string, at time.Time)) { e.wakeAt = wakeAt }

// SetHorizon sets the longest visibility delay a message is enqueued with
// (default and at most storage.MaxVisibility, 7 days): a scheduled
// command due later is enqueued with this delay and hops (Hop) when it
// shows up early. Tests shorten it (tuning.Switches.HopHorizon). Call it
// before the Enqueuer is used; 0 or less keeps the default.
func (e *Enqueuer) SetHorizon(d time.Duration) {
	if d > 0 && d <= storage.MaxVisibility {
		e.horizon = d
	}
}

// Horizon returns the longest visibility delay a message is enqueued with
// (SetHorizon).
func (e *Enqueuer) Horizon() time.Duration { return e.horizon }

// delayUntil returns the visibility delay that makes a message enqueued
// now visible at due (rounded up to the millisecond, at most the
// horizon; 0 when due is not ahead).
func (e *Enqueuer) delayUntil(due time.Time) time.Duration {
	d := due.Sub(e.now())
	if d <= 0 {
		return 0
	}
	d = (d + time.Millisecond - 1).Truncate(time.Millisecond)
	return min(d, e.horizon)
}

// now returns the current time on the clock of the commands' records
// (record.Options.Now): delays and due times count on it.
func (e *Enqueuer) now() time.Time { return e.rec.Now() }

// Slot is a handler slot of a processor in this process, reserved for the
// issue's own message of a command about to be enqueued (the in-process
// hand-off): the message is enqueued invisible for Visibility (the type's
// lease) and handed over with Take — the processor runs it like a
// dequeued message, without a dequeue — or the slot is given back with
// Cancel when the enqueue failed. Exactly one of Take and Cancel is called.
type Slot interface {
	// Visibility is the enqueue's visibility delay: the lease the
	// processor holds the message with.
	Visibility() time.Duration
	// Take hands over the enqueued message m (as Enqueue returned it:
	// ID, pop receipt, next-visible time), whose text is text, enqueued by
	// a call sent at sent.
	Take(m storage.Message, text string, sent time.Time)
	// Cancel gives the slot back.
	Cancel()
}

// SetHandOff sets the in-process hand-off: handOff returns a reserved
// Slot for a message of cmdType on logical queue, or nil when no processor
// here can take it now (then the message is enqueued visible and the wake
// function called). Call it before the Enqueuer is used. Default nil: no
// hand-off.
func (e *Enqueuer) SetHandOff(handOff func(queue, cmdType string) Slot) { e.handOff = handOff }

// slot reserves a hand-off slot, or returns nil.
func (e *Enqueuer) slot(queue, cmdType string) Slot {
	if e.handOff == nil {
		return nil
	}
	return e.handOff(queue, cmdType)
}

// Store returns the store of the commands the Enqueuer enqueues (their
// records and markers).
func (e *Enqueuer) Store() *record.Store { return e.rec }

// Names returns the storage names the Enqueuer uses.
func (e *Enqueuer) Names() layout.Names { return e.names }

// Queue returns the storage queue of a logical queue (opened once).
func (e *Enqueuer) Queue(ctx context.Context, logical string) (storage.Queue, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if q, ok := e.queues[logical]; ok {
		return q, nil
	}
	q, err := OpenQueue(ctx, e.st, e.names, logical) // its shards when it has several
	if err != nil {
		return nil, err
	}
	e.queues[logical] = q
	return q, nil
}

// sent is called once a message is on logical queue, as message ID id: it
// wakes an in-process processor (of a sharded queue, with the name of the
// message's shard, so that the processor dequeues that shard first).
func (e *Enqueuer) sent(queue, id string) {
	if e.wake != nil {
		e.wake(e.wakeName(queue, id))
	}
}

// wakeName is the name an in-process processor is woken with for message
// id of logical queue: the queue, or the storage name of the message's
// shard.
func (e *Enqueuer) wakeName(queue, id string) string {
	if e.names.ShardCount(queue) > 1 {
		return e.names.ShardQueue(queue, ShardOf(id))
	}
	return queue
}

// combinedQueue returns the storage queue a combined write (a
// storage.Combiner's) puts a message of logical queue on: the queue, or
// its next shard (round robin).
func (e *Enqueuer) combinedQueue(ctx context.Context, logical string) (name string, shard int, err error) {
	if e.names.ShardCount(logical) == 1 {
		return e.names.Queue(logical), 0, nil
	}
	q, err := e.Queue(ctx, logical)
	if err != nil {
		return "", 0, err
	}
	shard = q.(*ShardedQueue).NextShard()
	return e.names.ShardQueue(logical, shard), shard, nil
}

// sentDelayed is sent for a message (ID id) enqueued with visibility
// delay d by a call answered at at, which the queue says becomes visible
// at visible (zero: unknown): the processor is told when it becomes
// visible (or woken now when d is 0). The queue counts the delay from
// when it received the call, before it answered: at + d is not early,
// and late by at most the answer's way back, where the call's start + d
// was early by the request's way there (a loaded queue service took
// 300 ms) and Azure's visible time is cut to the second.
func (e *Enqueuer) sentDelayed(queue, id string, at time.Time, d time.Duration, visible time.Time) {
	if d <= 0 {
		e.sent(queue, id)
		return
	}
	if e.wakeAt != nil {
		due := at.Add(d)
		if visible.After(due) {
			due = visible // Azure counts whole seconds
		}
		e.wakeAt(e.wakeName(queue, id), due)
	}
}

// Create stores a new command. On a store that can commit the issue batch
// and the enqueue together (storage.Combiner: the embedded store) it writes
// both in one durable write, leaves no gap for the reconciler to close and
// reports enqueued; otherwise only the command is stored and the caller
// enqueues env, the issue's own message (EnqueueEnvelope). env carries what
// the first delivery needs to run without loading the command
// (FirstEnvelope). Errors are record.Store.Create's.
func (e *Enqueuer) Create(ctx context.Context, nc record.NewCommand) (env layout.Envelope, enqueued bool, err error) {
	nc = e.rec.StampIssued(nc)
	if _, ok := e.st.(storage.Combiner); !ok {
		etag, err := e.rec.CreateETag(ctx, nc)
		if err != nil {
			return layout.Envelope{}, false, err
		}
		return FirstEnvelope(nc, etag), false, nil
	}
	if !nc.RunAt.After(e.now()) {
		// A scheduled command is never handed off: it waits on its
		// queue, invisible until its time.
		if slot := e.slot(nc.Queue, nc.Type); slot != nil {
			return e.createHandOff(ctx, nc, slot)
		}
	}
	errs, _ := e.CreateMany(ctx, []record.NewCommand{nc})
	if errs[0] != nil {
		return layout.Envelope{}, false, errs[0]
	}
	return layout.Envelope{ID: nc.ID, Type: nc.Type}, true, nil
}

// createHandOff is Create on a Combiner with a reserved hand-off slot: the
// command and its message, invisible for the slot's visibility and marked
// handed off, in one durable write; the message is then handed to the
// slot (no wake-up: nothing to dequeue).
func (e *Enqueuer) createHandOff(ctx context.Context, nc record.NewCommand, slot Slot) (layout.Envelope, bool, error) {
	cb := e.st.(storage.Combiner)
	ops, err := e.rec.CreateOps(nc)
	if err != nil {
		slot.Cancel()
		return layout.Envelope{}, false, err
	}
	tb, err := e.rec.Tables().ForWrite(ctx, nc.ID) // the ID's day table (layout.Names.TableOf)
	if err != nil {
		slot.Cancel()
		return layout.Envelope{}, false, record.CreateErr(nc.ID, err)
	}
	qname, shard, err := e.combinedQueue(ctx, nc.Queue)
	if err != nil {
		slot.Cancel()
		return layout.Envelope{}, false, record.CreateErr(nc.ID, err)
	}
	var text string
	item := storage.CombinedItem{PartitionKey: nc.ID, Ops: ops, TextFunc: func(etags []string) string {
		env := FirstEnvelope(nc, etags[0])
		env.HandedOff = true
		text = env.Marshal()
		return text
	}}
	sent := e.now()
	res, err := cb.BatchEnqueueMany(ctx, tb.Name(), qname, []storage.CombinedItem{item}, slot.Visibility(), storage.NoExpiry)
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		slot.Cancel()
		return layout.Envelope{}, false, record.CreateErr(nc.ID, err)
	}
	m := res[0].Message
	m.ID = shardID(shard, m.ID)
	slot.Take(m, text, sent)
	return layout.Envelope{ID: nc.ID, Type: nc.Type, HandedOff: true}, true, nil
}

// CreateMany stores new commands and their messages in one durable write
// per queue on a store that can (storage.Combiner: the embedded store), and
// wakes an in-process processor once per queue. Each message is the
// issue's own (FirstEnvelope, with the ETag of the row the same write
// stores). errs[i] is ncs[i]'s error (as Create's; nil: stored and
// enqueued). ok is false on a store that cannot: nothing is written and
// the caller issues them one by one. Commands must have distinct IDs.
func (e *Enqueuer) CreateMany(ctx context.Context, ncs []record.NewCommand) (errs []error, ok bool) {
	cb, isCombiner := e.st.(storage.Combiner)
	if !isCombiner {
		return nil, false
	}
	errs = make([]error, len(ncs))
	// One write per queue, table and run-at time (commands of different
	// days go to different day tables; a scheduled command's message is
	// invisible until its run-at time).
	type group struct {
		queue, table string
		runAt        time.Time
	}
	byGroup := map[group][]int{}
	var groups []group
	for i, nc := range ncs {
		tb, err := e.rec.Tables().ForWrite(ctx, nc.ID)
		if err != nil {
			errs[i] = record.CreateErr(nc.ID, err)
			continue
		}
		g := group{nc.Queue, tb.Name(), layout.Millis(nc.RunAt)}
		if _, seen := byGroup[g]; !seen {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], i)
	}
	for _, g := range groups {
		queue, idx := g.queue, byGroup[g]
		items := make([]storage.CombinedItem, 0, len(idx))
		sent := make([]int, 0, len(idx))
		for _, i := range idx {
			nc := e.rec.StampIssued(ncs[i])
			ops, err := e.rec.CreateOps(nc)
			if err != nil {
				errs[i] = err
				continue
			}
			items = append(items, storage.CombinedItem{PartitionKey: nc.ID, Ops: ops, TextFunc: func(etags []string) string {
				return FirstEnvelope(nc, etags[0]).Marshal()
			}})
			sent = append(sent, i)
		}
		if len(items) == 0 {
			continue
		}
		qname, shard, err := e.combinedQueue(ctx, queue)
		delay := e.delayUntil(g.runAt)
		var res []storage.CombinedResult
		if err == nil {
			res, err = cb.BatchEnqueueMany(ctx, g.table, qname, items, delay, storage.NoExpiry)
		}
		at := e.now() // answered
		any := false
		for k, i := range sent {
			switch {
			case err != nil:
				errs[i] = record.CreateErr(ncs[i].ID, err)
			case res[k].Err != nil:
				errs[i] = record.CreateErr(ncs[i].ID, res[k].Err)
			default:
				any = true
			}
		}
		var visible time.Time
		for k := range sent {
			if err == nil && res[k].Err == nil && res[k].Message.NextVisibleAt.After(visible) {
				visible = res[k].Message.NextVisibleAt
			}
		}
		if any {
			e.sentDelayed(queue, shardID(shard, ""), at, delay, visible)
		}
	}
	return errs, true
}

// Enqueue puts the message of the stored command id on its logical queue
// and wakes an in-process processor. The message is sent once, with no
// transport retries (storage.WithCallBudget with 0 retries; a per-try
// timeout in ctx is kept): a try whose answer was lost after the message
// landed is a failed enqueue, which the caller recovers from (a marker, a
// background retry, the reconciler: each a recovery enqueue, see Recover),
// never a silent second message.
func (e *Enqueuer) Enqueue(ctx context.Context, id, cmdType, queue string) error {
	return e.enqueue(ctx, layout.Envelope{ID: id, Type: cmdType}, queue, 0)
}

// EnqueueEnvelope is Enqueue of the message env (the issue's own message,
// from Create, carries First).
//
// An issue's own message (with First) is handed off when a processor here
// has a free slot (SetHandOff): enqueued invisible for the slot's
// visibility, marked HandedOff, and given to that processor, without a
// wake-up.
//
// A scheduled command's own message (First.RunAt ahead) is never handed
// off: it is enqueued invisible until its run-at time (at most the
// horizon: it hops when it shows up early), and the in-process processor
// is told when it becomes visible (SetWakeAt).
func (e *Enqueuer) EnqueueEnvelope(ctx context.Context, env layout.Envelope, queue string) error {
	if env.First != nil && env.First.RunAt.After(e.now()) {
		return e.enqueue(ctx, env, queue, e.delayUntil(env.First.RunAt))
	}
	if env.First != nil && !env.HandedOff {
		if slot := e.slot(queue, env.Type); slot != nil {
			env.HandedOff = true
			q, err := e.Queue(ctx, queue)
			if err != nil {
				slot.Cancel()
				return err
			}
			b, _ := storage.CallBudgetFrom(ctx)
			text, sent := env.Marshal(), e.now()
			m, err := q.Enqueue(storage.WithRoutingKey(storage.WithCallBudget(ctx, b.PerTry, 0), env.ID), text, slot.Visibility(), storage.NoExpiry)
			if err != nil {
				slot.Cancel()
				return err
			}
			slot.Take(m, text, sent)
			return nil
		}
	}
	return e.enqueue(ctx, env, queue, 0)
}

// enqueue is Enqueue with the message visible after delay (at most the
// horizon).
func (e *Enqueuer) enqueue(ctx context.Context, env layout.Envelope, queue string, delay time.Duration) error {
	_, err := e.enqueueText(ctx, env.Marshal(), env.ID, queue, delay)
	return err
}

// enqueueText puts text (of command routeKey) on logical queue, visible after delay (at most
// the horizon), with no transport retries, and tells the in-process
// processor (at once, or when it becomes visible). It returns the delay
// used.
func (e *Enqueuer) enqueueText(ctx context.Context, text, routeKey, queue string, delay time.Duration) (time.Duration, error) {
	delay = min(max(delay, 0), e.horizon)
	q, err := e.Queue(ctx, queue)
	var m storage.Message
	if err == nil {
		// The command's ID routes the message to the account of its rows
		// on a store spread over several (storage/multi).
		b, _ := storage.CallBudgetFrom(ctx)
		m, err = q.Enqueue(storage.WithRoutingKey(storage.WithCallBudget(ctx, b.PerTry, 0), routeKey), text, delay, storage.NoExpiry)
	}
	if err != nil {
		return 0, err
	}
	e.sentDelayed(queue, m.ID, e.now(), delay, m.NextVisibleAt)
	return delay, nil
}

// Hop puts a message of the scheduled command id that showed up before its
// time (text, its text as dequeued) back on its logical queue, invisible
// until due (at most the horizon: a command due later hops again): the
// second half of a hop, after the processor deleted the message it
// dequeued. One enqueue, sent once with no transport retries; the
// in-process processor is told when it becomes visible. It returns the
// delay used. See docs/lifecycle.md, "Scheduled commands".
func (e *Enqueuer) Hop(ctx context.Context, id, text, queue string, due time.Time) (time.Duration, error) {
	return e.enqueueText(ctx, text, id, queue, max(e.delayUntil(due), time.Millisecond))
}

// Recover is a recovery enqueue of the stored command rec, which is
// pending and has never started: a message may exist for it after all (an
// enqueue whose answer was lost, another recovery). It appends a requeued
// event by `by` (conditional on rec's ETag; on a conflict, someone else
// wrote the command: one that started is left alone, nothing done, no
// error; one still pending — another recovery's requeued — is requeued
// once more with again, or left alone without), then enqueues its message
// with a visibility delay of record.Store.RecoveryDelay (at least the type's
// lease) and no transport retries. The requeued event makes the processor
// claim the command with its started event before running it (a
// conditional write), so that of two messages only one runs it; the delay
// lets a first message that is being handled write its started first, so
// that the second is deleted unrun. See docs/lifecycle.md, "Duplicate
// messages". requeued reports the requeued event written, enqueued the
// message sent. Cost: 1 batch + 1 enqueue (+ 1 point read on a conflict).
func (e *Enqueuer) Recover(ctx context.Context, rec *record.Record, by, note string, again bool) (requeued, enqueued bool, err error) {
	s := e.rec
	for try := 0; ; try++ {
		err = s.Append(ctx, rec, model.Event{Kind: model.EventRequeued, By: by, Note: note})
		if err == nil {
			break
		}
		if !errors.Is(err, storage.ErrConflict) || try > 0 {
			return false, false, fmt.Errorf("cmdq: record the requeue of %s: %w", rec.ID, err)
		}
		var ce *record.ConflictError
		if !errors.As(err, &ce) || ce.Current == nil {
			return false, false, fmt.Errorf("cmdq: record the requeue of %s: %w", rec.ID, err)
		}
		if cur := ce.Current; cur.Status.State != model.StatePending || cur.Attempts != 0 || !again {
			return false, false, nil // started (or finished) meanwhile: it has a message; or another recovery's
		}
		rec = ce.Current
	}
	if err := e.enqueue(ctx, layout.Envelope{ID: rec.ID, Type: rec.Type}, rec.Queue, e.recoveryDelay(rec)); err != nil {
		return true, false, err
	}
	return true, true, nil
}

// recoveryDelay is the visibility delay of a recovery message of rec:
// record.Store.RecoveryDelay of its type, counted from its run-at time when that
// is ahead — the issue's own message may exist and becomes visible then,
// and its first delivery may start it from what it carries (the fast
// path) for half a lease: the second message becomes visible only once
// that delivery has written its started event.
func (e *Enqueuer) recoveryDelay(rec *record.Record) time.Duration {
	d := e.rec.RecoveryDelay(rec.Type)
	if wait := rec.Status.RunAt.Sub(e.now()); wait > 0 {
		d += wait
	}
	return d
}

// Depth returns the approximate number of messages on a logical queue,
// visible or not: one storage call. It is not exact (see
// storage.Queue.ApproximateCount).
func (e *Enqueuer) Depth(ctx context.Context, logical string) (int, error) {
	q, err := e.Queue(ctx, logical)
	if err != nil {
		return 0, fmt.Errorf("cmdq: queue %q: %w", logical, err)
	}
	n, err := q.ApproximateCount(ctx)
	if err != nil {
		return 0, fmt.Errorf("cmdq: depth of queue %q: %w", logical, err)
	}
	return n, nil
}

// Requeue puts a poisoned command back: projection → pending, due now,
// with a requeued event (By = by, RunAt = now), the poison entry removed, a new message on the command's
// queue (which wakes an in-process processor). Cost: 2 point reads + 1
// batch + 1 delete + 1 enqueue.
// Not poisoned → model.ErrNotPoisoned; unknown → model.ErrNotFound; an
// entry with no stored command (a malformed message) → model.ErrNoCommand:
// there is nothing to run, so fix the producer and Discard it.
//
// Of concurrent requeues of one command exactly one succeeds; the others
// get ErrNotPoisoned. Two claims decide: the requeued batch is conditional
// on the command row's ETag (of requeues that loaded it poisoned, one
// writes), and the poison entry is removed before the enqueue, by exactly
// one requeue (the others find it gone): only that one enqueues. (A requeue
// that loads the command just after another one's requeued event, while
// the entry is still there, gets ErrNotPoisoned at once: it neither
// removes the entry nor enqueues, so the other one enqueues the command,
// visible at once. Only an entry put back by a failed requeue, marked
// record.RequeueFailedProp, or one left by a requeue that died half-way
// (record.RequeueInFlight) takes the path of a requeue after a failed one,
// below.)
//
// If the enqueue fails the command (already pending) is marked for the
// reconciler and the error says so. If the marker cannot be written either,
// the entry is put back and the error says to requeue again (if even that
// fails, the reconciler's pending scan finds the command): a Requeue of a
// command that is pending and never started since (with its entry)
// enqueues it without another requeued event, its message delayed by
// record.Store.RecoveryDelay (the first enqueue may have landed after all; see
// docs/lifecycle.md, "Duplicate messages").
func (e *Enqueuer) Requeue(ctx context.Context, id, by string) error {
	s := e.rec
	rec, entry, err := s.LoadPoisoned(ctx, id, true)
	if err != nil {
		return err
	}
	var delay time.Duration
	if rec.Status.State == model.StatePoisoned {
		// Due now: the poisoning attempt's failed event named when a retry
		// would have been due (the policy's delay, computed before the
		// error was known to poison), and the command would otherwise wait
		// for that time.
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventRequeued, By: by, RunAt: layout.Millis(s.Now()), Note: "requeued from the poison table"}); err != nil {
			var ce *record.ConflictError
			if errors.As(err, &ce) && ce.Current != nil && ce.Current.Status.State != model.StatePoisoned {
				return fmt.Errorf("%w: command %s is %s: someone else requeued or discarded it meanwhile", model.ErrNotPoisoned, id, ce.Current.Status.State)
			}
			return err
		}
	} else {
		// Requeued before, and its enqueue may have landed after all: a
		// recovery, delayed (docs/lifecycle.md, "Duplicate messages").
		delay = e.recoveryDelay(rec)
	}
	// The claim: of the requeues that got this far, one removes the entry.
	if err := s.PoisonTable().Delete(ctx, id, "", storage.IfMatchAny); err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return fmt.Errorf("%w: command %s was requeued by someone else meanwhile", model.ErrNotPoisoned, id)
		}
		return fmt.Errorf("cmdq: requeue %s: remove its poison entry: %w", id, err)
	}
	err = e.enqueue(ctx, layout.Envelope{ID: rec.ID, Type: rec.Type}, rec.Queue, delay)
	if err == nil {
		return nil
	}
	merr := s.MarkUnqueued(ctx, rec.ID, rec.Queue)
	if merr == nil {
		return fmt.Errorf("cmdq: requeue %s: command is pending but its enqueue failed (the reconciler will enqueue it): %w", id, err)
	}
	// Nothing would queue it soon: put the entry back, so that the
	// operator sees it and can requeue again.
	err = errors.Join(err, merr)
	if _, perr := s.PoisonTable().Upsert(ctx, record.RequeueFailedEntity(entry), storage.Replace); perr != nil {
		return fmt.Errorf("cmdq: requeue %s: command is pending but could not be queued, marked for the reconciler nor put back in the poison table (the reconciler's pending scan will find it): %w", id, errors.Join(err, perr))
	}
	return fmt.Errorf("cmdq: requeue %s: command is pending but could not be queued nor marked for the reconciler; requeue it again: %w", id, err)
}

// FirstEnvelope returns the issue's own message of command nc, issued with
// the a:cmd ETag etag: with First when its parameters fit
// (MaxFirstParamsBytes), a plain envelope otherwise. nc.IssuedAt must be the
// issue time that was stored.
func FirstEnvelope(nc record.NewCommand, etag string) layout.Envelope {
	env := layout.Envelope{ID: nc.ID, Type: nc.Type}
	params := nc.Params
	if len(params) == 0 {
		params = []byte("{}")
	}
	if etag == "" || len(params) > layout.MaxFirstParamsBytes || !json.Valid(params) {
		return env
	}
	env.First = &layout.First{ETag: etag, IssuedAt: layout.Millis(nc.IssuedAt), Queue: nc.Queue, CorrelationID: nc.CorrelationID,
		TraceParent: nc.TraceParent, TraceState: nc.TraceState, Params: json.RawMessage(params), OrderKey: nc.OrderKey, OrderSeq: nc.OrderSeq}
	if !nc.RunAt.IsZero() {
		env.First.RunAt = layout.Millis(nc.RunAt)
	}
	return env
}
