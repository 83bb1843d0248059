package cmdq

import "time"

// The processor's reports: its health (Client.Health), its counts
// (Client.Stats), what a RunFor did and the commands it runs now.

// ProcessorState is what the processor is doing (ProcessorHealth.State;
// a command's lifecycle state is a State).
type ProcessorState string

// The processor states.
const (
	// ProcessorStarting: created, not yet polled.
	ProcessorStarting ProcessorState = "starting"
	// ProcessorPolling: a dequeue is in progress and no handler is running.
	ProcessorPolling ProcessorState = "polling"
	// ProcessorWorking: at least one message is in flight.
	ProcessorWorking ProcessorState = "working"
	// ProcessorIdle: nothing in flight; waiting for the next poll.
	ProcessorIdle ProcessorState = "idle"
	// ProcessorDraining: stopping; running handlers are finishing.
	ProcessorDraining ProcessorState = "draining"
	// ProcessorStopped: processing has ended (or never started: a Client
	// without handlers reports it).
	ProcessorStopped ProcessorState = "stopped"
	// ProcessorUnhealthy: Config.UnhealthyAfter consecutive infrastructure
	// faults. With Config.Flywheel the processor pulls no work until
	// ResetHealth.
	ProcessorUnhealthy ProcessorState = "unhealthy"
)

// ProcessorHealth is a snapshot of the Client's processor's state
// (Client.Health; GET /readyz's detail).
type ProcessorHealth struct {
	// State is the current state.
	State ProcessorState `json:"state"`
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
	// (nil otherwise).
	Retention *RetentionStatus `json:"retention,omitempty"`
	// Wake is the address this Client's processor listens on for
	// wake-ups from other processes while it runs ("" when it does not:
	// not running, the doorbell off, no secret, the embedded store).
	Wake string `json:"wake,omitempty"`
	// Unreachable are the doorbell addresses of the processors this
	// Client rang whose last wake-ups went unacked (Processors says which
	// processors they are); their commands start at their next poll.
	Unreachable []string `json:"unreachable,omitempty"`
	// ClockOffset is how far the storage service's clock is ahead of this
	// machine's (negative: behind), estimated from its responses (Azure
	// Storage's Date header); 0 for a store without a clock of its own
	// (the embedded store). Past 1 s the Client runs on the service's
	// time. ClockOffsetMS is the same in milliseconds (JSON).
	ClockOffset   time.Duration `json:"-"`
	ClockOffsetMS int64         `json:"clockOffsetMs,omitempty"`
	// ClockSkewed is true when ClockOffset is past the 2 s of skew the
	// engine allows between processes: cmdq corrects for it, but this
	// machine's time sync (NTP) needs a look.
	ClockSkewed bool `json:"clockSkewed,omitempty"`
	// Accounts is the state of each storage account of a store spread
	// over several (storage/multi), in its order; nil for one account.
	// A failing account is named here while the others keep working.
	Accounts []AccountHealth `json:"accounts,omitempty"`
	// StorageFull, while the embedded store refuses writes because its
	// disk is (nearly) full (ErrStorageFull), says so: the data
	// directory, its free space and the space needed. The processor
	// takes no work meanwhile (it could not record it) and takes work
	// again by itself within about a second of space returning. Empty
	// otherwise. The processor stays healthy: this is no fault.
	StorageFull string `json:"storageFull,omitempty"`
}

// AccountHealth is one storage account's state (ProcessorHealth.Accounts).
type AccountHealth struct {
	// Name identifies the account (its name and endpoint).
	Name string `json:"name"`
	// Healthy is false from a call that found it unavailable until one
	// succeeds again.
	Healthy bool `json:"healthy"`
	// Since is when Healthy last changed (absent if it never did).
	Since time.Time `json:"since,omitzero"`
	// LastError is the error that made it unhealthy.
	LastError string `json:"lastError,omitempty"`
}

// Healthy reports whether h's state is anything but ProcessorUnhealthy.
func (h ProcessorHealth) Healthy() bool { return h.State != ProcessorUnhealthy }

// StopReason says why RunFor returned.
type StopReason string

// Stop reasons.
const (
	// StopDeadline: the next handler might not have finished before the end.
	StopDeadline StopReason = "deadline"
	// StopIdle: the queues were empty and waiting longer would not fit.
	StopIdle StopReason = "idle"
	// StopCancelled: the context ended.
	StopCancelled StopReason = "cancelled"
)

// RunForSummary reports what one RunFor did.
type RunForSummary struct {
	// Processed counts messages taken and finished (any outcome, including
	// messages of already-final commands that were only deleted).
	Processed int
	// Completed, Failed and Poisoned count handler outcomes (Failed: attempts
	// that will be retried).
	Completed, Failed, Poisoned int
	// Released counts messages dequeued but not run, made visible again at once.
	Released int
	// Interrupted counts handlers cancelled at the end (their messages were
	// released for RunFor, left to their lease for Run).
	Interrupted int
	// Duplicates counts second messages for a command: those this processor
	// was already handling (left invisible until their lease ends), and
	// those whose command another message started (deleted unrun).
	Duplicates int
	// Deferred counts attempts a handler deferred with RetryAfter, which
	// are not in Failed (one past the type's MaxDeferrals is a failed
	// attempt, counted in Failed).
	Deferred int
	// Duration is how long the run took.
	Duration time.Duration
	// StoppedBecause says why it stopped.
	StoppedBecause StopReason
}

// ProcessorStats are the Client's processor's running counts since New,
// over all its Start, Run and RunFor calls (Client.Stats; a RunFor's
// RunForSummary counts that run only). Counts mean what RunForSummary's
// do. A count grows just after its outcome is stored, so a reader
// may see a command completed a moment before Stats counts it; once Run or
// RunFor has returned, the counts are final.
type ProcessorStats struct {
	// Processed counts messages taken and finished (any outcome, including
	// messages of already-final commands that were only deleted).
	Processed int64
	// Completed, Failed and Poisoned count handler outcomes (Failed:
	// attempts that will be retried).
	Completed, Failed, Poisoned int64
	// Released counts messages dequeued but not run, made visible again.
	Released int64
	// Interrupted counts handlers cancelled at the end of a run.
	Interrupted int64
	// Duplicates counts second messages for a command, as
	// RunForSummary.Duplicates.
	Duplicates int64
	// FastPath counts first deliveries that ran their handler without
	// loading the command (the fast path; docs/lifecycle.md, "First
	// delivery"). Every other delivery made one point read first.
	FastPath int64
	// HandedOff counts messages this Client issued and handed to its own
	// processor right after enqueueing them (no dequeue).
	HandedOff int64
	// Hops counts messages of scheduled commands that showed up before
	// their time and were put back on their queue until it (deleted and
	// enqueued again, the handler not run; docs/lifecycle.md, "Scheduled
	// commands"), and early messages of retrying commands made invisible
	// again until their retry is due. Not counted in Processed.
	Hops int64
	// Deferred counts attempts a handler deferred with RetryAfter, as
	// RunForSummary.Deferred.
	Deferred int64
	// InFlight is the number of messages dequeued and not yet finished now.
	InFlight int
	// Running reports whether Run or RunFor is in progress.
	Running bool
}

// RetentionStatus is what the processor's last retention sweep did
// (ProcessorHealth.Retention; docs/lifecycle.md, "Retention"). The sweep
// runs with the reconciler's pending scan, every
// Config.ReconcileScanInterval (default 24 h).
type RetentionStatus struct {
	// LastSweep is when the last sweep ended (zero: none yet).
	LastSweep time.Time `json:"lastSweep,omitzero"`
	// Dropped, Moved and Deleted count, over the processor's life, the day
	// tables dropped, the commands moved to the base table (poisoned ones,
	// ones kept longer than their table) and the expired commands deleted
	// from the base table.
	Dropped int `json:"dropped"`
	Moved   int `json:"moved"`
	Deleted int `json:"deleted"`
	// Pinned maps each day table that the last sweep had to keep because
	// some of its commands are not final (pending, running, retrying long
	// after their day) to the number of those commands. Such a table is
	// looked at again by the next sweep; a command stuck there for days
	// needs an operator's look.
	Pinned map[string]int `json:"pinned,omitempty"`
	// LastError is the last sweep's error ("" if it succeeded).
	LastError string `json:"lastError,omitempty"`
}

// RunningCommand is a command whose handler the Client's processor runs
// now (Client.Running).
type RunningCommand struct {
	// ID and Type are the command's.
	ID, Type string
	// Queue is the command's logical queue.
	Queue string
	// Attempt is the attempt's number (the message's dequeue count).
	Attempt int
	// Started is when the handler started.
	Started time.Time
	// Worker names this processor (Config.Worker).
	Worker string
}
