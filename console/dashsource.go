package console

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// Every read and change the dashboard makes goes through dashSource, and
// nothing else in dashboard.go touches storage: when Config takes another
// kind of data access, only newDashSource changes. docs/dashboard.md lists
// what each page costs in storage calls; keep it true when this changes.

// dashSource is the dashboard's data access.
type dashSource interface {
	// Command returns a command's status and its JSON parameters: one
	// point read.
	Command(ctx context.Context, id string) (cmdq.Status, json.RawMessage, error)
	// Events returns a command's events, oldest first: one query (one
	// request per 1000 events).
	Events(ctx context.Context, id string) ([]cmdq.Event, error)
	// ListPoison reads one page of the poison table: one query of the
	// whole table (one request per 1000 entries).
	ListPoison(ctx context.Context, q cmdq.PoisonQuery) (cmdq.PoisonPage, error)
	// GetPoison reads one poison entry: one point read.
	GetPoison(ctx context.Context, id string) (cmdq.PoisonEntry, error)
	// Requeue and Discard act on a poisoned command for operator by.
	Requeue(ctx context.Context, id, by string) error
	Discard(ctx context.Context, id, by string) error
	// Queues are the logical queues the server knows (the default one and
	// those of its types): no storage call.
	Queues() []string
	// QueueDepth is a queue's approximate message count: one call.
	QueueDepth(ctx context.Context, queue string) (int, error)
	// RetryPolicy returns the retry policy of a command type when this
	// server's client runs the type's handler (cmdq.Register); no storage
	// call.
	RetryPolicy(cmdType string) (cmdq.RetryPolicy, bool)
	// Commands lists commands (newest first, with a summary): one query
	// of the whole commands table (one request per 1000 rows; with a
	// summary every row, events included).
	Commands(ctx context.Context, q cmdq.CommandQuery) (cmdq.CommandPage, error)
	// InFlight reports whether this server's processor runs a handler of
	// id now (before its started event is written): no storage call.
	InFlight(id string) (cmdq.RunningCommand, bool)
	// Cancel cancels a command for by (cmdq.Client.Cancel): one point read
	// and one batch (and, for a command issued moments ago, one upsert and
	// a wait of at most cmdq.ControlInterval on a shared store).
	Cancel(ctx context.Context, id, by string) (cmdq.CancelResult, error)
	// RunNow makes a scheduled or retrying command due now for by
	// (cmdq.Client.RunNow): one point read, one batch and one enqueue (and
	// for a scheduled command one upsert, and a wait of at most
	// cmdq.ControlInterval on a shared store when it was due within it).
	RunNow(ctx context.Context, id, by string) (cmdq.Status, error)
	// ListQueues lists the queues with their depth and pause state: one
	// listing of the store's queues, one query of the control rows and one
	// count per queue.
	ListQueues(ctx context.Context) ([]cmdq.QueueInfo, error)
	// ListPeriodic lists the periodic schedules with their last and next
	// tick: one query of the schedules' rows and one point read per
	// schedule.
	ListPeriodic(ctx context.Context) ([]cmdq.PeriodicInfo, error)
	// GetPeriodic returns one schedule with its latest n ticks: one query
	// of the schedules' rows and one point read per tick.
	GetPeriodic(ctx context.Context, name string, n int) (cmdq.PeriodicInfo, error)
	// TriggerPeriodic issues schedule name's command as the tick of at
	// (zero: now) for by: one issue (a batch and an enqueue), plus one
	// query of the schedules' rows for a schedule this server does not
	// run.
	TriggerPeriodic(ctx context.Context, name, by string, at time.Time) (cmdq.TickInfo, error)
	// Limits lists the globally limited types and their permits: one
	// query.
	Limits(ctx context.Context) ([]cmdq.LimitInfo, error)
	// PauseQueue and ResumeQueue change a queue's pause for by: one
	// upsert (and a listing of the store's queues for a queue the server's
	// types do not route to).
	PauseQueue(ctx context.Context, name, by string) (cmdq.QueueInfo, error)
	ResumeQueue(ctx context.Context, name, by string) (cmdq.QueueInfo, error)
	// Processors lists the processors from their heartbeat rows: one
	// query.
	Processors(ctx context.Context) ([]cmdq.ProcessorInfo, error)
	// Watch follows a command for the live feed: one point read when it
	// opens (none when the command is watched already or final and read
	// before), then one per second at most while it is watched, shared
	// with every other watcher, for changes made by other processes;
	// none for this server's processor's.
	Watch(id string) *cmdq.Watch
}

// newDashSource returns the dashboard's data access for cfg: its client.
func newDashSource(cfg Config) dashSource {
	return clientSource{c: cfg.Client}
}

// clientSource is dashSource on the cmdq.Client (retry policies from the
// types it knows).
type clientSource struct {
	c *cmdq.Client
}

func (s clientSource) Command(ctx context.Context, id string) (cmdq.Status, json.RawMessage, error) {
	return s.c.GetParams(ctx, id)
}

func (s clientSource) Events(ctx context.Context, id string) ([]cmdq.Event, error) {
	return s.c.Events(ctx, id)
}

func (s clientSource) ListPoison(ctx context.Context, q cmdq.PoisonQuery) (cmdq.PoisonPage, error) {
	return s.c.ListPoison(ctx, q)
}

func (s clientSource) GetPoison(ctx context.Context, id string) (cmdq.PoisonEntry, error) {
	return s.c.GetPoison(ctx, id)
}

func (s clientSource) Requeue(ctx context.Context, id, by string) error {
	return s.c.Requeue(ctx, id, by)
}

func (s clientSource) Discard(ctx context.Context, id, by string) error {
	return s.c.Discard(ctx, id, by)
}

func (s clientSource) Queues() []string { return s.c.Queues() }

func (s clientSource) Commands(ctx context.Context, q cmdq.CommandQuery) (cmdq.CommandPage, error) {
	return s.c.ListCommands(ctx, q)
}

func (s clientSource) InFlight(id string) (cmdq.RunningCommand, bool) { return s.c.Running(id) }

func (s clientSource) Watch(id string) *cmdq.Watch { return s.c.Watch(id) }

func (s clientSource) Processors(ctx context.Context) ([]cmdq.ProcessorInfo, error) {
	return s.c.Processors(ctx)
}

func (s clientSource) QueueDepth(ctx context.Context, queue string) (int, error) {
	return s.c.QueueDepth(ctx, queue)
}

func (s clientSource) RetryPolicy(cmdType string) (cmdq.RetryPolicy, bool) {
	def, ok := s.c.Lookup(cmdType)
	if !ok || !def.Handled { // a declared type's handler (and policy) is elsewhere
		return cmdq.RetryPolicy{}, false
	}
	return def.Options.Retry, true
}

// retryWindow returns the earliest and latest time the attempt after failed
// attempt n (failed at at) becomes visible again under p: the policy's delay
// with its jitter at both ends.
func retryWindow(p cmdq.RetryPolicy, n int, at time.Time) (earliest, latest time.Time) {
	lo, hi := p, p
	lo.Rand = func() float64 { return 0 }
	hi.Rand = func() float64 { return 1 }
	return at.Add(lo.Delay(n)), at.Add(hi.Delay(n))
}

func (s clientSource) Cancel(ctx context.Context, id, by string) (cmdq.CancelResult, error) {
	return s.c.Cancel(ctx, id, by)
}

func (s clientSource) RunNow(ctx context.Context, id, by string) (cmdq.Status, error) {
	return s.c.RunNow(ctx, id, by)
}

func (s clientSource) ListQueues(ctx context.Context) ([]cmdq.QueueInfo, error) {
	return s.c.ListQueues(ctx)
}

func (s clientSource) ListPeriodic(ctx context.Context) ([]cmdq.PeriodicInfo, error) {
	return s.c.ListPeriodic(ctx)
}

func (s clientSource) Limits(ctx context.Context) ([]cmdq.LimitInfo, error) {
	return s.c.Limits(ctx)
}

func (s clientSource) PauseQueue(ctx context.Context, name, by string) (cmdq.QueueInfo, error) {
	return s.c.PauseQueue(ctx, name, by)
}

func (s clientSource) ResumeQueue(ctx context.Context, name, by string) (cmdq.QueueInfo, error) {
	return s.c.ResumeQueue(ctx, name, by)
}

func (s clientSource) GetPeriodic(ctx context.Context, name string, n int) (cmdq.PeriodicInfo, error) {
	return s.c.GetPeriodic(ctx, name, n)
}

func (s clientSource) TriggerPeriodic(ctx context.Context, name, by string, at time.Time) (cmdq.TickInfo, error) {
	return s.c.TriggerPeriodicAt(ctx, name, by, at)
}
