package storagetest

import (
	"errors"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// Features says which optional abilities a driver declares, as
// watermill's test suite takes a features struct: RunWithFeatures fails a
// case when a declared ability is missing from the store, and tests an
// ability the store offers whether declared or not.
type Features struct {
	// Combiner: the store implements storage.Combiner (a table batch with
	// a queue write in one durable write). Default false.
	Combiner bool
	// GroupCombiner: the store implements storage.GroupCombiner (many
	// completions in one durable write). Default false.
	GroupCombiner bool
}

// RunWithFeatures is Run plus the cases of the optional abilities (group
// Combined/…): what f declares must be offered, and what the store offers
// is tested.
func RunWithFeatures(t *testing.T, f Features, open func(t *testing.T) storage.Store) {
	run(t, f, open)
}

func combineCases(f Features) []testCase {
	return []testCase{
		{"BatchEnqueue", func(t *testing.T, s storage.Store) { testBatchEnqueue(t, s, f) }},
		{"BatchDelete", func(t *testing.T, s storage.Store) { testBatchDelete(t, s, f) }},
		{"BatchDeleteMany", func(t *testing.T, s storage.Store) { testBatchDeleteMany(t, s, f) }},
	}
}

// combiner returns s's storage.Combiner; nil (the case has nothing to
// test) when s offers none and f does not declare one.
func combiner(t *testing.T, s storage.Store, f Features) storage.Combiner {
	t.Helper()
	cb, ok := s.(storage.Combiner)
	if !ok && (f.Combiner || f.GroupCombiner) {
		t.Fatalf("the driver declares Features.Combiner, but %T does not implement storage.Combiner", s)
	}
	return cb
}

// testBatchAssumeAbsent: inserts marked AssumeAbsent under a conditional
// update are written when the ETag matches; when it moved the batch fails
// with ErrConflict and writes nothing (every driver: it may check or not).
func testBatchAssumeAbsent(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	etag, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "a", Properties: map[string]any{"N": int32(1)}})
	must(t, "Insert", err)
	ops := func(row, etag string) []storage.BatchOp {
		return []storage.BatchOp{
			{Kind: storage.OpInsert, AssumeAbsent: true, Entity: storage.Entity{PartitionKey: "p", RowKey: row, Properties: map[string]any{"Row": row}}},
			{Kind: storage.OpUpdate, Mode: storage.Merge, IfMatch: etag, Entity: storage.Entity{PartitionKey: "p", RowKey: "a", Properties: map[string]any{"N": int32(2)}}},
		}
	}
	etags, err := tb.Batch(ctx, "p", ops("e1", etag))
	must(t, "Batch under the current ETag", err)
	wantRows(t, "after the batch", tb, "p", "a", "e1")
	_, err = tb.Batch(ctx, "p", ops("e2", etag))
	if !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("Batch under a stale ETag: %v, want ErrConflict", err)
	}
	wantRows(t, "after the stale batch", tb, "p", "a", "e1")
	e, err := tb.Get(ctx, "p", "a")
	must(t, "Get", err)
	if e.ETag != etags[1] || e.Properties["N"] != int32(2) {
		t.Fatalf("guard row after the stale batch: N %v ETag %s, want 2 and %s", e.Properties["N"], e.ETag, etags[1])
	}
}

func testBatchEnqueue(t *testing.T, s storage.Store, f Features) {
	cb := combiner(t, s, f)
	if cb == nil {
		return
	}
	ctx := caseCtx(t)
	tb, q := newTable(t, s), newQueue(t, s)
	_, msg, err := cb.BatchEnqueue(ctx, tb.Name(), "p", []storage.BatchOp{{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: "p", RowKey: "r"}}}, q.Name(), "one", 0, storage.NoExpiry)
	must(t, "BatchEnqueue", err)
	if msg.ID == "" {
		t.Fatal("BatchEnqueue returned no message ID")
	}
	// A failing batch enqueues nothing.
	_, _, err = cb.BatchEnqueue(ctx, tb.Name(), "p", []storage.BatchOp{{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: "p", RowKey: "r"}}}, q.Name(), "two", 0, storage.NoExpiry)
	wantBatchErr(t, "BatchEnqueue of an existing row", err, 0, storage.ErrExists)
	ms, err := q.Dequeue(ctx, 32, 30*time.Second)
	must(t, "Dequeue", err)
	if len(ms) != 1 || ms[0].Text != "one" {
		t.Fatalf("queue after a good and a failed BatchEnqueue: %d messages (%v), want only \"one\"", len(ms), ms)
	}
}

func testBatchDelete(t *testing.T, s storage.Store, f Features) {
	cb := combiner(t, s, f)
	if cb == nil {
		return
	}
	ctx := caseCtx(t)
	tb, q := newTable(t, s), newQueue(t, s)
	etag, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "a"})
	must(t, "Insert", err)
	_, err = q.Enqueue(ctx, "m", 0, storage.NoExpiry)
	must(t, "Enqueue", err)
	ms, err := q.Dequeue(ctx, 1, 30*time.Second)
	must(t, "Dequeue", err)
	if len(ms) != 1 {
		t.Fatalf("Dequeue: %d messages", len(ms))
	}
	m := ms[0]
	upd := func(etag string) []storage.BatchOp {
		return []storage.BatchOp{{Kind: storage.OpUpdate, Mode: storage.Merge, IfMatch: etag, Entity: storage.Entity{PartitionKey: "p", RowKey: "a", Properties: map[string]any{"Done": true}}}}
	}
	// The batch fails: nothing is deleted.
	_, _, err = cb.BatchDelete(ctx, tb.Name(), "p", upd(`W/"datetime'2000-01-01T00:00:00.0000000Z'"`), q.Name(), m.ID, m.PopReceipt)
	if !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("BatchDelete with a stale ETag: %v, want ErrConflict", err)
	}
	if n, err := q.ApproximateCount(ctx); err != nil || n != 1 {
		t.Fatalf("queue after a failed BatchDelete: %d messages (%v), want 1", n, err)
	}
	// A stale receipt: the batch applies, the delete's error comes back.
	_, deleteErr, err := cb.BatchDelete(ctx, tb.Name(), "p", upd(etag), q.Name(), m.ID, "stale"+m.PopReceipt)
	must(t, "BatchDelete with a stale receipt", err)
	if !errors.Is(deleteErr, storage.ErrLeaseLost) && !errors.Is(deleteErr, storage.ErrNotFound) {
		t.Fatalf("BatchDelete with a stale receipt: deleteErr %v, want ErrLeaseLost (or ErrNotFound)", deleteErr)
	}
	e, err := tb.Get(ctx, "p", "a")
	must(t, "Get", err)
	if e.Properties["Done"] != true {
		t.Fatal("the batch of a BatchDelete whose delete failed was not applied")
	}
	_, deleteErr, err = cb.BatchDelete(ctx, tb.Name(), "p", upd(e.ETag), q.Name(), m.ID, m.PopReceipt)
	must(t, "BatchDelete", err)
	must(t, "BatchDelete's delete", deleteErr)
	if n, err := q.ApproximateCount(ctx); err != nil || n != 0 {
		t.Fatalf("queue after BatchDelete: %d messages (%v), want 0", n, err)
	}
}

func testBatchDeleteMany(t *testing.T, s storage.Store, f Features) {
	gc, ok := s.(storage.GroupCombiner)
	if !ok {
		if f.GroupCombiner {
			t.Fatalf("the driver declares Features.GroupCombiner, but %T does not implement storage.GroupCombiner", s)
		}
		return
	}
	ctx := caseCtx(t)
	tb, q := newTable(t, s), newQueue(t, s)
	var etags []string
	var ms []storage.Message
	for _, pk := range []string{"ok", "conflict", "stale"} {
		etag, err := tb.Insert(ctx, storage.Entity{PartitionKey: pk, RowKey: "a"})
		must(t, "Insert", err)
		etags = append(etags, etag)
		_, err = q.Enqueue(ctx, pk, 0, storage.NoExpiry)
		must(t, "Enqueue", err)
	}
	for len(ms) < 3 {
		got, err := q.Dequeue(ctx, 32, 30*time.Second)
		must(t, "Dequeue", err)
		if len(got) == 0 {
			t.Fatalf("Dequeue: %d of 3 messages", len(ms))
		}
		ms = append(ms, got...)
	}
	byText := map[string]storage.Message{}
	for _, m := range ms {
		byText[m.Text] = m
	}
	item := func(pk, etag, receipt string) storage.DeleteItem {
		m := byText[pk]
		if receipt == "" {
			receipt = m.PopReceipt
		}
		return storage.DeleteItem{Table: tb.Name(), PartitionKey: pk, Queue: q.Name(), ID: m.ID, PopReceipt: receipt, Ops: []storage.BatchOp{
			{Kind: storage.OpInsert, AssumeAbsent: true, Entity: storage.Entity{PartitionKey: pk, RowKey: "e:1", Properties: map[string]any{"Kind": "completed"}}},
			{Kind: storage.OpUpdate, Mode: storage.Merge, IfMatch: etag, Entity: storage.Entity{PartitionKey: pk, RowKey: "a", Properties: map[string]any{"Done": true}}},
		}}
	}
	res, err := gc.BatchDeleteMany(ctx, []storage.DeleteItem{
		item("ok", etags[0], ""),
		item("conflict", etags[0], ""), // another row's ETag: stale
		item("stale", etags[2], "stale"+byText["stale"].PopReceipt),
	})
	must(t, "BatchDeleteMany", err)
	if len(res) != 3 {
		t.Fatalf("BatchDeleteMany: %d results, want 3", len(res))
	}
	if res[0].Err != nil || res[0].DeleteErr != nil || len(res[0].ETags) != 2 {
		t.Fatalf("good item: %+v", res[0])
	}
	if !errors.Is(res[1].Err, storage.ErrConflict) {
		t.Fatalf("item with a stale ETag: %+v, want ErrConflict", res[1])
	}
	if res[2].Err != nil || (!errors.Is(res[2].DeleteErr, storage.ErrLeaseLost) && !errors.Is(res[2].DeleteErr, storage.ErrNotFound)) {
		t.Fatalf("item with a stale receipt: %+v, want its batch applied and ErrLeaseLost", res[2])
	}
	wantRows(t, "good item", tb, "ok", "a", "e:1")
	wantRows(t, "failed item", tb, "conflict", "a")
	wantRows(t, "item whose delete failed", tb, "stale", "a", "e:1")
	if n, err := q.ApproximateCount(ctx); err != nil || n != 2 {
		t.Fatalf("queue after BatchDeleteMany: %d messages (%v), want 2 (the failed item's and the stale receipt's)", n, err)
	}
	e, err := tb.Get(ctx, "ok", "a")
	must(t, "Get", err)
	if e.ETag != res[0].ETags[1] {
		t.Fatalf("ETag of the good item's row %s, BatchDeleteMany said %s", e.ETag, res[0].ETags[1])
	}
	// Two items on one partition in one call: the second is refused.
	res, err = gc.BatchDeleteMany(ctx, []storage.DeleteItem{item("ok", e.ETag, ""), item("ok", e.ETag, "")})
	if err == nil && (len(res) != 2 || res[1].Err == nil) {
		t.Fatalf("two items on one partition: %+v, want the second refused", res)
	}
}
