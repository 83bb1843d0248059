package embedded

import (
	"context"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cockroachdb/pebble/v2"
)

var _ storage.Combiner = (*Store)(nil)

// BatchEnqueue applies a table batch and an enqueue in one engine batch
// (one log record, sharing its fsync with other writers): all or nothing.
// The Issuer uses it to store a command and queue its message at the cost of
// one durable write.
func (s *Store) BatchEnqueue(ctx context.Context, tableName, partitionKey string, ops []storage.BatchOp, queueName, text string, visibilityDelay, ttl time.Duration) ([]string, storage.Message, error) {
	st, err := s.Table(ctx, tableName)
	if err != nil {
		return nil, storage.Message{}, err
	}
	sq, err := s.Queue(ctx, queueName)
	if err != nil {
		return nil, storage.Message{}, err
	}
	t, q := st.(*table), sq.(*queue)
	if err := storage.ValidateBatch(partitionKey, ops); err != nil {
		return nil, storage.Message{}, err
	}
	tb, err := t.prepare(ctx, partitionKey, ops)
	if err != nil {
		return nil, storage.Message{}, err
	}
	e, err := q.prepareEnqueue(ctx, text, visibilityDelay, ttl)
	if err != nil {
		return nil, storage.Message{}, err
	}
	if err := s.commitBatch(tb, q, e.stage); err != nil {
		return nil, storage.Message{}, err
	}
	return tb.etags, e.msg, nil
}

// BatchDelete applies a table batch and deletes a dequeued message in one
// engine batch. The batch decides: when it fails nothing is deleted; when it
// succeeds it is applied even if the delete fails, and the delete's error
// (ErrLeaseLost, ErrNotFound) comes back as deleteErr. The processor uses it
// to write a command's final batch and delete its message in one commit.
func (s *Store) BatchDelete(ctx context.Context, tableName, partitionKey string, ops []storage.BatchOp, queueName, id, popReceipt string) (etags []string, deleteErr, err error) {
	st, err := s.Table(ctx, tableName)
	if err != nil {
		return nil, nil, err
	}
	sq, err := s.Queue(ctx, queueName)
	if err != nil {
		return nil, nil, err
	}
	t, q := st.(*table), sq.(*queue)
	if err := storage.ValidateBatch(partitionKey, ops); err != nil {
		return nil, nil, err
	}
	tb, err := t.prepare(ctx, partitionKey, ops)
	if err != nil {
		return nil, nil, err
	}
	d, derr := q.prepareDelete(ctx, id, popReceipt)
	if derr != nil {
		// The batch still applies; the delete's error is reported.
		if err := s.commitBatch(tb, nil, nil); err != nil {
			return nil, nil, err
		}
		return tb.etags, derr, nil
	}
	err = s.commitBatch(tb, q, func(b *pebble.Batch) func() {
		after, opErr := d.stage(b)
		if opErr != nil {
			deleteErr = fmt.Errorf("embedded: delete message %s on %q: %w", id, queueName, opErr)
		}
		return after
	})
	if err != nil {
		return nil, nil, err
	}
	return tb.etags, deleteErr, nil
}
