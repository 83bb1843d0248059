package cmdq

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cmdq-dev/cmdq/internal/engine/doorbell"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/storage"
)

// PauseQueue pauses logical queue name (such as "commands") for every
// processor on the store, on every machine: none starts a command of it
// later than ControlInterval (9 s) after PauseQueue returns; this
// Client's processor (and every other one of this process) at once. The
// pause is stored (the queue's control row: it survives restarts) until
// ResumeQueue. Issuing into a paused queue still works; its commands wait.
// Handlers already running go on. by names who paused it (QueueInfo.By).
// Pausing a paused queue stores the pause again (Since, By).
//
// A queue neither the Client knows (DefaultQueue and the queues of its
// registered and declared types) nor the store holds → an error wrapping
// ErrUnknownQueue; an invalid name → ErrInvalidOptions. Cost: one upsert
// (and, for a queue the Client does not know, one listing of the store's
// queues). The result has no Depth (-1).
func (c *Client) PauseQueue(ctx context.Context, name, by string) (QueueInfo, error) {
	return c.setPaused(ctx, name, true, by)
}

// ResumeQueue resumes a paused logical queue: processors start its
// commands again, this process's at once, those of other processes when
// they next read the queue's control row (a paused processor reads it
// instead of polling the queue, at most MaxPollInterval apart: within a
// minute by default). Errors and cost as PauseQueue's.
func (c *Client) ResumeQueue(ctx context.Context, name, by string) (QueueInfo, error) {
	return c.setPaused(ctx, name, false, by)
}

func (c *Client) setPaused(ctx context.Context, name string, paused bool, by string) (QueueInfo, error) {
	if err := model.ValidateQueue(name); err != nil {
		return QueueInfo{}, err
	}
	r, err := c.reader(ctx)
	if err != nil {
		return QueueInfo{}, err
	}
	if !slices.Contains(c.Queues(), name) {
		stored, err := c.storedQueues(ctx)
		if err != nil {
			return QueueInfo{}, err
		}
		if !slices.Contains(stored, name) {
			return QueueInfo{}, fmt.Errorf("%w: %q; known queues: %s", ErrUnknownQueue, name, strings.Join(c.Queues(), ", "))
		}
	}
	row, err := r.SetPaused(ctx, name, paused, by)
	if err != nil {
		return QueueInfo{}, err
	}
	for _, p := range processor.Local(c.st) {
		p.SetControl(row)
	}
	c.keepControl(row)
	if c.bell.key != nil {
		// Every processor of the queue in other processes reads the
		// change at once (a resumed one dequeues then), not within
		// ControlInterval or its poll backoff.
		c.ring(name, doorbell.Wake{Name: name, Control: true}, true)
	}
	return QueueInfo{Name: name, Depth: -1, Paused: row.Paused, Since: row.Since, By: row.By}, nil
}

// storedQueues lists the logical queues the store holds for the Client's
// prefix (one listing call).
func (c *Client) storedQueues(ctx context.Context) ([]string, error) {
	names, err := c.st.Queues(ctx, c.cfg.Prefix+"-")
	if err != nil {
		return nil, fmt.Errorf("cmdq: list queues: %w", err)
	}
	shards := map[string]bool{} // the storage names of the known queues' shards 1…
	for q, n := range c.cfg.Shards {
		for i := 1; i < n; i++ {
			shards[c.names.ShardQueue(q, i)] = true
		}
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !shards[n] {
			out = append(out, strings.TrimPrefix(n, c.cfg.Prefix+"-"))
		}
	}
	return out, nil
}

// ListQueues returns every logical queue the Client or the store knows
// (the Client's Queues, the store's queues of its prefix, and the queues
// with a control row), sorted, each with its approximate depth and
// whether it is paused (since when, by whom). Cost: one listing of the
// store's queues, one query of the control rows, and one
// ApproximateCount per queue (a queue whose count fails has Depth -1).
func (c *Client) ListQueues(ctx context.Context) ([]QueueInfo, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return nil, err
	}
	stored, err := c.storedQueues(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := r.ReadControl(ctx)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, q := range c.Queues() {
		set[q] = true
	}
	for _, q := range stored {
		set[q] = true
	}
	for q := range rows {
		set[q] = true
	}
	out := make([]QueueInfo, 0, len(set))
	for q := range set {
		if model.ValidateQueue(q) != nil {
			continue // another prefix's or a stray name
		}
		info := queueInfo(q, rows[q])
		if n, err := r.Depth(ctx, q); err == nil {
			info.Depth = n
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func queueInfo(name string, row shared.QueueControl) QueueInfo {
	return QueueInfo{Name: name, Depth: -1, Paused: row.Paused, Since: row.Since, By: row.By}
}

// QueueDepth returns the approximate number of messages on a logical queue
// ("commands", or a type's queue), visible or not: one storage call.
func (c *Client) QueueDepth(ctx context.Context, queue string) (int, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return 0, err
	}
	return r.Depth(ctx, queue)
}

// StorageQueue returns the storage queue of a logical queue ("<prefix>-<queue>",
// opened and created if needed), for tools and metrics
// (metrics.Metrics.WatchQueue). Messages taken from it directly are not
// processed by cmdq.
func (c *Client) StorageQueue(ctx context.Context, queue string) (storage.Queue, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return nil, err
	}
	return r.Queue(ctx, queue)
}
