package processor

import (
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// emit passes o, with its Time and Worker set, to Config.Observer. A panic
// in the observer is recovered and dropped, so a faulty observer cannot
// kill a worker.
func (p *Processor) emit(o model.Observation) {
	if o.Kind == model.ObservedFailed || o.Kind == model.ObservedPoisoned {
		p.noteFailure(o) // for the heartbeat (heartbeat.go)
	}
	if p.cfg.Observer == nil {
		return
	}
	if o.Time.IsZero() {
		o.Time = time.Now()
	}
	o.Worker = p.cfg.Worker
	defer func() { _ = recover() }()
	p.cfg.Observer.Observe(o)
}

// emitCommand emits an observation of kind about attempt a's command.
func (a *attempt) emit(kind model.ObservationKind, reason string, err error) {
	a.p.emit(model.Observation{Kind: kind, CommandID: a.rec.ID, Type: a.rec.Type, Queue: a.qr.name,
		Attempt: a.n, Duration: a.dur, Reason: reason, Err: err})
}
