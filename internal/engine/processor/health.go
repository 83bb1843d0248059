package processor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

type health struct {
	mu          sync.Mutex
	state       model.ProcessorState // activity state (not unhealthy)
	since       time.Time
	unhealthy   bool
	unSince     time.Time
	lastErr     string
	lastErrAt   time.Time
	consecutive int
	inFlight    int
	polling     int
	draining    bool
	stopped     bool
	reset       chan struct{} // closed and replaced by ResetHealth
	storageFull string        // why the store refuses writes (space.go), "" while it accepts them
}

func newHealth() *health {
	return &health{state: model.ProcessorStarting, since: time.Now(), reset: make(chan struct{})}
}

// setLocked recomputes the activity state.
func (h *health) recompute() {
	var s model.ProcessorState
	switch {
	case h.stopped:
		s = model.ProcessorStopped
	case h.draining:
		s = model.ProcessorDraining
	case h.inFlight > 0:
		s = model.ProcessorWorking
	case h.polling > 0:
		s = model.ProcessorPolling
	case h.state == model.ProcessorStarting:
		s = model.ProcessorStarting
	default:
		s = model.ProcessorIdle
	}
	if s != h.state {
		h.state, h.since = s, time.Now()
	}
}

func (h *health) snapshot() model.Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := model.Health{State: h.state, Since: h.since, LastError: h.lastErr, LastErrorAt: h.lastErrAt,
		ConsecutiveFaults: h.consecutive, InFlight: h.inFlight, StorageFull: h.storageFull}
	if h.unhealthy && !h.stopped {
		out.State, out.Since = model.ProcessorUnhealthy, h.unSince
	}
	// Times as every other time cmdq shows: UTC, to the millisecond.
	out.Since, out.LastErrorAt = msUTC(out.Since), msUTC(out.LastErrorAt)
	return out
}

// msUTC is t in UTC, truncated to the millisecond (the zero time stays
// zero).
func msUTC(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Millisecond)
}

// expected reports whether err is a storage outcome the processor handles as
// part of normal operation (a race or a stale receipt), not a fault.
func expected(err error) bool {
	return errors.Is(err, storage.ErrLeaseLost) || errors.Is(err, storage.ErrConflict) ||
		errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrExists) ||
		errors.Is(err, context.Canceled)
}

// fault records an infrastructure fault: logs it, alerts, counts it.
func (p *Processor) fault(ctx context.Context, op, queue, id string, err error) {
	if errors.Is(err, storage.ErrFull) {
		// Not a fault: the store refuses writes until space is freed
		// (space.go); the attempt is run again once its lease ends.
		p.noteSpace(err)
		return
	}
	now := time.Now()
	ev := p.cfg.Logger.Error().Err(err).Str("op", op).Str("queue", queue)
	if id != "" {
		ev = logCmd(ev, id, p.traceIDOf(id))
	}
	ev.Msg("cmdq processor: storage fault")
	p.emit(model.Observation{Kind: model.ObservedAlert, Time: now, Op: op, Queue: queue, CommandID: id, Err: err})
	p.probe.Failed()
	h := p.health
	h.mu.Lock()
	h.lastErr, h.lastErrAt = op+": "+err.Error(), now
	h.consecutive++
	becameUnhealthy := false
	if !h.unhealthy && h.consecutive >= p.cfg.UnhealthyAfter {
		h.unhealthy, h.unSince, becameUnhealthy = true, now, true
	}
	h.mu.Unlock()
	if becameUnhealthy {
		p.cfg.Logger.Error().Int("faults", p.cfg.UnhealthyAfter).Bool("flywheel", p.cfg.Flywheel).Msg("cmdq processor: unhealthy")
		p.emit(model.Observation{Kind: model.ObservedHealth, Time: now, Op: op, Queue: queue, CommandID: id, Err: err, Health: p.Health()})
	}
}

// ok records a successful storage operation.
func (p *Processor) ok() {
	p.probe.Succeeded(time.Now())
	h := p.health
	h.mu.Lock()
	recovered := h.consecutive > 0
	h.consecutive = 0
	healed := h.unhealthy && !p.cfg.Flywheel
	if healed {
		h.unhealthy = false
	}
	h.mu.Unlock()
	if healed {
		p.emit(model.Observation{Kind: model.ObservedHealth, Health: p.Health()})
	}
	if recovered {
		p.storageRecovered()
	}
}

// pulling reports whether pollers may dequeue; if not, it returns a channel
// closed when ResetHealth is called.
func (p *Processor) pulling() (bool, <-chan struct{}) {
	h := p.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.cfg.Flywheel && h.unhealthy {
		return false, h.reset
	}
	return true, nil
}

// Health returns the processor's current state, last fault and since when.
func (p *Processor) Health() model.Health {
	h := p.health.snapshot()
	if r := p.Retention(); len(r.Pinned) > 0 || r.LastError != "" {
		h.Retention = &r
	}
	return h
}

// ResetHealth clears the unhealthy state and the fault count. With
// Config.Flywheel this is how an operator lets the processor pull work again.
func (p *Processor) ResetHealth() {
	h := p.health
	h.mu.Lock()
	was := h.unhealthy
	h.unhealthy = false
	h.consecutive = 0
	close(h.reset)
	h.reset = make(chan struct{})
	h.mu.Unlock()
	p.cfg.Logger.Info().Msg("cmdq processor: health reset")
	if was {
		p.emit(model.Observation{Kind: model.ObservedHealth, Health: p.Health()})
	}
}

func (h *health) update(f func(h *health)) {
	h.mu.Lock()
	f(h)
	h.recompute()
	h.mu.Unlock()
}
