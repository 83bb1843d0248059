package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
	"github.com/cmdq-dev/cmdq/storage/instrument"
	"github.com/cmdq-dev/cmdq/storage/multi"
)

// recorder collects what the hooks see.
type recorder struct {
	mu     sync.Mutex
	before []instrument.Op
	after  []instrument.Call
}

func (r *recorder) hooks() instrument.Hooks {
	return instrument.Hooks{
		Before: func(op instrument.Op) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.before = append(r.before, op)
			return nil
		},
		After: func(c instrument.Call) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.after = append(r.after, c)
		},
	}
}

// take returns and clears what was recorded.
func (r *recorder) take() ([]instrument.Op, []instrument.Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, a := r.before, r.after
	r.before, r.after = nil, nil
	return b, a
}

func openEmbedded(t *testing.T) storage.Store {
	t.Helper()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestEveryCallReportedOnce: each queue and table method is seen once by
// Before and once by After, with its own Op and error; Queue and Table are
// not reported.
func TestEveryCallReportedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var r recorder
	w := instrument.Wrap(openEmbedded(t), r.hooks())
	q, err := w.Queue(ctx, "instq")
	if err != nil {
		t.Fatal(err)
	}
	tb, err := w.Table(ctx, "instt")
	if err != nil {
		t.Fatal(err)
	}
	if q.Name() != "instq" || tb.Name() != "instt" {
		t.Fatalf("names %q, %q", q.Name(), tb.Name())
	}
	if b, a := r.take(); len(b) != 0 || len(a) != 0 {
		t.Fatalf("Queue, Table and Name reported: %v %v", b, a)
	}
	var m storage.Message
	var got []storage.Message
	var receipt string
	e := storage.Entity{PartitionKey: "p", RowKey: "r"}
	steps := []struct {
		op      instrument.Op
		call    func() error
		wantErr error
	}{
		{instrument.QueueEnqueue, func() (err error) { m, err = q.Enqueue(ctx, "x", 0, 0); return }, nil},
		{instrument.QueuePeek, func() (err error) { _, err = q.Peek(ctx, 1); return }, nil},
		{instrument.QueueCount, func() (err error) { _, err = q.ApproximateCount(ctx); return }, nil},
		{instrument.QueueDequeue, func() (err error) { got, err = q.Dequeue(ctx, 1, time.Minute); return }, nil},
		{instrument.QueueUpdateVisibility, func() (err error) {
			receipt, _, err = q.UpdateVisibility(ctx, got[0].ID, got[0].PopReceipt, time.Minute)
			return
		}, nil},
		{instrument.QueueDelete, func() error { return q.Delete(ctx, m.ID, receipt) }, nil},
		{instrument.QueueDelete, func() error { return q.Delete(ctx, m.ID, receipt) }, storage.ErrNotFound},
		{instrument.TableInsert, func() (err error) { _, err = tb.Insert(ctx, e); return }, nil},
		{instrument.TableInsert, func() (err error) { _, err = tb.Insert(ctx, e); return }, storage.ErrExists},
		{instrument.TableGet, func() (err error) { _, err = tb.Get(ctx, "p", "r"); return }, nil},
		{instrument.TableUpdate, func() (err error) { _, err = tb.Update(ctx, e, storage.Merge, ""); return }, nil},
		{instrument.TableUpsert, func() (err error) { _, err = tb.Upsert(ctx, e, storage.Replace); return }, nil},
		{instrument.TableQuery, func() (err error) { _, err = tb.Query(ctx, storage.Query{PartitionKey: "p"}); return }, nil},
		{instrument.TableBatch, func() (err error) {
			_, err = tb.Batch(ctx, "p", []storage.BatchOp{{Kind: storage.OpUpsert, Entity: e}})
			return
		}, nil},
		{instrument.TableDelete, func() error { return tb.Delete(ctx, "p", "r", "") }, nil},
	}
	seen := map[instrument.Op]bool{}
	for _, s := range steps {
		err := s.call()
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("%s: err %v, want %v", s.op, err, s.wantErr)
		}
		b, a := r.take()
		if !reflect.DeepEqual(b, []instrument.Op{s.op}) {
			t.Errorf("%s: Before saw %v", s.op, b)
		}
		if len(a) != 1 || a[0].Op != s.op || a[0].Err != err || a[0].Duration <= 0 {
			t.Errorf("%s: After saw %+v, want one call with err %v", s.op, a, err)
		}
		seen[s.op] = true
	}
	for op := instrument.Op(0); int(op) < instrument.NumOps; op++ {
		if !seen[op] {
			t.Errorf("%s not exercised", op)
		}
	}
}

// TestCombinerReportedAsTwo: the embedded store's storage.Combiner stays
// visible through the wrapper; a combined call is reported as the two
// operations it stands for, and a failed BatchDelete reports no delete to
// After.
func TestCombinerReportedAsTwo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var r recorder
	st := openEmbedded(t)
	cb, ok := instrument.Wrap(st, r.hooks()).(storage.Combiner)
	if !ok {
		t.Fatal("the wrapper hid the embedded store's storage.Combiner")
	}
	e := storage.Entity{PartitionKey: "p", RowKey: "r"}
	ins := []storage.BatchOp{{Kind: storage.OpInsert, Entity: e}}
	if _, _, err := cb.BatchEnqueue(ctx, "instt", "p", ins, "instq", "y", 0, 0); err != nil {
		t.Fatal(err)
	}
	b, a := r.take()
	if !reflect.DeepEqual(b, []instrument.Op{instrument.TableBatch, instrument.QueueEnqueue}) {
		t.Errorf("BatchEnqueue: Before saw %v", b)
	}
	if len(a) != 2 || a[0].Op != instrument.TableBatch || a[0].Duration <= 0 || a[1].Op != instrument.QueueEnqueue || a[1].Duration != 0 {
		t.Errorf("BatchEnqueue: After saw %+v", a)
	}

	q, err := st.Queue(ctx, "instq")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := q.Dequeue(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Dequeue: %v, %v", ms, err)
	}
	// A failed batch (the entity exists): nothing is deleted, only the batch reported.
	if _, _, err := cb.BatchDelete(ctx, "instt", "p", ins, "instq", ms[0].ID, ms[0].PopReceipt); !errors.Is(err, storage.ErrExists) {
		t.Fatalf("BatchDelete of a failing batch: %v", err)
	}
	b, a = r.take()
	if !reflect.DeepEqual(b, []instrument.Op{instrument.TableBatch, instrument.QueueDelete}) {
		t.Errorf("failed BatchDelete: Before saw %v", b)
	}
	if len(a) != 1 || a[0].Op != instrument.TableBatch || !errors.Is(a[0].Err, storage.ErrExists) {
		t.Errorf("failed BatchDelete: After saw %+v", a)
	}
	up := []storage.BatchOp{{Kind: storage.OpUpsert, Entity: e}}
	if _, delErr, err := cb.BatchDelete(ctx, "instt", "p", up, "instq", ms[0].ID, ms[0].PopReceipt); err != nil || delErr != nil {
		t.Fatalf("BatchDelete: %v, %v", delErr, err)
	}
	if _, a = r.take(); len(a) != 2 || a[0].Op != instrument.TableBatch || a[1].Op != instrument.QueueDelete || a[1].Err != nil {
		t.Errorf("BatchDelete: After saw %+v", a)
	}

	// A store without Combiner gives a wrapper without it.
	if _, ok := instrument.Wrap(struct{ storage.Store }{st}, instrument.Hooks{}).(storage.Combiner); ok {
		t.Error("the wrapper of a store without Combiner implements it")
	}
}

// TestBeforeErrorStopsTheCall: an error from Before is returned without
// reaching the store, and After does not see the call.
func TestBeforeErrorStopsTheCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	injected := errors.New("injected")
	var after []instrument.Call
	st := openEmbedded(t)
	w := instrument.Wrap(st, instrument.Hooks{
		Before: func(op instrument.Op) error {
			if op == instrument.QueueEnqueue {
				return injected
			}
			return nil
		},
		After: func(c instrument.Call) { after = append(after, c) },
	})
	q, err := w.Queue(ctx, "instq")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, "x", 0, 0); err != injected {
		t.Fatalf("Enqueue: %v, want the injected error", err)
	}
	if _, _, err := w.(storage.Combiner).BatchEnqueue(ctx, "instt", "p", []storage.BatchOp{{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: "p", RowKey: "r"}}}, "instq", "y", 0, 0); err != injected {
		t.Fatalf("BatchEnqueue: %v, want the injected error", err)
	}
	if len(after) != 0 {
		t.Fatalf("After saw refused calls: %+v", after)
	}
	raw, err := st.Queue(ctx, "instq")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := raw.ApproximateCount(ctx); err != nil || n != 0 {
		t.Fatalf("the store holds %d messages (%v), want 0", n, err)
	}
	tb, err := st.Table(ctx, "instt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Get(ctx, "p", "r"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the refused batch was written: %v", err)
	}
}

func TestOpString(t *testing.T) {
	t.Parallel()
	if s := instrument.QueueUpdateVisibility.String(); s != "queue_update_visibility" {
		t.Errorf("QueueUpdateVisibility = %q", s)
	}
	if s := instrument.TableBatch.String(); s != "table_batch" {
		t.Errorf("TableBatch = %q", s)
	}
	if s := instrument.Op(instrument.NumOps).String(); s != "unknown" {
		t.Errorf("Op(NumOps) = %q", s)
	}
}

// TestCombinedManyReportedPerItem: each item of a BatchEnqueueMany is
// reported as the batch and the enqueue it stands for, with its own outcome.
func TestCombinedManyReportedPerItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var r recorder
	st := openEmbedded(t)
	cb := instrument.Wrap(st, r.hooks()).(storage.Combiner)
	ins := func(pk string) []storage.BatchOp {
		return []storage.BatchOp{{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: pk, RowKey: "r"}}}
	}
	if _, _, err := cb.BatchEnqueue(ctx, "manyt", "taken", ins("taken"), "manyq", "x", 0, 0); err != nil {
		t.Fatal(err)
	}
	r.take()
	items := []storage.CombinedItem{{PartitionKey: "a", Ops: ins("a"), Text: "a"}, {PartitionKey: "taken", Ops: ins("taken"), Text: "t"}, {PartitionKey: "b", Ops: ins("b"), Text: "b"}}
	res, err := cb.BatchEnqueueMany(ctx, "manyt", "manyq", items, 0, 0)
	if err != nil || res[0].Err != nil || !errors.Is(res[1].Err, storage.ErrExists) || res[2].Err != nil {
		t.Fatalf("BatchEnqueueMany: %+v %v", res, err)
	}
	b, a := r.take()
	if len(b) != 6 || len(a) != 6 {
		t.Fatalf("Before saw %v, After saw %+v; want a batch and an enqueue per item", b, a)
	}
	for k, c := range a {
		want := instrument.TableBatch
		if k%2 == 1 {
			want = instrument.QueueEnqueue
		}
		if c.Op != want || (k/2 == 1) != errors.Is(c.Err, storage.ErrExists) {
			t.Errorf("After call %d: %+v", k, c)
		}
	}
}

// TestExclusiveThroughWrapper: the embedded store says only its process
// uses it (storage.Exclusive), and the wrapper answers for the store it
// wraps, so that cmdq skips a cancel's wait for other processes on it.
func TestExclusiveThroughWrapper(t *testing.T) {
	t.Parallel()
	st := openEmbedded(t)
	if !storage.IsExclusive(st) {
		t.Fatal("the embedded store is not exclusive")
	}
	if !storage.IsExclusive(instrument.Wrap(st, instrument.Hooks{})) {
		t.Fatal("the wrapper hid the embedded store's exclusivity")
	}
	if storage.IsExclusive(instrument.Wrap(instrument.Wrap(nonExclusive{st}, instrument.Hooks{}), instrument.Hooks{})) {
		t.Fatal("a wrapper of a store that is not exclusive says it is")
	}
}

// nonExclusive hides the embedded store's Exclusive method.
type nonExclusive struct{ storage.Store }

// TestGroupedCompletionReportedPerItem: BatchDeleteMany through the
// wrapper is reported as a table batch per item and a message delete per
// item whose batch applied (with its delete's error): a grouped completion
// counts the two calls each completion stands for, whatever the group.
func TestGroupedCompletionReportedPerItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var r recorder
	st := openEmbedded(t)
	w := instrument.Wrap(st, r.hooks())
	gc, ok := w.(storage.GroupCombiner)
	if !ok {
		t.Fatal("the wrapper of a storage.GroupCombiner is not one")
	}
	tb, _ := w.Table(ctx, "groupt")
	q, _ := w.Queue(ctx, "groupq")
	var items []storage.DeleteItem
	for _, pk := range []string{"a", "b", "c"} {
		if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: pk, RowKey: "r"}); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Enqueue(ctx, pk, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := q.Dequeue(ctx, 3, time.Minute)
	if err != nil || len(ms) != 3 {
		t.Fatalf("Dequeue: %d, %v", len(ms), err)
	}
	for i, m := range ms {
		kind, receipt := storage.OpUpsert, m.PopReceipt
		switch i {
		case 1:
			kind = storage.OpInsert // exists: the batch fails
		case 2:
			receipt = "0" // stale: the delete fails
		}
		items = append(items, storage.DeleteItem{Table: "groupt", PartitionKey: m.Text, Queue: "groupq", ID: m.ID, PopReceipt: receipt,
			Ops: []storage.BatchOp{{Kind: kind, Entity: storage.Entity{PartitionKey: m.Text, RowKey: "r"}}}})
	}
	r.take()
	res, err := gc.BatchDeleteMany(ctx, items)
	if err != nil || res[0].Err != nil || !errors.Is(res[1].Err, storage.ErrExists) || res[2].Err != nil || !errors.Is(res[2].DeleteErr, storage.ErrLeaseLost) {
		t.Fatalf("BatchDeleteMany: %+v %v", res, err)
	}
	b, a := r.take()
	want := []instrument.Op{instrument.TableBatch, instrument.QueueDelete, instrument.TableBatch, instrument.QueueDelete, instrument.TableBatch, instrument.QueueDelete}
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("Before saw %v, want %v", b, want)
	}
	var ops []instrument.Op
	for _, c := range a {
		ops = append(ops, c.Op)
	}
	if fmt.Sprint(ops) != fmt.Sprint([]instrument.Op{instrument.TableBatch, instrument.QueueDelete, instrument.TableBatch, instrument.TableBatch, instrument.QueueDelete}) ||
		a[1].Err != nil || !errors.Is(a[2].Err, storage.ErrExists) || !errors.Is(a[4].Err, storage.ErrLeaseLost) {
		t.Fatalf("After saw %+v: want batch+delete, a failed batch, batch+failed delete", a)
	}
}

// TestReplicasReported: the wrapper of a table of a store spread over
// several (storage/multi) is replicated too, each replica's calls
// reported; the wrapper of a plain store's table is not.
func TestReplicasReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var r recorder
	sp, err := multi.New([]multi.Member{{Store: openEmbedded(t)}, {Store: openEmbedded(t)}}, multi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := instrument.Wrap(sp, r.hooks()).Table(ctx, "reps")
	if err != nil {
		t.Fatal(err)
	}
	reps := storage.ReplicasOf(tb)
	if len(reps) != 2 {
		t.Fatalf("the wrapper of a multi store's table has %d replicas, want 2", len(reps))
	}
	r.take()
	if _, err := reps[1].Upsert(ctx, storage.Entity{PartitionKey: "~s", RowKey: "r"}, storage.Replace); err != nil {
		t.Fatal(err)
	}
	if before, _ := r.take(); !reflect.DeepEqual(before, []instrument.Op{instrument.TableUpsert}) {
		t.Fatalf("a replica's upsert reported as %v", before)
	}
	plain, err := instrument.Wrap(openEmbedded(t), instrument.Hooks{}).Table(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if storage.ReplicasOf(plain) != nil {
		t.Fatal("the wrapper of a plain store's table says it is replicated")
	}
}
