package processor

import (
	"container/heap"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/clock"
	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
)

// Due means due (docs/processor.md, "Waking when a delay ends"): a
// message this process put on a queue with a visibility delay — a retry
// delay, a scheduled command issued by a Client in this process, a hop, a
// recovery — wakes the queue's poller when it becomes visible, instead of
// waiting for the poller's next empty-poll backoff (up to
// MaxPollInterval). One timer serves every queue: it is armed for the
// earliest due time; due times are rounded up to dueGrain and kept once
// per queue and grain, so a burst of commands due together costs one
// wake-up (and so at most one dequeue). Nothing is kept or woken while
// no delay is pending: an idle queue costs what it did.

// dueGrain is the granularity of due times (50 ms): wake-ups within it
// are one.
const dueGrain = 50 * time.Millisecond

// dueSlack is added to a due time: the queue service counts the delay
// from when it received the enqueue, a little after it was sent.
const dueSlack = 20 * time.Millisecond

// maxDue bounds the due times kept (10,000): beyond it new ones are not
// kept (their messages are found by the next poll, within
// MaxPollInterval).
const maxDue = 10000

type dueEntry struct {
	at   time.Time
	qr   *queueRunner
	name string // what to wake: the queue's name, or a shard's (Notify)
}

type dueHeap []dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// dueTimes are the pending wake-ups of the processor's queues.
type dueTimes struct {
	mu    sync.Mutex
	heap  dueHeap
	set   map[dueKey]bool
	timer clock.Timer
	armed time.Time // when timer fires (zero: not armed)
}

type dueKey struct {
	name string
	at   int64 // UnixNano, a multiple of dueGrain
}

// WakeAt wakes the poller of queue (a logical or storage name) at at: a
// message put on it becomes visible then (enqueue.Enqueuer.SetWakeAt; the
// Client wires its Issuer's and its own enqueues to it). A time not ahead
// wakes it at once (Notify). It never blocks; unknown queues are ignored.
func (p *Processor) WakeAt(queue string, at time.Time) {
	qr := p.byName[queue]
	if qr == nil {
		return
	}
	p.wakeAt(qr, queue, at)
}

// wakeAt wakes qr's poller at at (rounded up to dueGrain, plus dueSlack),
// as Notify(name) does: name is qr's name or, on a sharded queue, the
// shard that holds the message (dequeued first).
func (p *Processor) wakeAt(qr *queueRunner, name string, at time.Time) {
	at = at.Add(dueSlack)
	if !at.After(p.now()) {
		p.Notify(name)
		return
	}
	g := int64(dueGrain)
	n := (at.UnixNano() + g - 1) / g * g
	k := dueKey{name: name, at: n}
	d := &p.due
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.set == nil {
		d.set = map[dueKey]bool{}
	}
	if d.set[k] || len(d.heap) >= maxDue {
		return
	}
	d.set[k] = true
	heap.Push(&d.heap, dueEntry{at: time.Unix(0, n), qr: qr, name: name})
	p.armLocked()
}

// armLocked arms the timer for the earliest due time. Caller holds p.due.mu.
func (p *Processor) armLocked() {
	d := &p.due
	if len(d.heap) == 0 {
		return
	}
	first := d.heap[0].at
	if !d.armed.IsZero() && !first.Before(d.armed) {
		return // armed for it (or earlier) already
	}
	d.armed = first
	wait := p.until(first)
	if d.timer == nil {
		d.timer = p.cfg.Clock.AfterFunc(wait, p.dueFired)
		return
	}
	d.timer.Reset(wait)
}

// dueFired wakes the pollers whose due times have come and arms the timer
// for the next one.
func (p *Processor) dueFired() {
	d := &p.due
	now := p.now()
	var wake []string
	d.mu.Lock()
	d.armed = time.Time{}
	for len(d.heap) > 0 && !d.heap[0].at.After(now) {
		e := heap.Pop(&d.heap).(dueEntry)
		delete(d.set, dueKey{name: e.name, at: e.at.UnixNano()})
		wake = append(wake, e.name)
	}
	p.armLocked()
	d.mu.Unlock()
	for _, name := range wake {
		p.Notify(name)
	}
}

// DuePending returns the number of wake-ups the processor keeps for
// delays it knows of (for tests and health).
func (p *Processor) DuePending() int {
	p.due.mu.Lock()
	defer p.due.mu.Unlock()
	return len(p.due.heap)
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// wakeName is the name that wakes qr's poller for the message msgID:
// on a sharded queue its shard's storage name (enqueue.ShardOf), so that the
// poller dequeues that shard first; else qr's name.
func (p *Processor) wakeName(qr *queueRunner, msgID string) string {
	if qr.shards > 1 {
		return p.names.ShardQueue(qr.name, enqueue.ShardOf(msgID))
	}
	return qr.name
}
