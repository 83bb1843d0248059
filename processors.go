package cmdq

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// Processors lists every processor on the store (every process and
// machine with the same prefix) from their heartbeat rows
// (Config.HeartbeatInterval): name, host, process ID, state, messages in
// flight, queues, when its run started and when it was last seen. A
// processor whose row was not rewritten for model.ProcessorGoneAfter
// of its intervals is Gone (killed, crashed or cut off from storage: its
// State then says "gone"); rows older than model.ProcessorForgetAfter
// are left out (processors delete them). The Client's own processor, when
// running, is Local, with its state and in-flight count as of now. Sorted:
// running ones first, then by host and name. Cost: one query (one request
// per 1000 processors).
func (c *Client) Processors(ctx context.Context) ([]ProcessorInfo, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return nil, err
	}
	beats, err := r.ReadBeats(ctx)
	if err != nil {
		return nil, err
	}
	c.keepBeats(beats) // fresh rows for the doorbell and the statuses' reasons
	now := time.Now()
	local := ""
	var live model.Health
	if p := c.procLive.Load(); p != nil && c.Stats().Running {
		local, live = p.InstanceID(), p.Health()
	}
	out := make([]ProcessorInfo, 0, len(beats))
	for _, b := range beats {
		every := b.Every
		if every <= 0 {
			every = model.DefaultHeartbeatInterval
		}
		age := now.Sub(b.Seen)
		if age > model.ProcessorForgetAfter {
			continue
		}
		info := ProcessorInfo{ID: b.ID, Name: b.Name, Host: b.Host, PID: b.PID, State: b.State, InFlight: b.InFlight,
			Concurrency: b.Concurrency, Queues: b.Queues, Started: b.Started, LastSeen: b.Seen, IntervalMS: every.Milliseconds()}
		if info.Queues == nil {
			info.Queues = []string{}
		}
		info.Totals = OutcomeCounts{Completed: b.Completed, Failed: b.Failed, Poisoned: b.Poisoned}
		info.Recent = OutcomeCounts{Completed: b.RecentCompleted, Failed: b.RecentFailed, Poisoned: b.RecentPoisoned}
		if f := b.LastFailure; f.CommandID != "" {
			info.LastFailure = &Failure{CommandID: f.CommandID, Type: f.Type, Error: f.Error, Poisoned: f.Poisoned, At: f.At}
		}
		info.Wake = b.Wake
		_, info.WakeUnreachable = c.wakeStatus(b.Wake)
		switch {
		case b.ID == local:
			info.Local, info.State, info.InFlight = true, string(live.State), live.InFlight
		case beatGone(b, now):
			info.Gone, info.State = true, "gone"
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b ProcessorInfo) int {
		if a.Gone != b.Gone {
			if a.Gone {
				return 1
			}
			return -1
		}
		if c := strings.Compare(a.Host, b.Host); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// The processors' heartbeats: every running processor writes a row saying
// who and where it is and what it does, at most once a
// DefaultHeartbeatInterval (docs/lifecycle.md, "Processor heartbeats"),
// so that operators see every processor on every machine
// (Client.Processors, GET /v1/processors, the console's overview).

// Heartbeat defaults and limits.
const (
	// DefaultHeartbeatInterval is how often a running processor rewrites
	// its heartbeat row (1 minute): 60 upserts an hour per processor.
	DefaultHeartbeatInterval = model.DefaultHeartbeatInterval
	// ProcessorGoneAfter is how many heartbeat intervals may pass without
	// a write before a processor is reported gone (3): it stopped without
	// deleting its row (killed, crashed, cut off from storage).
	ProcessorGoneAfter = model.ProcessorGoneAfter
	// ProcessorForgetAfter is how long after its last write a gone
	// processor's row is kept (1 hour): processors delete older rows when
	// they clean up (about once an hour each), and listings leave them out.
	ProcessorForgetAfter = model.ProcessorForgetAfter
)

// ProcessorInfo is one processor as its heartbeat row reports it
// (Client.Processors, GET /v1/processors).
type ProcessorInfo struct {
	// ID is the processor's instance ID: made when the processor is
	// created, so a restarted process is a new processor.
	ID string `json:"id"`
	// Name is the processor's worker name (Config.Worker,
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
	// Wake is the address its doorbell listens on for wake-ups from other
	// processes ("" when it has none: the doorbell off, no secret, the
	// embedded store).
	Wake string `json:"wake,omitempty"`
	// WakeUnreachable is true when this Client rang it and its last
	// wake-ups went unacked (two or more, the first over a second ago): a
	// firewall, an address it cannot be reached at (Doorbell.Advertise),
	// or a processor that is gone. Its commands still start at its next
	// poll.
	WakeUnreachable bool `json:"wakeUnreachable,omitempty"`
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
