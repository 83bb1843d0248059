package embedded

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cmdq-dev/cmdq/storage"
)

// TestMergeOperandsFold: a merge into an existing entity is written as an
// engine merge operand holding only the merged properties, and the entity
// reads back exactly as a rewrite of the whole record would give it —
// with the operands in the memtable, in data files above the record, in
// the log of a reopened store, and after a compaction has folded them —
// through Get, Query and the ETag a conditional write checks. A replace
// or a delete leaves nothing of earlier operands behind.
func TestMergeOperandsFold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(dir, &Options{PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	tb, err := s.Table(ctx, "fold")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"Type": "t", "Params": string(bytes.Repeat([]byte("p"), 2000)), "Status": "pending", "EventSeq": int64(1)}
	etag, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "a:cmd", Properties: maps.Clone(want)})
	if err != nil {
		t.Fatal(err)
	}
	// Another entity of the partition, never merged, on either side.
	if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "e:1", Properties: map[string]any{"Kind": "created"}}); err != nil {
		t.Fatal(err)
	}
	check := func(stage string) {
		t.Helper()
		e, err := tb.Get(ctx, "p", "a:cmd")
		if err != nil {
			t.Fatalf("%s: get: %v", stage, err)
		}
		if !maps.Equal(e.Properties, want) || e.ETag != etag {
			t.Fatalf("%s: get gives %v (ETag %s), want %v (ETag %s)", stage, e.Properties, e.ETag, want, etag)
		}
		page, err := tb.Query(ctx, storage.Query{PartitionKey: "p"})
		if err != nil {
			t.Fatalf("%s: query: %v", stage, err)
		}
		if len(page.Entities) != 2 || !maps.Equal(page.Entities[0].Properties, want) || page.Entities[0].ETag != etag || page.Entities[1].Properties["Kind"] != "created" {
			t.Fatalf("%s: query gives %v, want %v (ETag %s) and the created row", stage, page.Entities, want, etag)
		}
	}
	merge := func(props map[string]any) {
		t.Helper()
		// Conditional on the ETag of the entity as folded so far.
		etag, err = tb.Update(ctx, storage.Entity{PartitionKey: "p", RowKey: "a:cmd", Properties: props}, storage.Merge, etag)
		if err != nil {
			t.Fatalf("merge %v: %v", props, err)
		}
		maps.Copy(want, props)
	}
	flush := func() {
		t.Helper()
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// The record in a data file, an operand above it in the memtable.
	flush()
	before := s.Stats().LogBytes
	merge(map[string]any{"Status": "running", "EventSeq": int64(2), "Worker": "w1"})
	check("operand in the memtable")
	// Only the merged properties were written: the log grew by far less
	// than the record's 2,000 bytes of parameters.
	if grew := s.Stats().LogBytes - before; grew == 0 || grew > 500 {
		t.Fatalf("a merge of three properties wrote %d bytes to the log, want 1 to 500 (not the whole record)", grew)
	}
	flush()
	check("operand in a data file")
	merge(map[string]any{"Status": "completed", "EventSeq": int64(3), "Output": "{}"})
	merge(map[string]any{"Worker": "w2"})
	check("operands in a data file and the memtable")

	// The log of a reopened store replays the memtable's operands.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, &Options{PurgeInterval: -1}); err != nil {
		t.Fatal(err)
	}
	if tb, err = s.Table(ctx, "fold"); err != nil {
		t.Fatal(err)
	}
	check("reopened")

	// A compaction of everything folds the operands into the record.
	flush()
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	check("compacted")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("t"), UpperBound: []byte("u")})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d entity keys after the compaction, want 2", n)
	}

	// An ETag from before the last merge no longer matches.
	if _, err := tb.Update(ctx, storage.Entity{PartitionKey: "p", RowKey: "a:cmd", Properties: map[string]any{"Worker": "w3"}}, storage.Merge, etagOf(1)); err == nil {
		t.Fatal("a merge conditional on an old ETag succeeded")
	}

	// A replace over operands keeps none of their properties.
	merge(map[string]any{"Step": int32(4)})
	want = map[string]any{"Type": "t2"}
	if etag, err = tb.Update(ctx, storage.Entity{PartitionKey: "p", RowKey: "a:cmd", Properties: maps.Clone(want)}, storage.Replace, etag); err != nil {
		t.Fatal(err)
	}
	check("replaced")
	merge(map[string]any{"Status": "x"})
	flush()
	// A delete over operands, then an insert: nothing of them is left.
	if err := tb.Delete(ctx, "p", "a:cmd", etag); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Get(ctx, "p", "a:cmd"); err == nil {
		t.Fatal("a deleted entity reads back")
	}
	want = map[string]any{"Kind": "again"}
	if etag, err = tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "a:cmd", Properties: maps.Clone(want)}); err != nil {
		t.Fatal(err)
	}
	check("deleted and inserted again")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, markerFile)); string(b) != markerText {
		t.Fatalf("marker %q, want %q", b, markerText)
	}
}

// TestOpenFormat4: a store of format 4 (before merge operands), its rows
// in data files and its engine options naming the engine's default merge
// operator, as every earlier version created them, opens: Open rewrites
// its marker to format 5 before anything is written, and a merge into one
// of its records folds over it.
func TestOpenFormat4(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	// The engine as format 4 opened it: its default merge operator.
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(dir); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, &Options{PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := s.Table(ctx, "fmtfour")
	if err != nil {
		t.Fatal(err)
	}
	etag, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"A": "a", "B": int64(1)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	closeAs(t, s, s.db.NewBatch(), markerTextV4)
	if s, err = Open(dir, &Options{PurgeInterval: -1}); err != nil {
		t.Fatalf("open a format-4 store: %v", err)
	}
	defer func() { _ = s.Close() }()
	if b, _ := os.ReadFile(filepath.Join(dir, markerFile)); string(b) != markerText {
		t.Fatalf("marker after Open: %q, want %q", b, markerText)
	}
	if tb, err = s.Table(ctx, "fmtfour"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Update(ctx, storage.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"B": int64(2)}}, storage.Merge, etag); err != nil {
		t.Fatal(err)
	}
	e, err := tb.Get(ctx, "p", "r")
	if err != nil || !maps.Equal(e.Properties, map[string]any{"A": "a", "B": int64(2)}) {
		t.Fatalf("after a merge: %v, %v", e.Properties, err)
	}
}
