package bench

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// Op names one kind of storage call, for the per-kind breakdown.
type Op int

// The storage calls a Counter counts: every queue and table call that is a
// billed transaction on Azure Storage, and the two table management calls
// retention makes (OpListTables, OpDeleteTable; package instrument does not
// report them).
const (
	OpEnqueue          = Op(instrument.QueueEnqueue)
	OpDequeue          = Op(instrument.QueueDequeue)
	OpUpdateVisibility = Op(instrument.QueueUpdateVisibility)
	OpDeleteMessage    = Op(instrument.QueueDelete)
	OpPeek             = Op(instrument.QueuePeek)
	OpCount            = Op(instrument.QueueCount)
	OpInsert           = Op(instrument.TableInsert)
	OpGet              = Op(instrument.TableGet)
	OpUpdate           = Op(instrument.TableUpdate)
	OpUpsert           = Op(instrument.TableUpsert)
	OpDeleteEntity     = Op(instrument.TableDelete)
	OpQuery            = Op(instrument.TableQuery)
	OpBatch            = Op(instrument.TableBatch)
	// OpListTables is Store.Tables: a listing of tables (List Tables on Azure).
	OpListTables = Op(instrument.NumOps)
	// OpDeleteTable is Store.DeleteTable: a table dropped whole.
	OpDeleteTable = Op(instrument.NumOps + 1)
	numOps        = instrument.NumOps + 2
)

var opNames = [numOps]string{
	OpEnqueue: "enqueue", OpDequeue: "dequeue", OpUpdateVisibility: "update_visibility", OpDeleteMessage: "delete_message",
	OpPeek: "peek", OpCount: "approximate_count", OpInsert: "insert", OpGet: "get", OpUpdate: "update",
	OpUpsert: "upsert", OpDeleteEntity: "delete_entity", OpQuery: "query", OpBatch: "batch",
	OpListTables: "list_tables", OpDeleteTable: "delete_table",
}

// String returns the operation's snake_case name (as in Result.OpsByKind).
func (o Op) String() string {
	if o < 0 || int(o) >= numOps {
		return "unknown"
	}
	return opNames[o]
}

// Counter counts every queue and table call made through the store Counted
// returns, and Tables and DeleteTable (retention's listing and table drop),
// and the time spent in each kind. Not counted: Queue, Table and OpenTable
// (drivers cache them; Azure's Create Table is made once per table and
// process), DeleteQueue, Queues and Close. Safe for concurrent use.
type Counter struct {
	counted storage.Store
	n       [numOps]atomic.Int64
	ns      [numOps]atomic.Int64 // time spent in calls of each kind
}

// NewCounter returns a Counter around st.
func NewCounter(st storage.Store) *Counter {
	c := &Counter{}
	w := instrument.Wrap(st, instrument.Hooks{
		// Counted when made, timed when done.
		Before: func(o instrument.Op) error { c.n[o].Add(1); return nil },
		After:  func(call instrument.Call) { c.ns[call.Op].Add(int64(call.Duration)) },
	})
	m := &manageCounted{Store: w, opener: w.(storage.TableOpener), c: c}
	if gc, ok := w.(storage.GroupCombiner); ok {
		c.counted = &manageGroupCombiner{manageCounted: m, GroupCombiner: gc}
	} else if cb, ok := w.(storage.Combiner); ok {
		c.counted = &manageCombiner{manageCounted: m, Combiner: cb}
	} else {
		c.counted = m
	}
	return c
}

// manageCounted adds the counts of Tables and DeleteTable to the
// instrumented store, keeping its storage.TableOpener (without it, reads
// of a day table would list the tables first).
type manageCounted struct {
	storage.Store
	opener storage.TableOpener
	c      *Counter
}

// manageCombiner is manageCounted of a storage.Combiner.
type manageCombiner struct {
	*manageCounted
	storage.Combiner
}

// manageGroupCombiner is manageCounted of a storage.GroupCombiner.
type manageGroupCombiner struct {
	*manageCounted
	storage.GroupCombiner
}

func (m *manageCounted) timed(o Op, call func() error) error {
	m.c.n[o].Add(1)
	t0 := time.Now()
	err := call()
	m.c.ns[o].Add(int64(time.Since(t0)))
	return err
}

func (m *manageCounted) Tables(ctx context.Context, prefix string) (names []string, err error) {
	err = m.timed(OpListTables, func() error { names, err = m.Store.Tables(ctx, prefix); return err })
	return names, err
}

func (m *manageCounted) DeleteTable(ctx context.Context, name string) error {
	return m.timed(OpDeleteTable, func() error { return m.Store.DeleteTable(ctx, name) })
}

func (m *manageCounted) OpenTable(ctx context.Context, name string) (storage.Table, error) {
	return m.opener.OpenTable(ctx, name)
}

// Counted returns the store to use: st counted. When st implements
// storage.Combiner so does the result, each BatchEnqueue counted as one batch
// and one enqueue and each BatchDelete, and each item of a grouped
// BatchDeleteMany, as one batch and one message delete
// (the calls Azure would bill), the whole call's time given to the batch.
func (c *Counter) Counted() storage.Store { return c.counted }

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

// Durations returns the total time spent in calls of each kind so far.
func (c *Counter) Durations() [numOps]time.Duration {
	var d [numOps]time.Duration
	for i := range c.ns {
		d[i] = time.Duration(c.ns[i].Load())
	}
	return d
}
