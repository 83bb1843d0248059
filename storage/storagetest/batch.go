package storagetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cmdq-dev/cmdq/storage"
)

func batchCases() []testCase {
	return []testCase{
		{"AllOrNothingInsertConflict", testBatchInsertConflict},
		{"StaleETag", testBatchStaleETag},
		{"MissingEntity", testBatchMissingEntity},
		{"HundredOps", testBatchHundredOps},
		{"MixedOps", testBatchMixedOps},
		{"ETagsUsable", testBatchETagsUsable},
		{"AssumeAbsentUnderETag", testBatchAssumeAbsent},
	}
}

// wantBatchErr fails unless err is a *storage.BatchError with the given index
// wrapping target.
func wantBatchErr(t testing.TB, what string, err error, index int, target error) {
	t.Helper()
	var be *storage.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("%s: got error %v (%T), want a *storage.BatchError", what, err, err)
	}
	if be.Index != index {
		t.Fatalf("%s: BatchError.Index = %d, want %d (error: %v)", what, be.Index, index, err)
	}
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v does not wrap %v", what, err, target)
	}
}

// partitionKeys lists the row keys stored in partition pk.
func partitionKeys(t testing.TB, tb storage.Table, pk string) []string {
	t.Helper()
	keys, _ := queryAll(t, tb, storage.Query{PartitionKey: pk})
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k[1]
	}
	return out
}

func wantRows(t testing.TB, what string, tb storage.Table, pk string, want ...string) {
	t.Helper()
	got := partitionKeys(t, tb, pk)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: partition %q holds rows %q, want %q", what, pk, got, want)
	}
}

func testBatchInsertConflict(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	for _, k := range []int{0, 2, 4} {
		pk := fmt.Sprintf("p%d", k)
		existing := fmt.Sprintf("r%d", k)
		etag, err := tb.Insert(ctx, ent(pk, existing, map[string]any{"K": pk + "|" + existing, "V": "orig"}))
		must(t, "Insert", err)
		var ops []storage.BatchOp
		for i := range 5 {
			rk := fmt.Sprintf("r%d", i)
			op := storage.BatchOp{Kind: storage.OpInsert, Entity: ent(pk, rk, map[string]any{"K": pk + "|" + rk, "V": "batch"})}
			if i == 1 {
				op.Kind = storage.OpUpsert
			}
			ops = append(ops, op)
		}
		_, err = tb.Batch(ctx, pk, ops)
		wantBatchErr(t, fmt.Sprintf("batch with an insert conflict at index %d", k), err, k, storage.ErrExists)
		wantRows(t, "after the failed batch (nothing may be applied)", tb, pk, existing)
		e, err := tb.Get(ctx, pk, existing)
		must(t, "Get", err)
		if e.Properties["V"] != "orig" || e.ETag != etag {
			t.Fatalf("the conflicting entity changed: V = %v ETag %q; want %q, %q", e.Properties["V"], e.ETag, "orig", etag)
		}
	}
}

func testBatchStaleETag(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	e0, err := tb.Insert(ctx, ent("p", "r0", map[string]any{"V": "orig"}))
	must(t, "Insert", err)
	stale, err := tb.Insert(ctx, ent("p", "r1", map[string]any{"V": "orig"}))
	must(t, "Insert", err)
	cur, err := tb.Update(ctx, ent("p", "r1", map[string]any{"V": "changed"}), storage.Merge, "")
	must(t, "Update", err)
	for _, kind := range []storage.BatchOpKind{storage.OpUpdate, storage.OpDelete} {
		_, err = tb.Batch(ctx, "p", []storage.BatchOp{
			{Kind: storage.OpUpdate, Entity: ent("p", "r0", map[string]any{"V": "batch"}), Mode: storage.Replace, IfMatch: e0},
			{Kind: kind, Entity: ent("p", "r1", map[string]any{"V": "batch"}), Mode: storage.Merge, IfMatch: stale},
			{Kind: storage.OpInsert, Entity: ent("p", "r2", map[string]any{"V": "batch"})},
		})
		wantBatchErr(t, fmt.Sprintf("batch with a stale-ETag %s at index 1", kind), err, 1, storage.ErrConflict)
		wantRows(t, "after the failed batch", tb, "p", "r0", "r1")
		for rk, etag := range map[string]string{"r0": e0, "r1": cur} {
			e, err := tb.Get(ctx, "p", rk)
			must(t, "Get", err)
			if e.ETag != etag || e.Properties["V"] == "batch" {
				t.Fatalf("%s changed by a failed batch: V = %v ETag %q (want ETag %q)", rk, e.Properties["V"], e.ETag, etag)
			}
		}
	}
}

func testBatchMissingEntity(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	_, err := tb.Insert(ctx, ent("p", "r0", map[string]any{"V": "orig"}))
	must(t, "Insert", err)
	for _, kind := range []storage.BatchOpKind{storage.OpUpdate, storage.OpDelete} {
		_, err = tb.Batch(ctx, "p", []storage.BatchOp{
			{Kind: storage.OpUpsert, Entity: ent("p", "r0", map[string]any{"V": "batch"}), Mode: storage.Replace},
			{Kind: storage.OpInsert, Entity: ent("p", "r1", map[string]any{"V": "batch"})},
			{Kind: kind, Entity: ent("p", "missing", map[string]any{"V": "batch"}), Mode: storage.Merge, IfMatch: storage.IfMatchAny},
		})
		wantBatchErr(t, fmt.Sprintf("batch with a %s of a missing entity at index 2", kind), err, 2, storage.ErrNotFound)
		wantRows(t, "after the failed batch", tb, "p", "r0")
		e, err := tb.Get(ctx, "p", "r0")
		must(t, "Get", err)
		if e.Properties["V"] != "orig" {
			t.Fatalf("r0 changed by a failed batch: V = %v", e.Properties["V"])
		}
	}
}

func testBatchHundredOps(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	var ops []storage.BatchOp
	var want []string
	for i := range storage.MaxBatchOps {
		rk := fmt.Sprintf("r%03d", i)
		want = append(want, rk)
		ops = append(ops, storage.BatchOp{Kind: storage.OpInsert, Entity: ent("p", rk, map[string]any{"K": "p|" + rk, "I": int64(i)})})
	}
	etags, err := tb.Batch(ctx, "p", ops)
	must(t, "Batch of 100 inserts", err)
	if len(etags) != len(ops) {
		t.Fatalf("Batch returned %d ETags for %d operations", len(etags), len(ops))
	}
	page, err := tb.Query(ctx, storage.Query{PartitionKey: "p", Top: 1000})
	must(t, "Query", err)
	if len(page.Entities) != len(ops) {
		t.Fatalf("after a 100-op batch the partition holds %d entities (first page), want 100", len(page.Entities))
	}
	for i, e := range page.Entities {
		if e.RowKey != want[i] || e.Properties["I"] != int64(i) {
			t.Fatalf("entity %d is (%q, I=%v), want (%q, I=%d)", i, e.RowKey, e.Properties["I"], want[i], i)
		}
		if etags[i] == "" || etags[i] != e.ETag {
			t.Fatalf("Batch returned ETag %q for op %d; the stored entity has %q", etags[i], i, e.ETag)
		}
	}
}

func testBatchMixedOps(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	ea, err := tb.Insert(ctx, ent("p", "a", map[string]any{"A": "a", "V": int32(1)}))
	must(t, "Insert", err)
	_, err = tb.Insert(ctx, ent("p", "b", map[string]any{"B": "b", "V": int32(1)}))
	must(t, "Insert", err)
	ec, err := tb.Insert(ctx, ent("p", "c", nil))
	must(t, "Insert", err)
	ops := []storage.BatchOp{
		{Kind: storage.OpInsert, Entity: ent("p", "n", map[string]any{"V": int32(2)})},
		{Kind: storage.OpUpdate, Entity: ent("p", "a", map[string]any{"V": int32(2)}), Mode: storage.Merge, IfMatch: ea},
		{Kind: storage.OpUpsert, Entity: ent("p", "b", map[string]any{"V": int32(2)}), Mode: storage.Replace},
		{Kind: storage.OpUpsert, Entity: ent("p", "m", map[string]any{"V": int32(2)}), Mode: storage.Merge},
		{Kind: storage.OpDelete, Entity: ent("p", "c", nil), IfMatch: ec},
	}
	etags, err := tb.Batch(ctx, "p", ops)
	must(t, "mixed Batch", err)
	if len(etags) != len(ops) {
		t.Fatalf("Batch returned %d ETags for %d operations", len(etags), len(ops))
	}
	if etags[4] != "" {
		t.Fatalf("Batch returned ETag %q for a delete, want empty", etags[4])
	}
	wantRows(t, "after the mixed batch", tb, "p", "a", "b", "m", "n")
	want := map[string]map[string]any{
		"a": {"A": "a", "V": int32(2)},
		"b": {"V": int32(2)},
		"m": {"V": int32(2)},
		"n": {"V": int32(2)},
	}
	idx := map[string]int{"n": 0, "a": 1, "b": 2, "m": 3}
	for rk, props := range want {
		e, err := tb.Get(ctx, "p", rk)
		must(t, "Get", err)
		sameProps(t, "entity "+rk+" after the mixed batch", e.Properties, props)
		if etags[idx[rk]] == "" || etags[idx[rk]] != e.ETag {
			t.Fatalf("Batch returned ETag %q for %s; stored ETag is %q", etags[idx[rk]], rk, e.ETag)
		}
	}
}

func testBatchETagsUsable(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	etags, err := tb.Batch(ctx, "p", []storage.BatchOp{
		{Kind: storage.OpInsert, Entity: ent("p", "r0", map[string]any{"V": int32(1)})},
		{Kind: storage.OpInsert, Entity: ent("p", "r1", map[string]any{"V": int32(1)})},
	})
	must(t, "Batch", err)
	if len(etags) != 2 || etags[0] == "" || etags[1] == "" {
		t.Fatalf("Batch returned ETags %q; want two non-empty ETags", etags)
	}
	newTag, err := tb.Update(ctx, ent("p", "r0", map[string]any{"V": int32(2)}), storage.Merge, etags[0])
	must(t, "Update with the ETag a batch returned", err)
	wantErr(t, "Delete with the batch's now stale ETag", tb.Delete(ctx, "p", "r0", etags[0]), storage.ErrConflict)
	must(t, "Delete with the current ETag", tb.Delete(ctx, "p", "r0", newTag))
	etags2, err := tb.Batch(ctx, "p", []storage.BatchOp{
		{Kind: storage.OpUpdate, Entity: ent("p", "r1", map[string]any{"V": int32(3)}), Mode: storage.Replace, IfMatch: etags[1]},
	})
	must(t, "Batch update with the ETag an earlier batch returned", err)
	_, err = tb.Batch(ctx, "p", []storage.BatchOp{
		{Kind: storage.OpUpdate, Entity: ent("p", "r1", map[string]any{"V": int32(4)}), Mode: storage.Replace, IfMatch: etags[1]},
	})
	wantBatchErr(t, "Batch update with a stale batch ETag", err, 0, storage.ErrConflict)
	e, err := tb.Get(ctx, "p", "r1")
	must(t, "Get", err)
	if e.ETag != etags2[0] || e.Properties["V"] != int32(3) {
		t.Fatalf("r1 = V %v ETag %q; want V 3, ETag %q", e.Properties["V"], e.ETag, etags2[0])
	}
}
