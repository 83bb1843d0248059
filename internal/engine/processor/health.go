package processor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// State is the processor's health state, reported by Health.
type State string

// Processor states.
const (
	// Starting: created, not yet polled.
	Starting State = "starting"
	// Polling: a dequeue is in progress and no handler is running.
	Polling State = "polling"
	// Working: at least one message is in flight.
	Working State = "working"
	// Idle: nothing in flight; waiting for the next poll.
	Idle State = "idle"
	// Draining: stopping; running handlers are finishing.
	Draining State = "draining"
	// Stopped: Run or RunFor has returned.
	Stopped State = "stopped"
	// Unhealthy: UnhealthyAfter consecutive infrastructure faults. With
	// Config.Flywheel the processor pulls no work until ResetHealth.
	Unhealthy State = "unhealthy"
)

// Health is a snapshot of the processor's state.
type Health struct {
	// State is the current state.
	State State `json:"state"`
	// Since is when the state was entered.
	Since time.Time `json:"since"`
	// LastError is the last infrastructure fault ("" if none yet).
	LastError string `json:"lastError,omitempty"`
	// LastErrorAt is when it happened.
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
	// ConsecutiveFaults counts faults since the last successful storage operation.
	ConsecutiveFaults int `json:"consecutiveFaults"`
	// InFlight is the number of messages dequeued and not yet finished.
	InFlight int `json:"inFlight"`
	// Retention is the last retention sweep's outcome when it needs a
	// look: day tables pinned by commands that are not final, or an error
	// (nil otherwise; Processor.Retention always has it).
	Retention *RetentionStatus `json:"retention,omitempty"`
}

// Healthy reports whether h's state is anything but Unhealthy.
func (h Health) Healthy() bool { return h.State != Unhealthy }

type health struct {
	mu          sync.Mutex
	state       State // activity state (not unhealthy)
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
}

func newHealth() *health {
	return &health{state: Starting, since: time.Now(), reset: make(chan struct{})}
}

// setLocked recomputes the activity state.
func (h *health) recompute() {
	var s State
	switch {
	case h.stopped:
		s = Stopped
	case h.draining:
		s = Draining
	case h.inFlight > 0:
		s = Working
	case h.polling > 0:
		s = Polling
	case h.state == Starting:
		s = Starting
	default:
		s = Idle
	}
	if s != h.state {
		h.state, h.since = s, time.Now()
	}
}

func (h *health) snapshot() Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := Health{State: h.state, Since: h.since, LastError: h.lastErr, LastErrorAt: h.lastErrAt,
		ConsecutiveFaults: h.consecutive, InFlight: h.inFlight}
	if h.unhealthy && !h.stopped {
		out.State, out.Since = Unhealthy, h.unSince
	}
	return out
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
	now := time.Now()
	p.cfg.Logger.Error().Err(err).Str("op", op).Str("queue", queue).Str("command", id).Msg("cmdq processor: storage fault")
	p.alert(ctx, Alert{Kind: AlertFault, Op: op, Queue: queue, CommandID: id, Err: err, Time: now})
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
		p.alert(ctx, Alert{Kind: AlertUnhealthy, Op: op, Queue: queue, CommandID: id, Err: err, Time: now})
	}
}

// ok records a successful storage operation.
func (p *Processor) ok() {
	p.probe.Succeeded(time.Now())
	h := p.health
	h.mu.Lock()
	recovered := h.consecutive > 0
	h.consecutive = 0
	if h.unhealthy && !p.cfg.Flywheel {
		h.unhealthy = false
	}
	h.mu.Unlock()
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
func (p *Processor) Health() Health {
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
	h.unhealthy = false
	h.consecutive = 0
	close(h.reset)
	h.reset = make(chan struct{})
	h.mu.Unlock()
	p.cfg.Logger.Info().Msg("cmdq processor: health reset")
}

func (h *health) update(f func(h *health)) {
	h.mu.Lock()
	f(h)
	h.recompute()
	h.mu.Unlock()
}
