package shared

import (
	"context"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// ControlPartition holds the queues' control rows in the base commands
// table (data layout, docs/lifecycle.md "Paused queues"): one row per
// logical queue that was ever paused, resumed or had a young command
// cancelled, RowKey = the logical queue name; properties Paused (bool),
// Since and By (the last pause or resume), CancelledAt (the last cancel of
// a command that a delivery could still start from its issue's message
// without reading it; see MarkCancelling). A query of this one
// partition reads every queue's row: what a processor's control read is.
const ControlPartition = "~queues"

// QueueControl is one logical queue's control row.
type QueueControl struct {
	// Queue is the logical queue name.
	Queue string
	// Paused is true while the queue is paused.
	Paused bool
	// Since is when the queue was last paused or resumed (zero: never).
	Since time.Time
	// By is who last paused or resumed it.
	By string
	// CancelledAt is when a command of the queue that was still young
	// enough to be started from its issue's own message without a read
	// (the first delivery's fast path) was last being cancelled (zero:
	// never). A processor that knows it loads such commands instead.
	CancelledAt time.Time
	// ETag is the row's ETag ("" when there is no row).
	ETag string
}

func decodeControl(e storage.Entity) QueueControl {
	paused, _ := e.Properties["Paused"].(bool)
	return QueueControl{Queue: e.RowKey, Paused: paused, Since: layout.TimeProp(e, "Since"), By: layout.StrProp(e, "By"),
		CancelledAt: layout.TimeProp(e, "CancelledAt"), ETag: e.ETag}
}

// ReadControl reads every queue's control row: one query of
// ControlPartition (one request per 1000 queues; over several accounts,
// one per account at once, merged: see shared.go). Queues without a row
// are missing from the map (not paused, nothing cancelled).
func (s *Partitions) ReadControl(ctx context.Context) (map[string]QueueControl, error) {
	if s.reps != nil {
		out, err := s.readControlShared(ctx)
		if err != nil {
			return nil, fmt.Errorf("cmdq: read the queues' control rows: %w", err)
		}
		return out, nil
	}
	out := map[string]QueueControl{}
	q := storage.Query{PartitionKey: ControlPartition, Top: 1000}
	for {
		page, err := s.commands.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("cmdq: read the queues' control rows: %w", err)
		}
		for _, e := range page.Entities {
			c := decodeControl(e)
			out[c.Queue] = c
		}
		if page.Continuation == "" {
			return out, nil
		}
		q.Continuation = page.Continuation
	}
}

// SetPaused pauses (paused true) or resumes a logical queue: one merge
// upsert of its control row (Paused, Since = now, By = by; CancelledAt is
// kept). It returns the row as written (CancelledAt unknown: zero). The
// queue name is not checked here (callers check it is known).
//
// Over several accounts (shared.go) it reads the rows first (ReadControl:
// one query per account) and writes the row to every account that
// answers (one upsert each), with Since after the newest Since read, so
// that the newest row wins whatever the writers' clocks.
func (s *Partitions) SetPaused(ctx context.Context, queue string, paused bool, by string) (QueueControl, error) {
	if err := model.ValidateQueue(queue); err != nil {
		return QueueControl{}, err
	}
	verb := "pause"
	if !paused {
		verb = "resume"
	}
	now := s.nowUTC()
	if s.reps != nil {
		cur, err := s.ReadControl(ctx)
		if err != nil {
			return QueueControl{}, fmt.Errorf("cmdq: %s queue %s: %w", verb, queue, err)
		}
		if c, ok := cur[queue]; ok && !now.After(c.Since) {
			now = c.Since.Add(time.Millisecond)
		}
	}
	e := storage.Entity{PartitionKey: ControlPartition, RowKey: queue, Properties: map[string]any{
		"Paused": paused, "Since": now, "By": layout.Truncate(by, layout.MaxTextUnits),
	}}
	etag, err := s.upsertShared(ctx, e)
	if err != nil {
		return QueueControl{}, fmt.Errorf("cmdq: %s queue %s: %w", verb, queue, err)
	}
	return QueueControl{Queue: queue, Paused: paused, Since: now, By: layout.Truncate(by, layout.MaxTextUnits), ETag: etag}, nil
}

// MarkCancelling records, in the control row of a logical queue, that a
// command of it that a delivery could still start from its issue's own
// message without reading it is being cancelled: one merge upsert
// (CancelledAt = now; over several accounts, one to each account that
// answers). A processor that reads the row afterwards loads
// every command of the queue issued before then instead of starting it
// from its message. It returns the time written.
func (s *Partitions) MarkCancelling(ctx context.Context, queue string) (time.Time, error) {
	now := s.nowUTC()
	e := storage.Entity{PartitionKey: ControlPartition, RowKey: queue, Properties: map[string]any{"CancelledAt": now}}
	if _, err := s.upsertShared(ctx, e); err != nil {
		return time.Time{}, fmt.Errorf("cmdq: mark a cancel in queue %s's control row: %w", queue, err)
	}
	return now, nil
}

// upsertShared merges e into a row of a partition kept in every account
// (shared.go): one upsert, or one per account (at once) over several,
// written when one account answers. The ETag is the base table's ("" over
// several accounts).
func (s *Partitions) upsertShared(ctx context.Context, e storage.Entity) (string, error) {
	if reps := s.reps; reps != nil {
		return "", FromAny(Each(reps, func(_ int, tb storage.Table) error {
			_, err := tb.Upsert(ctx, e, storage.Merge)
			return err
		}))
	}
	return s.commands.Upsert(ctx, e, storage.Merge)
}
