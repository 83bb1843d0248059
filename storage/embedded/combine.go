package embedded

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// maxManyItems bounds the items of one BatchEnqueueMany engine batch; more
// are written in further batches (one commit each).
const maxManyItems = 1000

// BatchEnqueueMany applies many table batches, each on its own partition,
// and enqueues one message for each, in one engine batch (one log record,
// one fsync shared with other writers): a batch issue of many commands at
// the cost of one durable write. An item whose batch fails gets its error
// and is left out; the others are applied. More than 1000 items take one
// commit per 1000.
func (s *Store) BatchEnqueueMany(ctx context.Context, tableName, queueName string, items []storage.CombinedItem, visibilityDelay, ttl time.Duration) ([]storage.CombinedResult, error) {
	st, err := s.Table(ctx, tableName)
	if err != nil {
		return nil, err
	}
	sq, err := s.Queue(ctx, queueName)
	if err != nil {
		return nil, err
	}
	t, q := st.(*table), sq.(*queue)
	res := make([]storage.CombinedResult, len(items))
	type prepared struct {
		i  int
		tb *tableBatch
		e  *enqueue
	}
	var ps []prepared
	seen := make(map[string]bool, len(items))
	for i, it := range items {
		if seen[it.PartitionKey] {
			res[i].Err = fmt.Errorf("%w: partition %q is named by an earlier item of the same call", storage.ErrInvalidArgument, it.PartitionKey)
			continue
		}
		seen[it.PartitionKey] = true
		if err := storage.ValidateBatch(it.PartitionKey, it.Ops); err != nil {
			res[i].Err = err
			continue
		}
		tb, err := t.prepare(ctx, it.PartitionKey, it.Ops)
		if err != nil {
			res[i].Err = err
			continue
		}
		text := it.Text
		if it.TextFunc != nil {
			text = it.TextFunc(slices.Clone(tb.etags)) // known once prepared
		}
		e, err := q.prepareEnqueue(ctx, text, visibilityDelay, ttl)
		if err != nil {
			res[i].Err = err
			continue
		}
		ps = append(ps, prepared{i, tb, e})
	}
	for len(ps) > 0 {
		chunk := ps[:min(len(ps), maxManyItems)]
		ps = ps[len(chunk):]
		tbs := make([]*tableBatch, len(chunk))
		for k, p := range chunk {
			tbs[k] = p.tb
		}
		staged, err := s.commitMany(t, tbs, q, func(b *pebble.Batch, ok []int) func() {
			es := make([]*enqueue, len(ok))
			for k, j := range ok {
				es[k] = chunk[j].e
			}
			return q.stageMany(b, es)
		})
		if err != nil {
			return nil, fmt.Errorf("embedded: batch enqueue on %q: %w", queueName, err)
		}
		for k, p := range chunk {
			if staged[k] != nil {
				res[p.i].Err = staged[k]
				continue
			}
			res[p.i].ETags, res[p.i].Message = p.tb.etags, p.e.msg
		}
	}
	return res, nil
}

// commitMany stages the table batches tbs (each on its own partition of t)
// and, for those that staged, the queue part, then applies and syncs them
// as one engine batch. It returns each table batch's own error (nil when it
// was applied); err fails them all (nothing applied).
func (s *Store) commitMany(t *table, tbs []*tableBatch, q *queue, stageQ func(b *pebble.Batch, ok []int) (after func())) (itemErrs []error, err error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.gate.RUnlock()
	// Take the partitions' locks in slot order (no two callers wait on
	// each other).
	slots := make([]int, 0, len(tbs))
	for _, tb := range tbs {
		slots = append(slots, s.partitionSlot(t.lower, tb.pk))
	}
	slices.Sort(slots)
	slots = slices.Compact(slots)
	for _, i := range slots {
		s.parts[i].Lock()
	}
	locked := true
	unlock := func() {
		if locked {
			for _, i := range slots {
				s.parts[i].Unlock()
			}
			locked = false
		}
	}
	defer unlock()
	if err := t.deletedErr(); err != nil {
		return nil, err
	}
	b := s.db.NewBatch()
	itemErrs = make([]error, len(tbs))
	var ok []int
	for k, tb := range tbs {
		if err := tb.stage(b); err != nil {
			if errors.Is(err, ErrCorrupt) {
				_ = b.Close()
				return nil, err
			}
			itemErrs[k] = err
			continue
		}
		ok = append(ok, k)
	}
	if len(ok) == 0 {
		_ = b.Close()
		return itemErrs, nil
	}
	q.mu.Lock()
	if err := q.deletedErr(); err != nil {
		q.mu.Unlock()
		_ = b.Close()
		return nil, err
	}
	after := stageQ(b, ok)
	err = s.apply(b)
	if err == nil {
		after()
	}
	q.settle(false)
	q.mu.Unlock()
	unlock() // writers never wait for another's fsync
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	if err := s.syncWait(b); err != nil {
		return nil, err
	}
	return itemErrs, nil
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
