package shared

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// Order keys (docs/lifecycle.md, "Order keys"): the commands issued with
// one order key run one at a time, in issue order. Each key has a
// partition of the base commands table, "~order.<first 40 hex digits of
// the key's SHA-256>" (any bytes make a key), holding
//
//   - "tail": Seq (the last place given), Queue (the key's queue), Key
//     (the key, cut to MaxTextUnits, for display);
//   - "s:<place, 20 digits>": one row per command of the key not yet
//     final, Command (its ID), Type and Since (when it joined): the
//     lowest is the key's head, the one command of the key that may run;
//   - "c:<command ID>": Seq, the place of that command (so that joining
//     again, a re-issue, finds its place).
//
// A command joins before it is stored (AppendOrder), so a delivery never
// meets a command of a key that has no place in it; a command that
// becomes final leaves (LeaveOrder), and the next becomes the head. Over
// several accounts, as the permits, the keys live in the first account's
// base table.

// OrderPartitionPrefix starts every order key's partition.
const OrderPartitionPrefix = "~order."

// OrderPartition returns the partition of order key key.
func OrderPartition(key string) string {
	sum := sha256.Sum256([]byte(key))
	return OrderPartitionPrefix + hex.EncodeToString(sum[:20])
}

func orderPlaceKey(seq int64) string { return fmt.Sprintf("s:%020d", seq) }

// OrderHead is a key's head as read.
type OrderHead struct {
	// Seq is its place; Command its ID; Type its type; Since when it
	// joined the key.
	Seq     int64
	Command string
	Type    string
	Since   time.Time
}

// AppendOrder gives command id (of type cmdType, on logical queue queue)
// the next place of order key key, and returns it: one read of the key's
// tail row and one batch (the tail moved on, the place and the command's
// row inserted), again on a race with another issuer. A command that has
// a place already (a re-issue) gets it back (one more read). A key whose
// commands not yet final are on another queue fails with an error
// wrapping model.ErrOrderKeyQueue.
func (s *Partitions) AppendOrder(ctx context.Context, key, queue, id, cmdType string) (int64, error) {
	if err := model.ValidateOrderKey(key); err != nil {
		return 0, err
	}
	tb, pk := s.permits(), OrderPartition(key)
	for try := 0; ; try++ {
		tail, err := tb.Get(ctx, pk, "tail")
		exists := err == nil
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return 0, fmt.Errorf("cmdq: order key: read its tail: %w", err)
		}
		seq := layout.IntProp(tail, "Seq") + 1
		if q := layout.StrProp(tail, "Queue"); exists && q != queue {
			head, ok, err := s.ReadOrderHead(ctx, key)
			if err != nil {
				return 0, err
			}
			if ok && head.Command != id {
				return 0, fmt.Errorf("%w: the order key's commands are on queue %q (command %s is its head), this one's type %s is routed to %q; commands that share an order key must share a queue", model.ErrOrderKeyQueue, q, head.Command, cmdType, queue)
			}
		}
		now := s.nowUTC()
		t := storage.Entity{PartitionKey: pk, RowKey: "tail", Properties: map[string]any{
			"Seq": seq, "Queue": queue, "Key": layout.Truncate(key, layout.MaxTextUnits)}}
		op := storage.BatchOp{Kind: storage.OpInsert, Entity: t}
		if exists {
			op = storage.BatchOp{Kind: storage.OpUpdate, Entity: t, Mode: storage.Replace, IfMatch: tail.ETag}
		}
		ops := []storage.BatchOp{op,
			{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: pk, RowKey: orderPlaceKey(seq), Properties: map[string]any{
				"Command": id, "Type": cmdType, "Since": now}}},
			{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: pk, RowKey: "c:" + id, Properties: map[string]any{"Seq": seq}}},
		}
		_, err = tb.Batch(ctx, pk, ops)
		if err == nil {
			return seq, nil
		}
		if !errors.Is(err, storage.ErrExists) && !errors.Is(err, storage.ErrConflict) && !errors.Is(err, storage.ErrNotFound) {
			return 0, fmt.Errorf("cmdq: order key: join it: %w", err)
		}
		// Another issuer moved the tail, or this command has a place.
		if c, err := tb.Get(ctx, pk, "c:"+id); err == nil {
			return layout.IntProp(c, "Seq"), nil
		}
		if try >= 20 {
			return 0, fmt.Errorf("cmdq: order key: join it: %d issuers at once kept moving its tail: %w", try, storage.ErrUnavailable)
		}
	}
}

// ReadOrderHead reads order key key's head (ok false: the key has no
// command not yet final): one query.
func (s *Partitions) ReadOrderHead(ctx context.Context, key string) (OrderHead, bool, error) {
	page, err := s.permits().Query(ctx, storage.Query{PartitionKey: OrderPartition(key), RowKeyPrefix: "s:", Top: 1})
	if err != nil {
		return OrderHead{}, false, fmt.Errorf("cmdq: order key: read its head: %w", err)
	}
	if len(page.Entities) == 0 {
		return OrderHead{}, false, nil
	}
	e := page.Entities[0]
	seq, _ := strconv.ParseInt(e.RowKey[2:], 10, 64)
	return OrderHead{Seq: seq, Command: layout.StrProp(e, "Command"), Type: layout.StrProp(e, "Type"), Since: layout.TimeProp(e, "Since")}, true, nil
}

// LeaveOrder takes command id (at place seq) out of order key key: one
// batch deleting its two rows; the next command becomes the head. Rows
// already gone are not an error.
func (s *Partitions) LeaveOrder(ctx context.Context, key string, seq int64, id string) error {
	tb, pk := s.permits(), OrderPartition(key)
	_, err := tb.Batch(ctx, pk, []storage.BatchOp{
		{Kind: storage.OpDelete, Entity: storage.Entity{PartitionKey: pk, RowKey: orderPlaceKey(seq)}},
		{Kind: storage.OpDelete, Entity: storage.Entity{PartitionKey: pk, RowKey: "c:" + id}},
	})
	if err == nil {
		return nil
	}
	if !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("cmdq: order key: leave it: %w", err)
	}
	// Its place is another (it joined again after it was poisoned and
	// requeued): the command's row says which.
	if c, err := tb.Get(ctx, pk, "c:"+id); err == nil {
		if s := layout.IntProp(c, "Seq"); s != seq {
			seq = s
		}
	}
	for _, rk := range []string{orderPlaceKey(seq), "c:" + id} {
		if err := tb.Delete(ctx, pk, rk, ""); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return fmt.Errorf("cmdq: order key: leave it: %w", err)
		}
	}
	return nil
}
