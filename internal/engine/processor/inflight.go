package processor

import (
	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// What the processor holds right now, and the in-process change feed: a
// command whose handler runs here is known before its started event is
// written (lazily, after StartedWriteDelay), and every change this
// processor stores is passed to a ChangeObserver as it lands.

// ChangeObserver wants every change this processor stores on a command
// and every handler start and end here (Config.Changes): cmdq.Client's
// does, to wake its watchers (Wait, the HTTP API's
// long-polls and event streams, the operator page) at once instead of at
// their next storage read. Both methods run on the processing path: they
// must be fast and must not block.
type ChangeObserver interface {
	// CommandChanged is called after each write of this processor that
	// changed a command (started, step_completed, failed, completed,
	// poisoned, lease_lost events): st is its status after the write,
	// events the events written, numbered, oldest first (nil when the
	// write was recognised as landed only after a conflict).
	CommandChanged(st model.Status, events []model.Event)
	// InFlightChanged is called when a handler of command id starts or
	// ends on this processor (InFlight reports it meanwhile).
	InFlightChanged(id string)
}

// InFlight reports whether this processor is running a handler of command
// id now, and which attempt since when: the command is running although
// its started event may not be written yet (it is written lazily). It
// makes no storage call.
func (p *Processor) InFlight(id string) (model.InFlight, bool) {
	p.claimMu.Lock()
	defer p.claimMu.Unlock()
	f, ok := p.handling[id]
	return f, ok
}

// changes returns Config.Changes, or nil.
func (p *Processor) changes() ChangeObserver { return p.cfg.Changes }

// commandChanged is the record store's change hook (record.Options.Changed).
func (p *Processor) commandChanged(st model.Status, events []model.Event) {
	if co := p.changes(); co != nil {
		co.CommandChanged(st, events)
	}
}

// handlerStarted records that f's handler runs now; the returned function
// records its end.
func (p *Processor) handlerStarted(f model.InFlight) (ended func()) {
	p.claimMu.Lock()
	if p.handling == nil {
		p.handling = map[string]model.InFlight{}
	}
	p.handling[f.ID] = f
	p.claimMu.Unlock()
	co := p.changes()
	if co != nil {
		co.InFlightChanged(f.ID)
	}
	p.emit(model.Observation{Kind: model.ObservedStarted, Time: f.Started, CommandID: f.ID, Type: f.Type, Queue: f.Queue, Attempt: f.Attempt})
	return func() {
		p.claimMu.Lock()
		delete(p.handling, f.ID)
		p.claimMu.Unlock()
		if co != nil {
			co.InFlightChanged(f.ID)
		}
	}
}

// Holds reports whether this processor holds a message of command id that
// waits for a handler slot (dequeued or handed off, its handler not
// started yet).
func (p *Processor) Holds(id string) bool {
	p.claimMu.Lock()
	defer p.claimMu.Unlock()
	_, claimed := p.claimed[id]
	_, running := p.handling[id]
	return claimed && !running
}
