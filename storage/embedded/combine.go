package embedded

import (
	"context"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	bolt "go.etcd.io/bbolt"
)

var _ storage.Combiner = (*Store)(nil)

// BatchEnqueue applies a table batch and an enqueue in one transaction (one
// commit, shared with other writers by the group commit): all or nothing.
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
	runBatch, etags, err := t.prepareBatch(ctx, partitionKey, ops)
	if err != nil {
		return nil, storage.Message{}, err
	}
	runEnqueue, msg, err := q.prepareEnqueue(ctx, text, visibilityDelay, ttl)
	if err != nil {
		return nil, storage.Message{}, err
	}
	err = s.write(ctx, func(tx *bolt.Tx) error {
		if err := runBatch(tx); err != nil {
			return err // untouched on a non-fatal (batch) error
		}
		if err := runEnqueue(tx); err != nil {
			// The batch is already in the transaction: roll it back with
			// the enqueue (a fatal error makes the loop retry this op alone
			// and fail it).
			if isFatal(err) {
				return err
			}
			return fatal(err)
		}
		return nil
	})
	if err != nil {
		return nil, storage.Message{}, err
	}
	return etags, msg, nil
}

// BatchDelete applies a table batch and deletes a dequeued message in one
// transaction. The batch decides: when it fails nothing is deleted; when it
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
	runBatch, etags, err := t.prepareBatch(ctx, partitionKey, ops)
	if err != nil {
		return nil, nil, err
	}
	runDelete, derr := q.prepareDelete(ctx, id, popReceipt)
	err = s.write(ctx, func(tx *bolt.Tx) error {
		deleteErr = derr
		if err := runBatch(tx); err != nil {
			return err // untouched on a non-fatal (batch) error
		}
		if runDelete != nil {
			// A stale receipt or a missing message leaves the transaction
			// untouched: the batch stays, the delete's error is reported.
			if err := runDelete(tx); err != nil {
				if isFatal(err) {
					return err
				}
				deleteErr = fmt.Errorf("embedded: delete message %s on %q: %w", id, queueName, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return etags, deleteErr, nil
}
