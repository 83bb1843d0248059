package processor

import (
	"time"

	"github.com/cmdq-dev/cmdq/cmdqtype"
)

// What the processor holds right now, and the in-process change feed: a
// command whose handler runs here is known before its started event is
// written (lazily, after StartedWriteDelay), and every change this
// processor stores is passed to a ChangeObserver as it lands.

// ChangeObserver is an Observer that also wants every change this
// processor stores on a command and every handler start and end here.
// When Config.Observer implements it, the processor calls it;
// cmdq.Client's observer does, to wake its watchers (Wait, the HTTP API's
// long-polls and event streams, the operator page) at once instead of at
// their next storage read. Both methods run on the processing path: they
// must be fast and must not block.
type ChangeObserver interface {
	Observer
	// CommandChanged is called after each write of this processor that
	// changed a command (started, step_completed, failed, completed,
	// poisoned, lease_lost events): st is its status after the write,
	// events the events written, numbered, oldest first (nil when the
	// write was recognised as landed only after a conflict).
	CommandChanged(st cmdqtype.Status, events []cmdqtype.Event)
	// InFlightChanged is called when a handler of command id starts or
	// ends on this processor (InFlight reports it meanwhile).
	InFlightChanged(id string)
}

// InFlight is a command whose handler this processor runs now.
type InFlight struct {
	// ID and Type are the command's.
	ID, Type string
	// Attempt is the attempt's number (the message's dequeue count).
	Attempt int
	// Started is when the handler started.
	Started time.Time
	// Worker names this processor (Config.Worker).
	Worker string
}

// InFlight reports whether this processor is running a handler of command
// id now, and which attempt since when: the command is running although
// its started event may not be written yet (it is written lazily). It
// makes no storage call.
func (p *Processor) InFlight(id string) (InFlight, bool) {
	p.claimMu.Lock()
	defer p.claimMu.Unlock()
	f, ok := p.handling[id]
	return f, ok
}

// changes returns Config.Observer as a ChangeObserver, or nil.
func (p *Processor) changes() ChangeObserver {
	co, _ := p.cfg.Observer.(ChangeObserver)
	return co
}

// commandChanged is the record store's change hook (record.Options.Changed).
func (p *Processor) commandChanged(st cmdqtype.Status, events []cmdqtype.Event) {
	if co := p.changes(); co != nil {
		co.CommandChanged(st, events)
	}
}

// handlerStarted records that f's handler runs now; the returned function
// records its end.
func (p *Processor) handlerStarted(f InFlight) (ended func()) {
	p.claimMu.Lock()
	if p.handling == nil {
		p.handling = map[string]InFlight{}
	}
	p.handling[f.ID] = f
	p.claimMu.Unlock()
	co := p.changes()
	if co != nil {
		co.InFlightChanged(f.ID)
	}
	return func() {
		p.claimMu.Lock()
		delete(p.handling, f.ID)
		p.claimMu.Unlock()
		if co != nil {
			co.InFlightChanged(f.ID)
		}
	}
}
