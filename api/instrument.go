package api

import (
	"context"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// InstrumentStore wraps s so that every queue and table operation is counted
// in cmdq_storage_operations_total{op,result}. Queue and Table lookups are
// not counted (drivers cache them). Ops are queue_enqueue, queue_dequeue,
// queue_update_visibility, queue_delete, queue_peek, queue_count,
// table_insert, table_get, table_update, table_upsert, table_delete,
// table_query and table_batch. When s implements storage.Combiner (the
// embedded store) so does the result, each combined call counted as the two
// operations it stands for. With a nil m, s is returned unchanged.
func (m *Metrics) InstrumentStore(s storage.Store) storage.Store {
	if m == nil || s == nil {
		return s
	}
	is := &instrumentedStore{s: s, m: m}
	if cb, ok := s.(storage.Combiner); ok {
		return &instrumentedCombiner{instrumentedStore: is, cb: cb}
	}
	return is
}

type instrumentedStore struct {
	s storage.Store
	m *Metrics
}

func (i *instrumentedStore) Queue(ctx context.Context, name string) (storage.Queue, error) {
	q, err := i.s.Queue(ctx, name)
	if err != nil {
		return nil, err
	}
	return &instrumentedQueue{q: q, m: i.m}, nil
}

func (i *instrumentedStore) Table(ctx context.Context, name string) (storage.Table, error) {
	t, err := i.s.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return &instrumentedTable{t: t, m: i.m}, nil
}

func (i *instrumentedStore) Close() error { return i.s.Close() }

type instrumentedQueue struct {
	q storage.Queue
	m *Metrics
}

func (i *instrumentedQueue) Name() string { return i.q.Name() }

func (i *instrumentedQueue) Enqueue(ctx context.Context, text string, visibilityDelay, ttl time.Duration) (storage.Message, error) {
	msg, err := i.q.Enqueue(ctx, text, visibilityDelay, ttl)
	i.m.StorageOp("queue_enqueue", err)
	return msg, err
}

func (i *instrumentedQueue) Dequeue(ctx context.Context, max int, visibility time.Duration) ([]storage.Message, error) {
	msgs, err := i.q.Dequeue(ctx, max, visibility)
	i.m.StorageOp("queue_dequeue", err)
	return msgs, err
}

func (i *instrumentedQueue) UpdateVisibility(ctx context.Context, id, popReceipt string, visibility time.Duration) (string, time.Time, error) {
	pr, next, err := i.q.UpdateVisibility(ctx, id, popReceipt, visibility)
	i.m.StorageOp("queue_update_visibility", err)
	return pr, next, err
}

func (i *instrumentedQueue) Delete(ctx context.Context, id, popReceipt string) error {
	err := i.q.Delete(ctx, id, popReceipt)
	i.m.StorageOp("queue_delete", err)
	return err
}

func (i *instrumentedQueue) Peek(ctx context.Context, max int) ([]storage.Message, error) {
	msgs, err := i.q.Peek(ctx, max)
	i.m.StorageOp("queue_peek", err)
	return msgs, err
}

func (i *instrumentedQueue) ApproximateCount(ctx context.Context) (int, error) {
	n, err := i.q.ApproximateCount(ctx)
	i.m.StorageOp("queue_count", err)
	return n, err
}

type instrumentedTable struct {
	t storage.Table
	m *Metrics
}

func (i *instrumentedTable) Name() string { return i.t.Name() }

func (i *instrumentedTable) Insert(ctx context.Context, e storage.Entity) (string, error) {
	etag, err := i.t.Insert(ctx, e)
	i.m.StorageOp("table_insert", err)
	return etag, err
}

func (i *instrumentedTable) Get(ctx context.Context, partitionKey, rowKey string) (storage.Entity, error) {
	e, err := i.t.Get(ctx, partitionKey, rowKey)
	i.m.StorageOp("table_get", err)
	return e, err
}

func (i *instrumentedTable) Update(ctx context.Context, e storage.Entity, mode storage.UpdateMode, ifMatch string) (string, error) {
	etag, err := i.t.Update(ctx, e, mode, ifMatch)
	i.m.StorageOp("table_update", err)
	return etag, err
}

func (i *instrumentedTable) Upsert(ctx context.Context, e storage.Entity, mode storage.UpdateMode) (string, error) {
	etag, err := i.t.Upsert(ctx, e, mode)
	i.m.StorageOp("table_upsert", err)
	return etag, err
}

func (i *instrumentedTable) Delete(ctx context.Context, partitionKey, rowKey, ifMatch string) error {
	err := i.t.Delete(ctx, partitionKey, rowKey, ifMatch)
	i.m.StorageOp("table_delete", err)
	return err
}

func (i *instrumentedTable) Query(ctx context.Context, q storage.Query) (storage.Page, error) {
	p, err := i.t.Query(ctx, q)
	i.m.StorageOp("table_query", err)
	return p, err
}

func (i *instrumentedTable) Batch(ctx context.Context, partitionKey string, ops []storage.BatchOp) ([]string, error) {
	etags, err := i.t.Batch(ctx, partitionKey, ops)
	i.m.StorageOp("table_batch", err)
	return etags, err
}

// instrumentedCombiner keeps a driver's storage.Combiner fast path visible
// through the instrumentation: a combined call is counted as the two
// operations it stands for.
type instrumentedCombiner struct {
	*instrumentedStore
	cb storage.Combiner
}

// BatchEnqueue counts a table batch and a queue enqueue.
func (c *instrumentedCombiner) BatchEnqueue(ctx context.Context, table, partitionKey string, ops []storage.BatchOp, queue, text string, visibilityDelay, ttl time.Duration) ([]string, storage.Message, error) {
	etags, msg, err := c.cb.BatchEnqueue(ctx, table, partitionKey, ops, queue, text, visibilityDelay, ttl)
	c.m.StorageOp("table_batch", err)
	c.m.StorageOp("queue_enqueue", err)
	return etags, msg, err
}

// BatchDelete counts a table batch and, when the batch applied, a queue delete.
func (c *instrumentedCombiner) BatchDelete(ctx context.Context, table, partitionKey string, ops []storage.BatchOp, queue, id, popReceipt string) ([]string, error, error) {
	etags, deleteErr, err := c.cb.BatchDelete(ctx, table, partitionKey, ops, queue, id, popReceipt)
	c.m.StorageOp("table_batch", err)
	if err == nil {
		c.m.StorageOp("queue_delete", deleteErr)
	}
	return etags, deleteErr, err
}
