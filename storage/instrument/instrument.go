// Package instrument wraps a storage.Store so that every queue and table call
// made through it is reported to hooks: the one wrapper behind the API's
// Prometheus counters, cmdq bench's per-kind counts and times, and the
// operation counts and fault injection of the tests above storage.
//
// Queue, Table, Close and the management calls (DeleteQueue, DeleteTable,
// Queues, Tables) are forwarded without being reported: they are not
// per-command transactions (drivers cache queues and tables). When the wrapped
// store implements storage.Combiner (or storage.GroupCombiner) so does the
// wrapper, each combined call reported as the two operations it stands for
// (a grouped completion: a TableBatch and a QueueDelete per item).
package instrument

import (
	"context"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// Op is one kind of queue or table call: every one a billed transaction on
// Azure Storage.
type Op int

// The calls, in a fixed order (consumers index arrays of NumOps by Op).
const (
	QueueEnqueue Op = iota
	QueueDequeue
	QueueUpdateVisibility
	QueueDelete
	QueuePeek
	QueueCount // Queue.ApproximateCount
	TableInsert
	TableGet
	TableUpdate
	TableUpsert
	TableDelete
	TableQuery
	TableBatch
)

// NumOps is the number of Ops: they run from 0 to NumOps-1.
const NumOps = int(TableBatch) + 1

var names = [NumOps]string{
	QueueEnqueue: "queue_enqueue", QueueDequeue: "queue_dequeue", QueueUpdateVisibility: "queue_update_visibility",
	QueueDelete: "queue_delete", QueuePeek: "queue_peek", QueueCount: "queue_count",
	TableInsert: "table_insert", TableGet: "table_get", TableUpdate: "table_update", TableUpsert: "table_upsert",
	TableDelete: "table_delete", TableQuery: "table_query", TableBatch: "table_batch",
}

// String returns the op's snake_case name ("queue_enqueue", "table_batch",
// …): the op label of cmdq_storage_operations_total.
func (o Op) String() string {
	if o < 0 || int(o) >= NumOps {
		return "unknown"
	}
	return names[o]
}

// Call is one reported operation.
type Call struct {
	Op  Op
	Err error
	// Duration is the time the call took. A combined call's whole duration
	// is carried by its TableBatch; its queue part reports 0.
	Duration time.Duration
}

// Hooks are the wrapper's callbacks; either may be nil. They are called
// concurrently when the store is used concurrently.
type Hooks struct {
	// Before runs before each operation is attempted, for every operation a
	// call stands for (a combined call: TableBatch, then its queue op). A
	// non-nil error is returned by the call without reaching the store, and
	// After is not called.
	Before func(Op) error
	// After runs once each operation is done, with its outcome. For
	// BatchDelete the QueueDelete is reported (with its deleteErr) only when
	// the batch applied: a failed batch deletes nothing.
	After func(Call)
}

// begin runs Before for ops and returns the time to measure the call from
// (zero when there is no After).
func (h *Hooks) begin(ops ...Op) (time.Time, error) {
	if h.Before != nil {
		for _, op := range ops {
			if err := h.Before(op); err != nil {
				return time.Time{}, err
			}
		}
	}
	if h.After == nil {
		return time.Time{}, nil
	}
	return time.Now(), nil
}

// end reports op, begun at t0 (the zero Time: a duration of 0).
func (h *Hooks) end(op Op, t0 time.Time, err error) {
	if h.After == nil {
		return
	}
	var d time.Duration
	if !t0.IsZero() {
		d = time.Since(t0)
	}
	h.After(Call{Op: op, Err: err, Duration: d})
}

// Wrap returns s with every queue and table call reported to h. The result
// implements storage.Combiner and storage.GroupCombiner when s does.
func Wrap(s storage.Store, h Hooks) storage.Store {
	w := &store{s: s, h: &h}
	if gc, ok := s.(storage.GroupCombiner); ok {
		return &groupCombiner{combiner: &combiner{store: w, cb: gc}, gc: gc}
	}
	if cb, ok := s.(storage.Combiner); ok {
		return &combiner{store: w, cb: cb}
	}
	return w
}

type store struct {
	s storage.Store
	h *Hooks
}

// Exclusive answers for the wrapped store (storage.Exclusive).
func (w *store) Exclusive() bool { return storage.IsExclusive(w.s) }

// ClockOffset answers for the wrapped store (storage.ServerClock).
func (w *store) ClockOffset() (offset, uncertainty time.Duration, ok bool) {
	return storage.ClockOffset(w.s)
}

// SharedSecret answers for the wrapped store (storage.Secret).
func (w *store) SharedSecret() []byte { return storage.SharedSecret(w.s) }

// Space answers for the wrapped store (storage.Space): the zero status
// when it keeps no data on a local disk.
func (w *store) Space() storage.SpaceStatus {
	sp, _ := storage.SpaceOf(w.s)
	return sp
}

// Members answers for the wrapped store (storage.Members): nil unless it
// is spread over several.
func (w *store) Members() []storage.MemberState { return storage.MembersOf(w.s) }

func (w *store) Queue(ctx context.Context, name string) (storage.Queue, error) {
	q, err := w.s.Queue(ctx, name)
	if err != nil {
		return nil, err
	}
	return &queue{q: q, h: w.h}, nil
}

func (w *store) Table(ctx context.Context, name string) (storage.Table, error) {
	t, err := w.s.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return &table{t: t, h: w.h}, nil
}

func (w *store) Close() error { return w.s.Close() }

// OpenTable opens the named table without creating it (storage.TableOpener)
// when the wrapped store can; otherwise it checks with Tables and returns
// the table (an error wrapping storage.ErrNotFound when it does not exist).
func (w *store) OpenTable(ctx context.Context, name string) (storage.Table, error) {
	var t storage.Table
	var err error
	if o, ok := w.s.(storage.TableOpener); ok {
		t, err = o.OpenTable(ctx, name)
	} else {
		t, err = storage.OpenExisting(ctx, w.s, name)
	}
	if err != nil {
		return nil, err
	}
	return &table{t: t, h: w.h}, nil
}

func (w *store) DeleteQueue(ctx context.Context, name string) error {
	return w.s.DeleteQueue(ctx, name)
}

func (w *store) DeleteTable(ctx context.Context, name string) error {
	return w.s.DeleteTable(ctx, name)
}

func (w *store) Queues(ctx context.Context, prefix string) ([]string, error) {
	return w.s.Queues(ctx, prefix)
}

func (w *store) Tables(ctx context.Context, prefix string) ([]string, error) {
	return w.s.Tables(ctx, prefix)
}

type queue struct {
	q storage.Queue
	h *Hooks
}

func (q *queue) Name() string { return q.q.Name() }

func (q *queue) Enqueue(ctx context.Context, text string, visibilityDelay, ttl time.Duration) (storage.Message, error) {
	t0, err := q.h.begin(QueueEnqueue)
	if err != nil {
		return storage.Message{}, err
	}
	msg, err := q.q.Enqueue(ctx, text, visibilityDelay, ttl)
	q.h.end(QueueEnqueue, t0, err)
	return msg, err
}

func (q *queue) Dequeue(ctx context.Context, max int, visibility time.Duration) ([]storage.Message, error) {
	t0, err := q.h.begin(QueueDequeue)
	if err != nil {
		return nil, err
	}
	msgs, err := q.q.Dequeue(ctx, max, visibility)
	q.h.end(QueueDequeue, t0, err)
	return msgs, err
}

func (q *queue) UpdateVisibility(ctx context.Context, id, popReceipt string, visibility time.Duration) (string, time.Time, error) {
	t0, err := q.h.begin(QueueUpdateVisibility)
	if err != nil {
		return "", time.Time{}, err
	}
	pr, next, err := q.q.UpdateVisibility(ctx, id, popReceipt, visibility)
	q.h.end(QueueUpdateVisibility, t0, err)
	return pr, next, err
}

func (q *queue) Delete(ctx context.Context, id, popReceipt string) error {
	t0, err := q.h.begin(QueueDelete)
	if err != nil {
		return err
	}
	err = q.q.Delete(ctx, id, popReceipt)
	q.h.end(QueueDelete, t0, err)
	return err
}

func (q *queue) Peek(ctx context.Context, max int) ([]storage.Message, error) {
	t0, err := q.h.begin(QueuePeek)
	if err != nil {
		return nil, err
	}
	msgs, err := q.q.Peek(ctx, max)
	q.h.end(QueuePeek, t0, err)
	return msgs, err
}

func (q *queue) ApproximateCount(ctx context.Context) (int, error) {
	t0, err := q.h.begin(QueueCount)
	if err != nil {
		return 0, err
	}
	n, err := q.q.ApproximateCount(ctx)
	q.h.end(QueueCount, t0, err)
	return n, err
}

type table struct {
	t storage.Table
	h *Hooks
}

func (t *table) Name() string { return t.t.Name() }

func (t *table) Insert(ctx context.Context, e storage.Entity) (string, error) {
	t0, err := t.h.begin(TableInsert)
	if err != nil {
		return "", err
	}
	etag, err := t.t.Insert(ctx, e)
	t.h.end(TableInsert, t0, err)
	return etag, err
}

func (t *table) Get(ctx context.Context, partitionKey, rowKey string) (storage.Entity, error) {
	t0, err := t.h.begin(TableGet)
	if err != nil {
		return storage.Entity{}, err
	}
	e, err := t.t.Get(ctx, partitionKey, rowKey)
	t.h.end(TableGet, t0, err)
	return e, err
}

func (t *table) Update(ctx context.Context, e storage.Entity, mode storage.UpdateMode, ifMatch string) (string, error) {
	t0, err := t.h.begin(TableUpdate)
	if err != nil {
		return "", err
	}
	etag, err := t.t.Update(ctx, e, mode, ifMatch)
	t.h.end(TableUpdate, t0, err)
	return etag, err
}

func (t *table) Upsert(ctx context.Context, e storage.Entity, mode storage.UpdateMode) (string, error) {
	t0, err := t.h.begin(TableUpsert)
	if err != nil {
		return "", err
	}
	etag, err := t.t.Upsert(ctx, e, mode)
	t.h.end(TableUpsert, t0, err)
	return etag, err
}

func (t *table) Delete(ctx context.Context, partitionKey, rowKey, ifMatch string) error {
	t0, err := t.h.begin(TableDelete)
	if err != nil {
		return err
	}
	err = t.t.Delete(ctx, partitionKey, rowKey, ifMatch)
	t.h.end(TableDelete, t0, err)
	return err
}

func (t *table) Query(ctx context.Context, q storage.Query) (storage.Page, error) {
	t0, err := t.h.begin(TableQuery)
	if err != nil {
		return storage.Page{}, err
	}
	p, err := t.t.Query(ctx, q)
	t.h.end(TableQuery, t0, err)
	return p, err
}

func (t *table) Batch(ctx context.Context, partitionKey string, ops []storage.BatchOp) ([]string, error) {
	t0, err := t.h.begin(TableBatch)
	if err != nil {
		return nil, err
	}
	etags, err := t.t.Batch(ctx, partitionKey, ops)
	t.h.end(TableBatch, t0, err)
	return etags, err
}

var _ storage.Combiner = (*combiner)(nil)

// combiner keeps a driver's storage.Combiner fast path visible through the
// wrapper.
type combiner struct {
	*store
	cb storage.Combiner
}

// BatchEnqueue is reported as a TableBatch and a QueueEnqueue, both with the
// combined call's error.
func (c *combiner) BatchEnqueue(ctx context.Context, table, partitionKey string, ops []storage.BatchOp, queue, text string, visibilityDelay, ttl time.Duration) ([]string, storage.Message, error) {
	t0, err := c.h.begin(TableBatch, QueueEnqueue)
	if err != nil {
		return nil, storage.Message{}, err
	}
	etags, msg, err := c.cb.BatchEnqueue(ctx, table, partitionKey, ops, queue, text, visibilityDelay, ttl)
	c.h.end(TableBatch, t0, err)
	c.h.end(QueueEnqueue, time.Time{}, err)
	return etags, msg, err
}

// BatchEnqueueMany is reported as a TableBatch and a QueueEnqueue per item,
// each with the item's outcome (the call's error when it failed as a
// whole); an item whose Before hook fails gets that error and is left out
// of the call. The call's whole duration is carried by the first item's
// TableBatch.
func (c *combiner) BatchEnqueueMany(ctx context.Context, table, queue string, items []storage.CombinedItem, visibilityDelay, ttl time.Duration) ([]storage.CombinedResult, error) {
	res := make([]storage.CombinedResult, len(items))
	pass := make([]storage.CombinedItem, 0, len(items))
	idx := make([]int, 0, len(items))
	var t0 time.Time
	for i, it := range items {
		t, err := c.h.begin(TableBatch, QueueEnqueue)
		if err != nil {
			res[i].Err = err
			continue
		}
		if len(idx) == 0 {
			t0 = t
		}
		pass = append(pass, it)
		idx = append(idx, i)
	}
	if len(pass) == 0 {
		return res, nil
	}
	got, err := c.cb.BatchEnqueueMany(ctx, table, queue, pass, visibilityDelay, ttl)
	for k, i := range idx {
		itemErr := err
		if err == nil {
			res[i] = got[k]
			itemErr = got[k].Err
		}
		start := time.Time{}
		if k == 0 {
			start = t0
		}
		c.h.end(TableBatch, start, itemErr)
		c.h.end(QueueEnqueue, time.Time{}, itemErr)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// BatchDelete is reported as a TableBatch and, when the batch applied, a
// QueueDelete with deleteErr.
func (c *combiner) BatchDelete(ctx context.Context, table, partitionKey string, ops []storage.BatchOp, queue, id, popReceipt string) ([]string, error, error) {
	t0, err := c.h.begin(TableBatch, QueueDelete)
	if err != nil {
		return nil, nil, err
	}
	etags, deleteErr, err := c.cb.BatchDelete(ctx, table, partitionKey, ops, queue, id, popReceipt)
	c.h.end(TableBatch, t0, err)
	if err == nil {
		c.h.end(QueueDelete, time.Time{}, deleteErr)
	}
	return etags, deleteErr, err
}

var _ storage.GroupCombiner = (*groupCombiner)(nil)

// groupCombiner keeps a driver's storage.GroupCombiner visible through the
// wrapper.
type groupCombiner struct {
	*combiner
	gc storage.GroupCombiner
}

// BatchDeleteMany is reported as a TableBatch per item and, for each item
// whose batch applied, a QueueDelete with its DeleteErr: the two calls
// each completion stands for, as BatchDelete is. An item whose Before hook
// fails gets that error and is left out of the call. The call's whole
// duration is carried by the first item's TableBatch.
func (c *groupCombiner) BatchDeleteMany(ctx context.Context, items []storage.DeleteItem) ([]storage.DeleteResult, error) {
	res := make([]storage.DeleteResult, len(items))
	pass := make([]storage.DeleteItem, 0, len(items))
	idx := make([]int, 0, len(items))
	var t0 time.Time
	for i, it := range items {
		t, err := c.h.begin(TableBatch, QueueDelete)
		if err != nil {
			res[i].Err = err
			continue
		}
		if len(idx) == 0 {
			t0 = t
		}
		pass = append(pass, it)
		idx = append(idx, i)
	}
	if len(pass) == 0 {
		return res, nil
	}
	got, err := c.gc.BatchDeleteMany(ctx, pass)
	for k, i := range idx {
		itemErr := err
		if err == nil {
			res[i] = got[k]
			itemErr = got[k].Err
		}
		start := time.Time{}
		if k == 0 {
			start = t0
		}
		c.h.end(TableBatch, start, itemErr)
		if itemErr == nil {
			c.h.end(QueueDelete, time.Time{}, got[k].DeleteErr)
		}
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Replicas answers for the wrapped table (storage.Replicated): its
// replicas, each reporting its calls to the same hooks; nil when the
// wrapped table is not replicated.
func (t *table) Replicas() []storage.Table {
	reps := storage.ReplicasOf(t.t)
	if reps == nil {
		return nil
	}
	out := make([]storage.Table, len(reps))
	for i, r := range reps {
		out[i] = &table{t: r, h: t.h}
	}
	return out
}

// ReplicaOf answers for the wrapped table (storage.Replicated).
func (t *table) ReplicaOf(partitionKey string) int { return storage.ReplicaOf(t.t, partitionKey) }
