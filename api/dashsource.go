package api

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cmdq-dev/cmdq/handlers"
	"github.com/cmdq-dev/cmdq/status"
)

// Every read and change the dashboard makes goes through dashSource, and
// nothing else in dashboard.go touches storage: when api.Config takes another
// kind of data access, only newDashSource changes. docs/dashboard.md lists
// what each page costs in storage calls; keep it true when this changes.

// dashSource is the dashboard's data access.
type dashSource interface {
	// Command returns a command's status and its JSON parameters: one
	// point read.
	Command(ctx context.Context, id string) (status.Status, json.RawMessage, error)
	// Events returns a command's events, oldest first: one query (one
	// request per 1000 events).
	Events(ctx context.Context, id string) ([]status.Event, error)
	// ListPoison reads one page of the poison table: one query of the
	// whole table (one request per 1000 entries).
	ListPoison(ctx context.Context, q status.PoisonQuery) (status.PoisonPage, error)
	// GetPoison reads one poison entry: one point read.
	GetPoison(ctx context.Context, id string) (status.PoisonEntry, error)
	// Requeue and Discard act on a poisoned command for operator by.
	Requeue(ctx context.Context, id, by string) error
	Discard(ctx context.Context, id, by string) error
	// QueueDepth is a queue's approximate message count: one call.
	QueueDepth(ctx context.Context, queue string) (int, error)
	// RetryPolicy returns the retry policy of a command type when this
	// server knows the type's handler (Config.Registry); no storage call.
	RetryPolicy(cmdType string) (handlers.RetryPolicy, bool)
}

// newDashSource returns the dashboard's data access for cfg.
func newDashSource(cfg Config) dashSource {
	return readerSource{r: cfg.Reader, reg: cfg.Registry}
}

// readerSource is dashSource on a *status.Reader (and, for retry policies,
// the optional registry).
type readerSource struct {
	r   *status.Reader
	reg *handlers.Registry
}

func (s readerSource) Command(ctx context.Context, id string) (status.Status, json.RawMessage, error) {
	rec, err := s.r.Store().Load(ctx, id)
	if err != nil {
		return status.Status{}, nil, err
	}
	return rec.Status, json.RawMessage(rec.Params), nil
}

func (s readerSource) Events(ctx context.Context, id string) ([]status.Event, error) {
	return s.r.Events(ctx, id)
}

func (s readerSource) ListPoison(ctx context.Context, q status.PoisonQuery) (status.PoisonPage, error) {
	return s.r.ListPoison(ctx, q)
}

func (s readerSource) GetPoison(ctx context.Context, id string) (status.PoisonEntry, error) {
	return s.r.GetPoison(ctx, id)
}

func (s readerSource) Requeue(ctx context.Context, id, by string) error {
	return s.r.Requeue(ctx, id, by)
}

func (s readerSource) Discard(ctx context.Context, id, by string) error {
	return s.r.Discard(ctx, id, by)
}

func (s readerSource) QueueDepth(ctx context.Context, queue string) (int, error) {
	return s.r.QueueDepth(ctx, queue)
}

func (s readerSource) RetryPolicy(cmdType string) (handlers.RetryPolicy, bool) {
	if s.reg == nil {
		return handlers.RetryPolicy{}, false
	}
	def, ok := s.reg.Lookup(cmdType)
	if !ok {
		return handlers.RetryPolicy{}, false
	}
	return def.Retry, true
}

// retryWindow returns the earliest and latest time the attempt after failed
// attempt n (failed at at) becomes visible again under p: the policy's delay
// with its jitter at both ends.
func retryWindow(p handlers.RetryPolicy, n int, at time.Time) (earliest, latest time.Time) {
	lo, hi := p, p
	lo.Rand = func() float64 { return 0 }
	hi.Rand = func() float64 { return 1 }
	return at.Add(lo.Delay(n)), at.Add(hi.Delay(n))
}
