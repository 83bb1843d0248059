package cmdq

import "time"

// Observer receives every processing event of a processor, one
// Observation at a time: metrics, logs and tracing all attach here
// (Config.Observers). Observe runs on the processing path: it must be safe
// for concurrent use, fast, and must not block; a panic in it is recovered
// and dropped.
type Observer interface {
	Observe(o Observation)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(o Observation)

// Observe calls f(o).
func (f ObserverFunc) Observe(o Observation) { f(o) }

// ObservationKind says what an Observation reports.
type ObservationKind string

// The observation kinds. The fields each kind sets are listed with it;
// Time, Worker and, for the command kinds, CommandID, Type and Queue are
// always set.
const (
	// ObservedStarted: a handler started (Attempt).
	ObservedStarted ObservationKind = "started"
	// ObservedCompleted: a handler succeeded and its completion is stored
	// (Attempt, Duration: the handler's run time).
	ObservedCompleted ObservationKind = "completed"
	// ObservedFailed: an attempt failed and will be retried (Attempt,
	// Duration, Err).
	ObservedFailed ObservationKind = "failed"
	// ObservedDeferred: the handler deferred the attempt (RetryAfter) and
	// the deferral is stored: the command is retried after its delay,
	// and the attempt did not count toward the poison ceiling (Attempt,
	// Duration, Err; IsRetryAfter(Err) gives the delay). A deferral past
	// MaxDeferrals is ObservedFailed.
	ObservedDeferred ObservationKind = "deferred"
	// ObservedPoisoned: the command moved to the poison table (Attempt,
	// Reason, Err when an attempt's error poisoned it; Duration when a
	// handler ran). Type is "" for a malformed message.
	ObservedPoisoned ObservationKind = "poisoned"
	// ObservedLeaseLost: the lease of a delivery this processor held
	// ended before its outcome was stored (Attempt).
	ObservedLeaseLost ObservationKind = "lease_lost"
	// ObservedPolled: one dequeue of Queue returned (Received messages, Err
	// when it failed, Wait: the wait chosen before the next dequeue unless
	// woken, 0 when it fetches again as soon as it has room), or, with
	// Paused, one read of a paused queue's control row in its place.
	// CommandID and Type are empty.
	ObservedPolled ObservationKind = "polled"
	// ObservedAlert: an unexpected infrastructure fault (Op names the
	// operation, Err the error; Queue and CommandID when known).
	ObservedAlert ObservationKind = "alert"
	// ObservedHealth: the processor became unhealthy (Health.State is
	// ProcessorUnhealthy, after Config.UnhealthyAfter faults in a row) or
	// healthy again (a storage call succeeded, or ResetHealth).
	ObservedHealth ObservationKind = "health"
	// ObservedPaused: the processor learnt that Queue is paused (By names
	// who paused it): it starts none of its commands and stops dequeuing
	// it. CommandID and Type are empty.
	ObservedPaused ObservationKind = "paused"
	// ObservedResumed: the processor learnt that Queue, which it knew as
	// paused, is resumed (By names who resumed it). CommandID and Type are
	// empty.
	ObservedResumed ObservationKind = "resumed"
	// ObservedWake: the processor's doorbell got a datagram (Reason: the
	// result, "accepted", "forged", "replayed", "stale" or "limited";
	// Queue: the queue it names, unless forged or limited). CommandID and
	// Type are empty (docs/processor.md, "Wake-ups").
	ObservedWake ObservationKind = "wake"
	// ObservedRing: this Client rang the processors of Queue in other
	// processes (one wake-up, or one to each for a pause, a resume or more
	// work than a processor can start). CommandID and Type are empty.
	ObservedRing ObservationKind = "ring"
)

// Observation is one processing event (see ObservationKind for which
// fields each kind sets).
type Observation struct {
	// Kind says what happened.
	Kind ObservationKind
	// Time is when it happened.
	Time time.Time
	// Worker names the processor (Config.Worker).
	Worker string
	// CommandID, Type and Queue identify the command (Queue is the logical
	// queue, such as "commands").
	CommandID, Type, Queue string
	// Attempt is the attempt number (the message's dequeue count).
	Attempt int
	// Duration is the handler's run time.
	Duration time.Duration
	// Err is the attempt's, the dequeue's or the fault's error.
	Err error
	// Reason says why a command was poisoned.
	Reason string
	// Received is how many messages a dequeue returned.
	Received int
	// Paused, on ObservedPolled, says the queue was paused: the poll read
	// the queues' control rows instead of dequeuing (Received is 0).
	Paused bool
	// By is who paused or resumed Queue (ObservedPaused, ObservedResumed).
	By string
	// Wait is the poller's wait after a dequeue.
	Wait time.Duration
	// Op names the failed operation of an alert ("dequeue", "append",
	// "delete", …).
	Op string
	// Health is the processor's health, for ObservedHealth.
	Health ProcessorHealth
}
