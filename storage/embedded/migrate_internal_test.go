package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/storage"
)

// dumpTables reads every entity of every table of s, by table.
func dumpTables(t *testing.T, s *Store) map[string][]storage.Entity {
	t.Helper()
	ctx := context.Background()
	names, err := s.Tables(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]storage.Entity{}
	for _, n := range names {
		tb, err := s.Table(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		for cont := "first"; cont != ""; {
			if cont == "first" {
				cont = ""
			}
			p, err := tb.Query(ctx, storage.Query{Continuation: cont})
			if err != nil {
				t.Fatal(err)
			}
			out[n] = append(out[n], p.Entities...)
			cont = p.Continuation
		}
	}
	return out
}

// toFormat1 rewrites every entity record of the store in dir in format 1
// (the old encoder, kept for this), drops the name dictionary and marks the
// directory format 1: a store as an earlier version left it. keep, when
// set, leaves the records it selects in format 2 (a migration that a crash
// interrupted).
func toFormat1(t *testing.T, dir string, keep func(i int) bool) {
	t.Helper()
	s, err := Open(dir, &Options{PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	b := s.db.NewBatch()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("t"), UpperBound: []byte("u")})
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		i++
		if keep != nil && keep(i) {
			continue
		}
		ts, props, err := s.names.decode(it.Value())
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Set(append([]byte(nil), it.Key()...), encodeEntityV1(ts, props), nil)
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if keep == nil {
		_ = b.DeleteRange([]byte("N"), []byte("O"), nil)
	}
	closeAs(t, s, b, markerTextV1)
}

// closeAs applies b (synced), closes s and writes marker as its CMDQ: the
// store then reads as one an earlier version wrote.
func closeAs(t *testing.T, s *Store, b *pebble.Batch, marker string) {
	t.Helper()
	if err := s.db.Apply(b, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, markerFile), []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestOpenMigratesFormat1 opens a store written in format 1 (every record
// with its property names): Open rewrites it in format 2 and every entity
// reads back exactly as before, ETags included, and a write conditional on
// an ETag read before the migration still matches. A migration cut short
// (some records already rewritten) is finished by the next Open.
func TestOpenMigratesFormat1(t *testing.T) {
	t.Parallel()
	for _, interrupted := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "data")
		s, err := Open(dir, &Options{PurgeInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		at := time.Date(2026, 11, 25, 10, 0, 0, 123_000_000, time.UTC)
		for _, name := range []string{"cmdqcommands", "Other"} {
			tb, err := s.Table(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 30 {
				pk := "p" + strings.Repeat("x", i%3) + string(rune('a'+i))
				props := map[string]any{"Type": "t", "N": int32(i), "Big": int64(i) << 40, "F": float64(i) / 3,
					"At": at, "B": []byte{byte(i)}, "OK": i%2 == 0, "Text": strings.Repeat("é", i)}
				if i%5 == 0 {
					props["Rare"+string(rune('A'+i))] = "only here"
				}
				if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: pk, RowKey: "a:cmd", Properties: props}); err != nil {
					t.Fatal(err)
				}
			}
		}
		// A queue message is not an entity: it stays as it is.
		q, err := s.Queue(ctx, "cmdq-commands")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Enqueue(ctx, `{"id":"x"}`, 0, storage.NoExpiry); err != nil {
			t.Fatal(err)
		}
		want := dumpTables(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		var keep func(int) bool
		if interrupted {
			keep = func(i int) bool { return i%3 == 0 }
		}
		toFormat1(t, dir, keep)

		s, err = Open(dir, &Options{PurgeInterval: -1})
		if err != nil {
			t.Fatalf("open format 1 (interrupted %v): %v", interrupted, err)
		}
		if got := dumpTables(t, s); !reflect.DeepEqual(got, want) {
			t.Fatalf("after migration (interrupted %v) the entities differ:\n got %v\nwant %v", interrupted, got, want)
		}
		marker, err := os.ReadFile(filepath.Join(dir, markerFile))
		if err != nil || string(marker) != markerText {
			t.Fatalf("marker after migration: %q, %v", marker, err)
		}
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("t"), UpperBound: []byte("u")})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			n++
			if !isV2(it.Value()) {
				t.Fatalf("record %q is still in format 1", it.Key())
			}
		}
		_ = it.Close()
		if n != 60 {
			t.Fatalf("%d records after migration, want 60", n)
		}
		e := want["cmdqcommands"][0]
		tb, _ := s.Table(ctx, "cmdqcommands")
		if _, err := tb.Update(ctx, storage.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey, Properties: map[string]any{"N": int32(-1)}}, storage.Merge, e.ETag); err != nil {
			t.Fatalf("update with the ETag read before the migration: %v", err)
		}
		got, err := tb.Get(ctx, e.PartitionKey, e.RowKey)
		if err != nil || got.Properties["N"] != int32(-1) || got.Properties["Text"] != e.Properties["Text"] {
			t.Fatalf("merged entity: %v %v", got.Properties, err)
		}
		if c, err := q.ApproximateCount(ctx); err == nil {
			t.Fatalf("a handle of the closed store answered (%d)", c)
		}
		q2, _ := s.Queue(ctx, "cmdq-commands")
		if m, err := q2.Peek(ctx, 1); err != nil || len(m) != 1 || m[0].Text != `{"id":"x"}` {
			t.Fatalf("message after migration: %v %v", m, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpenFormat2: a store of format 2 (the format before the binary
// traceparent value) opens as it is, its records unchanged; Open rewrites
// its marker to format 3 before anything is written, and a traceparent
// written after that is stored in binary and reads back.
func TestOpenFormat2(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(dir, &Options{PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tb, err := s.Table(ctx, "cmdqcommands")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "a:cmd", Properties: map[string]any{"Type": "t", "N": int32(1)}}); err != nil {
		t.Fatal(err)
	}
	want := dumpTables(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, markerFile), []byte(markerTextV2), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, &Options{PurgeInterval: -1})
	if err != nil {
		t.Fatalf("open a format-2 store: %v", err)
	}
	defer s.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, markerFile)); string(b) != markerText {
		t.Fatalf("marker after Open: %q, want %q", b, markerText)
	}
	if got := dumpTables(t, s); !reflect.DeepEqual(got, want) {
		t.Fatalf("a format-2 store's entities changed at Open:\n got %v\nwant %v", got, want)
	}
	tb, err = s.Table(ctx, "cmdqcommands")
	if err != nil {
		t.Fatal(err)
	}
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if _, err := tb.Update(ctx, storage.Entity{PartitionKey: "p", RowKey: "a:cmd", Properties: map[string]any{"TraceParent": tp}}, storage.Merge, storage.IfMatchAny); err != nil {
		t.Fatal(err)
	}
	e, err := tb.Get(ctx, "p", "a:cmd")
	if err != nil || e.Properties["TraceParent"] != tp || e.Properties["Type"] != "t" {
		t.Fatalf("after a merge of a traceparent: %v, %v", e.Properties, err)
	}
}

// TestOpenRefusesNewerFormat: a store whose marker names a later format is
// refused with ErrFormat and a message naming the format, and is left
// untouched.
func TestOpenRefusesNewerFormat(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(dir, &Options{PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	newer := fmt.Sprintf("cmdq embedded store\nformat %d (pebble v2)\n", formatVersion+1)
	if err := os.WriteFile(filepath.Join(dir, markerFile), []byte(newer), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, nil)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), fmt.Sprintf("format %d", formatVersion+1)) || !strings.Contains(err.Error(), "newer cmdq version") {
		t.Fatalf("open of a format-%d store: %v", formatVersion+1, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, markerFile)); string(b) != newer {
		t.Fatalf("marker changed to %q", b)
	}
}

// TestNameDictionaryGap: a name given an id that no durable record used
// (its writer failed or the process died before the sync) leaves a gap
// that Open accepts; the names written with records are read back, and a
// name's entry is written in the same commit as the first record that
// uses it (no extra sync).
func TestNameDictionaryGap(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(dir, &Options{PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tb, err := s.Table(ctx, "gaps")
	if err != nil {
		t.Fatal(err)
	}
	if id, fresh := s.names.id("Ghost"); id == 0 || !fresh {
		t.Fatalf("new name: id %d fresh %v", id, fresh)
	}
	before := s.Stats().Commits
	if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"Real": "v"}}); err != nil {
		t.Fatal(err)
	}
	if c := s.Stats().Commits - before; c != 1 {
		t.Fatalf("an insert with a new name took %d log syncs, want 1", c)
	}
	if _, fresh := s.names.id("Real"); fresh {
		t.Fatal("Real is still fresh after its record was synced")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, &Options{PurgeInterval: -1})
	if err != nil {
		t.Fatalf("open with a gap in the dictionary: %v", err)
	}
	defer s.Close()
	tb, _ = s.Table(ctx, "gaps")
	e, err := tb.Get(ctx, "p", "r")
	if err != nil || e.Properties["Real"] != "v" {
		t.Fatalf("get after reopen: %v %v", e.Properties, err)
	}
	if _, ok := s.names.snap.Load().ids["Ghost"]; ok {
		t.Fatal("a name no durable record used is in the dictionary after reopen")
	}
	if id, _ := s.names.id("Next"); id != 3 {
		t.Fatalf("next name got id %d, want 3 (after the gap)", id)
	}
}

// TestOpenFormat3Queue: the messages of a format-3 store (lease state in
// the message record's header, index entries without a value) are read as
// they are after Open: peeked and dequeued with their dequeue counts, then
// updated and deleted with the receipts the dequeue gave; an old index
// entry that the record disowns is dropped, not delivered; an expired
// message is purged; once every message has moved, each index entry holds
// its message's lease state (format 4).
func TestOpenFormat3Queue(t *testing.T) {
	t.Parallel()
	clock := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	now := func() time.Time { return clock }
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(dir, &Options{Now: now, PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	qi, err := s.Queue(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	q := qi.(*queue)
	// Three messages as format 3 wrote them: visible now, dequeued 0, 2
	// and 3 times; the third expired a second ago. The second also has an
	// old index entry (visible a minute ago) that its record disowns.
	type old struct {
		id       uuid.UUID
		text     string
		dequeues int64
		expires  int64
	}
	t0 := clock.UnixNano()
	olds := []old{
		{uuid.Must(uuid.NewV7()), "first", 0, t0 + int64(time.Hour)},
		{uuid.Must(uuid.NewV7()), "second", 2, 0},
		{uuid.Must(uuid.NewV7()), "expired", 3, t0 - int64(time.Second)},
	}
	b := s.db.NewBatch()
	for i, m := range olds {
		rec := make([]byte, headerLen+len(m.text))
		putI64(rec[offInserted:], t0-int64(time.Hour))
		putI64(rec[offExpires:], m.expires)
		putI64(rec[offVisible:], t0-int64(len(olds)-i))
		putI64(rec[offDequeues:], m.dequeues)
		putI64(rec[offReceipt:], 77+int64(i))
		copy(rec[headerLen:], m.text)
		_ = b.Set(q.msgKey(m.id[:]), rec, nil)
		_ = b.Set(q.indexKey(t0-int64(len(olds)-i), m.id[:]), nil, nil)
	}
	_ = b.Set(q.indexKey(t0-int64(time.Minute), olds[1].id[:]), nil, nil)
	q.writeCount(b, int64(len(olds)))
	closeAs(t, s, b, markerTextV3)
	s, err = Open(dir, &Options{Now: now, PurgeInterval: -1})
	if err != nil {
		t.Fatalf("open a format-3 store: %v", err)
	}
	defer s.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, markerFile)); string(b) != markerText {
		t.Fatalf("marker after Open: %q, want %q", b, markerText)
	}
	if qi, err = s.Queue(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	peeked, err := qi.Peek(ctx, 32)
	if err != nil {
		t.Fatal(err)
	}
	if len(peeked) != 2 || peeked[0].Text != "first" || peeked[0].DequeueCount != 0 || peeked[1].Text != "second" || peeked[1].DequeueCount != 2 {
		t.Fatalf("peek of the format-3 messages: %+v", peeked)
	}
	got, err := qi.Dequeue(ctx, 32, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != olds[0].id.String() || got[0].DequeueCount != 1 || got[1].ID != olds[1].id.String() || got[1].DequeueCount != 3 || got[1].Text != "second" {
		t.Fatalf("dequeue of the format-3 messages: %+v", got)
	}
	if !got[0].ExpiresAt.Equal(fromNanos(olds[0].expires)) || !got[0].InsertedAt.Equal(clock.Add(-time.Hour)) {
		t.Fatalf("first message's times: inserted %v, expires %v", got[0].InsertedAt, got[0].ExpiresAt)
	}
	if n, err := qi.ApproximateCount(ctx); err != nil || n != 2 {
		t.Fatalf("count after the expired message was dropped: %d, %v", n, err)
	}
	// A receipt of format 3's form (hex) names no index entry: lease lost.
	if err := qi.Delete(ctx, got[0].ID, "4d"); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("delete with a format-3 receipt: %v, want ErrLeaseLost", err)
	}
	r, _, err := qi.UpdateVisibility(ctx, got[0].ID, got[0].PopReceipt, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := qi.Delete(ctx, got[0].ID, got[0].PopReceipt); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("delete with the receipt an update replaced: %v, want ErrLeaseLost", err)
	}
	again, err := qi.Dequeue(ctx, 32, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].ID != got[0].ID || again[0].DequeueCount != 2 {
		t.Fatalf("dequeue after making the first visible again: %+v (receipt %s)", again, r)
	}
	checkIndex(t, s, "old")
	if err := qi.Delete(ctx, again[0].ID, again[0].PopReceipt); err != nil {
		t.Fatal(err)
	}
	if err := qi.Delete(ctx, got[1].ID, got[1].PopReceipt); err != nil {
		t.Fatal(err)
	}
	if err := qi.Delete(ctx, got[1].ID, got[1].PopReceipt); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if checkIndex(t, s, "old") != 0 {
		t.Fatal("messages left")
	}
}
