package cmdqtype

import "time"

// The processors' heartbeats: every running processor writes a row saying
// who and where it is and what it does, at most once a
// DefaultHeartbeatInterval (docs/lifecycle.md, "Processor heartbeats"),
// so that operators see every processor on every machine
// (cmdq.Client.Processors, GET /v1/processors, the console's overview).

// Heartbeat defaults and limits.
const (
	// DefaultHeartbeatInterval is how often a running processor rewrites
	// its heartbeat row (1 minute): 60 upserts an hour per processor.
	DefaultHeartbeatInterval = time.Minute
	// NoHeartbeat set as HeartbeatInterval disables the heartbeat: the
	// processor writes no row and is not listed.
	NoHeartbeat time.Duration = -1
	// ProcessorGoneAfter is how many heartbeat intervals may pass without
	// a write before a processor is reported gone (3): it stopped without
	// deleting its row (killed, crashed, cut off from storage).
	ProcessorGoneAfter = 3
	// ProcessorForgetAfter is how long after its last write a gone
	// processor's row is kept (1 hour): processors delete older rows when
	// they clean up (about once an hour each), and listings leave them out.
	ProcessorForgetAfter = time.Hour
)

// ProcessorInfo is one processor as its heartbeat row reports it
// (cmdq.Client.Processors, GET /v1/processors).
type ProcessorInfo struct {
	// ID is the processor's instance ID: made when the processor is
	// created, so a restarted process is a new processor.
	ID string `json:"id"`
	// Name is the processor's worker name (cmdq.Config.Worker,
	// "<hostname>-<pid>" by default): the name events carry.
	Name string `json:"name"`
	// Host is the host name of its machine.
	Host string `json:"host"`
	// PID is its process ID.
	PID int `json:"pid"`
	// State is what it was doing (polling, working, idle, draining,
	// unhealthy, …) at its last heartbeat, or now for the asking Client's
	// own processor (Local); "gone" when Gone.
	State string `json:"state"`
	// InFlight is how many messages it held (dequeued, not finished), as
	// State.
	InFlight int `json:"inFlight"`
	// Concurrency is its number of handler slots.
	Concurrency int `json:"concurrency"`
	// Queues are the logical queues it polls.
	Queues []string `json:"queues"`
	// Started is when its current run began (UTC).
	Started time.Time `json:"started"`
	// LastSeen is when it last wrote its heartbeat (UTC).
	LastSeen time.Time `json:"lastSeen"`
	// IntervalMS is its heartbeat interval, in milliseconds.
	IntervalMS int64 `json:"intervalMs"`
	// Gone is true when no heartbeat came for ProcessorGoneAfter
	// intervals: the processor stopped without saying so.
	Gone bool `json:"gone,omitempty"`
	// Local is true for the asking Client's own processor (State and
	// InFlight are then live).
	Local bool `json:"local,omitempty"`
	// Totals count what its current run did until LastSeen: completed
	// commands, failed attempts, poisoned commands.
	Totals OutcomeCounts `json:"totals"`
	// Recent counts the same over the heartbeat interval before LastSeen
	// (a minute by default): its throughput then.
	Recent OutcomeCounts `json:"recent"`
	// LastFailure is its run's last failed or poisoned attempt (nil when
	// none), as of LastSeen.
	LastFailure *Failure `json:"lastFailure,omitempty"`
}

// OutcomeCounts count completed commands, failed attempts and poisoned
// commands.
type OutcomeCounts struct {
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	Poisoned  int64 `json:"poisoned"`
}

// Failure is one failed or poisoned attempt a processor reports.
type Failure struct {
	// CommandID is the command's ID.
	CommandID string `json:"commandId"`
	// Type is its type.
	Type string `json:"type"`
	// Error is the attempt's error (at most 1024 UTF-16 units).
	Error string `json:"error"`
	// Poisoned is true when the attempt poisoned the command (else it is
	// retried).
	Poisoned bool `json:"poisoned,omitempty"`
	// At is when it failed (UTC).
	At time.Time `json:"at"`
}
