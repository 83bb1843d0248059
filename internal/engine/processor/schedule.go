package processor

import (
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/storage"
)

// Scheduled commands and early messages (docs/lifecycle.md, "Scheduled
// commands"): a delivery of a command that is not due yet — pending with
// a run-at time ahead, or retrying with its retry delay not ended — never
// starts it. Due within holdLimit (the clocks' skew), the delivery holds
// the message until then; later, the message goes back on the queue
// until its time:
//
//   - a pending (scheduled) command's message hops: it is deleted, then
//     enqueued again with its text (the issue's own message keeps what it
//     carries for the fast path) and the rest of the delay, at most the
//     horizon (7 days): so a command due in 30 days hops about four
//     times, once a week, and its message's dequeue count starts again
//     from 0 (a hop is no attempt). Delete first: a failed enqueue leaves
//     the command without a message, never with two; it is marked for
//     the reconciler, whose recovery message is claimed by its delivery.
//     Cost: 1 delete + 1 enqueue (+ the dequeue's share); no read for the
//     issue's own message, 1 point read for another.
//   - a retrying command's message (its retry delay could not be set, so
//     it showed up when its lease ended) is made invisible again until
//     the retry is due (one UpdateVisibility; this delivery counts toward
//     the poison ceiling, as any dequeue does).

// holdLimit is how early a message may show up and be held until its
// command is due rather than put back (model.MaxClockSkew, 2 s).
const holdLimit = model.MaxClockSkew

// hold waits d (a message held until its command is due); false when the
// session stops taking work first.
func (p *Processor) hold(s *session, d time.Duration) bool {
	t := p.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-s.take.Done():
		return false
	}
}

// notDue puts back the message m of command rec, which is not due for
// longer than holdLimit (see above).
func (p *Processor) notDue(s *session, qr *queueRunner, k *keeper, env layout.Envelope, m storage.Message, rec *record.Record) {
	s.counter.hops.Add(1)
	due := rec.Status.RunAt
	if rec.Status.State == model.StateRetrying {
		receipt, held := k.stop()
		if !held {
			return
		}
		delay := min(p.until(due), storage.MaxVisibility)
		_, visible, err := k.q.UpdateVisibility(s.ops, k.id, receipt, delay)
		answered := p.now() // the delay counts from before it: a wake-up then is not early
		if err != nil {
			if !expected(err) {
				p.fault(s.ops, "retry delay", qr.name, rec.ID, err)
			}
			return
		}
		p.ok()
		p.wakeAt(qr, p.wakeName(qr, k.id), latest(answered.Add(delay), visible))
		return
	}
	if env.First == nil {
		// A second message (a recovery): it becomes visible a recovery
		// delay after the run-at time, when the issue's own message, if
		// it exists, has been started from what it carries.
		due = due.Add(p.RecoveryDelay(rec.Type))
	}
	if !p.hopTo(s, qr, k, env, m, rec, due) {
		return
	}
	p.cfg.Logger.Debug().Str("command", rec.ID).Str("type", rec.Type).Time("runAt", rec.Status.RunAt).Msg("cmdq processor: a scheduled command's message showed up early; put back until its time")
}

// hopTo puts the message m of command rec (not started) back on its
// queue, invisible until due: a delete and an enqueue of a new message
// (a fresh dequeue count). It reports whether the new message is on the
// queue (else the reconciler is told, or the old one reappears).
func (p *Processor) hopTo(s *session, qr *queueRunner, k *keeper, env layout.Envelope, m storage.Message, rec *record.Record, due time.Time) bool {
	text := m.Text
	if env.HandedOff {
		plain := env
		plain.HandedOff = false
		text = plain.Marshal()
	}
	receipt, held := k.stop()
	if !held {
		return false
	}
	err := k.q.Delete(s.ops, k.id, receipt)
	switch {
	case err == nil:
		p.ok()
	case staleReceipt(err):
		if k.settle(err, p.now()) {
			return false // the lease had ended: another delivery holds the message and hops it
		}
		// Answered while the lease was ours: the delete's first try
		// landed (the message is gone), or the message reappears. The
		// reconciler finds out and recovers the command if it has no
		// message (a recovery's message is claimed by its delivery).
		p.markUnqueued(s, qr, rec)
		return false
	default:
		p.fault(s.ops, "hop: delete", qr.name, rec.ID, err)
		return false // the message reappears when its lease ends, and hops then
	}
	if _, err := p.enq.Hop(s.ops, rec.ID, text, qr.name, due); err != nil {
		p.fault(s.ops, "hop: enqueue", qr.name, rec.ID, err)
		p.markUnqueued(s, qr, rec)
		return false
	}
	return true
}

// markUnqueued marks command rec for the reconciler: its message may be
// gone (a hop whose enqueue failed).
func (p *Processor) markUnqueued(s *session, qr *queueRunner, rec *record.Record) {
	if err := p.st.MarkUnqueued(s.ops, rec.ID, qr.name); err != nil {
		p.fault(s.ops, "mark unqueued", qr.name, rec.ID, err)
	}
}
