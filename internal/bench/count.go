package bench

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// Op names one kind of storage call, for the per-kind breakdown.
type Op int

// The storage calls a Counter counts: every queue and table call that is a
// billed transaction on Azure Storage.
const (
	OpEnqueue Op = iota
	OpDequeue
	OpUpdateVisibility
	OpDeleteMessage
	OpPeek
	OpCount
	OpInsert
	OpGet
	OpUpdate
	OpUpsert
	OpDeleteEntity
	OpQuery
	OpBatch
	numOps
)

var opNames = [numOps]string{
	"enqueue", "dequeue", "update_visibility", "delete_message", "peek", "approximate_count",
	"insert", "get", "update", "upsert", "delete_entity", "query", "batch",
}

// String returns the operation's snake_case name (as in Result.OpsByKind).
func (o Op) String() string {
	if o < 0 || o >= numOps {
		return "unknown"
	}
	return opNames[o]
}

// Counter wraps a storage.Store and counts every queue and table call made
// through the queues and tables it hands out (not Queue/Table/Close
// themselves, which are not per-command transactions). Safe for concurrent use.
type Counter struct {
	storage.Store
	n  [numOps]atomic.Int64
	ns [numOps]atomic.Int64 // time spent in calls of each kind
}

// NewCounter returns a Counter around st.
func NewCounter(st storage.Store) *Counter { return &Counter{Store: st} }

// Counted returns the store to use: c itself, or, when the wrapped store
// implements storage.Combiner, a view of c that implements it too (each
// BatchEnqueue counted as one batch and one enqueue, the calls Azure would
// bill).
func (c *Counter) Counted() storage.Store {
	if cb, ok := c.Store.(storage.Combiner); ok {
		return &combiningCounter{Counter: c, cb: cb}
	}
	return c
}

type combiningCounter struct {
	*Counter
	cb storage.Combiner
}

func (c *combiningCounter) BatchEnqueue(ctx context.Context, table, pk string, ops []storage.BatchOp, queue, text string, d, ttl time.Duration) ([]string, storage.Message, error) {
	c.add(OpBatch)
	c.add(OpEnqueue)
	defer c.timed(OpBatch, time.Now())
	return c.cb.BatchEnqueue(ctx, table, pk, ops, queue, text, d, ttl)
}

// Total returns the number of calls counted so far.
func (c *Counter) Total() int64 {
	var t int64
	for i := range c.n {
		t += c.n[i].Load()
	}
	return t
}

// Snapshot returns the per-kind counts so far.
func (c *Counter) Snapshot() [numOps]int64 {
	var s [numOps]int64
	for i := range c.n {
		s[i] = c.n[i].Load()
	}
	return s
}

func (c *Counter) add(o Op) { c.n[o].Add(1) }

// timed records the duration of a call that began at t0.
func (c *Counter) timed(o Op, t0 time.Time) { c.ns[o].Add(int64(time.Since(t0))) }

// Durations returns the total time spent in calls of each kind so far.
func (c *Counter) Durations() [numOps]time.Duration {
	var d [numOps]time.Duration
	for i := range c.ns {
		d[i] = time.Duration(c.ns[i].Load())
	}
	return d
}

// Queue returns the named queue of the wrapped store, counted.
func (c *Counter) Queue(ctx context.Context, name string) (storage.Queue, error) {
	q, err := c.Store.Queue(ctx, name)
	if err != nil {
		return nil, err
	}
	return &countQueue{Queue: q, c: c}, nil
}

// Table returns the named table of the wrapped store, counted.
func (c *Counter) Table(ctx context.Context, name string) (storage.Table, error) {
	t, err := c.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return &countTable{Table: t, c: c}, nil
}

type countQueue struct {
	storage.Queue
	c *Counter
}

func (q *countQueue) Enqueue(ctx context.Context, text string, d, ttl time.Duration) (storage.Message, error) {
	q.c.add(OpEnqueue)
	defer q.c.timed(OpEnqueue, time.Now())
	return q.Queue.Enqueue(ctx, text, d, ttl)
}

func (q *countQueue) Dequeue(ctx context.Context, max int, v time.Duration) ([]storage.Message, error) {
	q.c.add(OpDequeue)
	defer q.c.timed(OpDequeue, time.Now())
	return q.Queue.Dequeue(ctx, max, v)
}

func (q *countQueue) UpdateVisibility(ctx context.Context, id, r string, v time.Duration) (string, time.Time, error) {
	q.c.add(OpUpdateVisibility)
	defer q.c.timed(OpUpdateVisibility, time.Now())
	return q.Queue.UpdateVisibility(ctx, id, r, v)
}

func (q *countQueue) Delete(ctx context.Context, id, r string) error {
	q.c.add(OpDeleteMessage)
	defer q.c.timed(OpDeleteMessage, time.Now())
	return q.Queue.Delete(ctx, id, r)
}

func (q *countQueue) Peek(ctx context.Context, max int) ([]storage.Message, error) {
	q.c.add(OpPeek)
	defer q.c.timed(OpPeek, time.Now())
	return q.Queue.Peek(ctx, max)
}

func (q *countQueue) ApproximateCount(ctx context.Context) (int, error) {
	q.c.add(OpCount)
	defer q.c.timed(OpCount, time.Now())
	return q.Queue.ApproximateCount(ctx)
}

type countTable struct {
	storage.Table
	c *Counter
}

func (t *countTable) Insert(ctx context.Context, e storage.Entity) (string, error) {
	t.c.add(OpInsert)
	defer t.c.timed(OpInsert, time.Now())
	return t.Table.Insert(ctx, e)
}

func (t *countTable) Get(ctx context.Context, pk, rk string) (storage.Entity, error) {
	t.c.add(OpGet)
	defer t.c.timed(OpGet, time.Now())
	return t.Table.Get(ctx, pk, rk)
}

func (t *countTable) Update(ctx context.Context, e storage.Entity, m storage.UpdateMode, ifMatch string) (string, error) {
	t.c.add(OpUpdate)
	defer t.c.timed(OpUpdate, time.Now())
	return t.Table.Update(ctx, e, m, ifMatch)
}

func (t *countTable) Upsert(ctx context.Context, e storage.Entity, m storage.UpdateMode) (string, error) {
	t.c.add(OpUpsert)
	defer t.c.timed(OpUpsert, time.Now())
	return t.Table.Upsert(ctx, e, m)
}

func (t *countTable) Delete(ctx context.Context, pk, rk, ifMatch string) error {
	t.c.add(OpDeleteEntity)
	defer t.c.timed(OpDeleteEntity, time.Now())
	return t.Table.Delete(ctx, pk, rk, ifMatch)
}

func (t *countTable) Query(ctx context.Context, q storage.Query) (storage.Page, error) {
	t.c.add(OpQuery)
	defer t.c.timed(OpQuery, time.Now())
	return t.Table.Query(ctx, q)
}

func (t *countTable) Batch(ctx context.Context, pk string, ops []storage.BatchOp) ([]string, error) {
	t.c.add(OpBatch)
	defer t.c.timed(OpBatch, time.Now())
	return t.Table.Batch(ctx, pk, ops)
}

func (c *combiningCounter) BatchDelete(ctx context.Context, table, pk string, ops []storage.BatchOp, queue, id, receipt string) ([]string, error, error) {
	c.add(OpBatch)
	c.add(OpDeleteMessage)
	defer c.timed(OpBatch, time.Now())
	return c.cb.BatchDelete(ctx, table, pk, ops, queue, id, receipt)
}
