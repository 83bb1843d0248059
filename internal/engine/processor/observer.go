package processor

import (
	"context"
	"time"
)

// Observer receives the processor's measurements. Implementations must be
// safe for concurrent use and fast (they run on the processing path).
// metrics.Metrics implements it with Prometheus collectors; embed
// NopObserver to implement only the methods you need.
type Observer interface {
	// CommandCompleted counts a command whose handler succeeded.
	CommandCompleted(cmdType string)
	// CommandFailed counts a failed attempt that will be retried.
	CommandFailed(cmdType string)
	// CommandPoisoned counts a command moved to the poison table. cmdType is
	// "" for a malformed message.
	CommandPoisoned(cmdType string)
	// HandlerDuration observes one handler run (success or failure).
	HandlerDuration(cmdType string, d time.Duration)
	// LeaseLost counts a lease lost while this processor held the message.
	LeaseLost(cmdType string)
	// PollInterval reports the wait chosen after a poll of queue (0 after a
	// non-empty poll that fetches again at once).
	PollInterval(queue string, d time.Duration)
	// Polled counts one dequeue of queue; empty says whether it returned nothing.
	Polled(queue string, empty bool)
}

// NopObserver implements Observer by ignoring every call: embed it in your
// own Observer to implement only some methods.
type NopObserver struct{}

var _ Observer = NopObserver{}

// CommandCompleted does nothing.
func (NopObserver) CommandCompleted(string) {}

// CommandFailed does nothing.
func (NopObserver) CommandFailed(string) {}

// CommandPoisoned does nothing.
func (NopObserver) CommandPoisoned(string) {}

// HandlerDuration does nothing.
func (NopObserver) HandlerDuration(string, time.Duration) {}

// LeaseLost does nothing.
func (NopObserver) LeaseLost(string) {}

// PollInterval does nothing.
func (NopObserver) PollInterval(string, time.Duration) {}

// Polled does nothing.
func (NopObserver) Polled(string, bool) {}

// PollEvent describes one dequeue, for Config.OnPoll.
type PollEvent struct {
	// Queue is the logical queue name (e.g. "commands").
	Queue string
	// Time is when the dequeue returned.
	Time time.Time
	// Received is the number of messages it returned.
	Received int
	// Err is the dequeue's error, if any.
	Err error
	// Wait is the time the poller will wait before the next dequeue unless
	// woken by Notify (0 when it fetches again as soon as it has capacity).
	Wait time.Duration
}

// AlertKind classifies an Alert.
type AlertKind string

// Alert kinds.
const (
	// AlertFault is an unexpected infrastructure error (storage unreachable,
	// throttled, a write that failed for a reason other than a known race).
	AlertFault AlertKind = "fault"
	// AlertUnhealthy is sent once when consecutive faults make the processor unhealthy.
	AlertUnhealthy AlertKind = "unhealthy"
)

// Alert is sent to Config.AlertHook.
type Alert struct {
	Kind AlertKind
	// Op names the operation that failed (e.g. "dequeue", "append", "delete").
	Op string
	// Queue and CommandID locate it when known.
	Queue, CommandID string
	Err              error
	Time             time.Time
}

// hook calls the alert hook with recover so a faulty hook cannot kill a worker.
func (p *Processor) alert(ctx context.Context, a Alert) {
	if p.cfg.AlertHook == nil {
		return
	}
	defer func() { _ = recover() }()
	p.cfg.AlertHook(ctx, a)
}
