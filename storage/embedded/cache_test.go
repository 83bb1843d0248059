package embedded_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// TestCacheSizeIsForBlocks: the engine charges its write buffers to its
// cache, and a CacheSize smaller than two of them (here 1 MiB against two
// of 4 MiB) must still cache data blocks: a row read twice from the
// store's files is served from the cache the second time. With the
// buffers charged to CacheSize itself, nothing would ever be cached.
func TestCacheSizeIsForBlocks(t *testing.T) {
	s := openStore(t, &embedded.Options{CacheSize: 1 << 20, MemTableSize: 4 << 20, PurgeInterval: -1})
	ctx := context.Background()
	tb, err := s.Table(ctx, "cache")
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 30_000)
	n := 0
	// fill writes rows of about 30 KB until about mib MiB more are written.
	fill := func(mib int) {
		for range mib * 35 {
			e := storage.Entity{PartitionKey: fmt.Sprintf("p%06d", n), RowKey: "r", Properties: map[string]any{"V": big}}
			if _, err := tb.Insert(ctx, e); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	fill(6) // more than one write buffer: the first rows are flushed to a file
	// A flush runs in the background: until it ends, the first row is
	// read from memory. Each round writes another buffer's worth, which
	// cannot be written while two full buffers wait for a flush.
	for round := 1; ; round++ {
		before := s.Stats()
		for range 2 {
			if _, err := tb.Get(ctx, "p000000", "r"); err != nil {
				t.Fatal(err)
			}
		}
		after := s.Stats()
		if after.CacheMisses > before.CacheMisses && after.CacheHits > before.CacheHits {
			return // read from the file once, then from the cache
		}
		if round == 5 {
			t.Fatalf("a row read twice from the store's files was never served by the block cache (hits %d → %d, misses %d → %d): CacheSize is taken by the write buffers",
				before.CacheHits, after.CacheHits, before.CacheMisses, after.CacheMisses)
		}
		fill(4)
	}
}

// TestStatsCountDiskBytes: Stats reports the bytes written to the log, by
// flushes and by compactions, each on its own: rows of about 450 KB are
// rewritten until a flush and a compaction have run (the engine stops
// writes while two buffers wait for a flush, or while too many files wait
// for a compaction, so each comes within a bounded amount of writing).
// The log holds every row; flushes write no more than the log holds
// (some of it is still in memory), so a count that folded the log's bytes
// into the flushed ones would show.
func TestStatsCountDiskBytes(t *testing.T) {
	s := openStore(t, &embedded.Options{MemTableSize: 4 << 20, PurgeInterval: -1})
	ctx := context.Background()
	tb, err := s.Table(ctx, "bytes")
	if err != nil {
		t.Fatal(err)
	}
	props := map[string]any{}
	for i := range 15 {
		props[fmt.Sprintf("V%d", i)] = strings.Repeat(string(rune('a'+i)), 30_000)
	}
	const row = 15 * 30_000
	written := 0
	for n := 0; ; n++ {
		// The same 20 rows over and over: every file overlaps the
		// others, so files are merged (rows of files that overlap none
		// would only be moved down, which writes nothing).
		e := storage.Entity{PartitionKey: fmt.Sprintf("p%02d", n%20), RowKey: "r", Properties: props}
		if _, err := tb.Upsert(ctx, e, storage.Replace); err != nil {
			t.Fatal(err)
		}
		written += row
		st := s.Stats()
		if st.LogBytes < uint64(written) {
			t.Fatalf("after %d bytes of rows the log counts %d bytes written", written, st.LogBytes)
		}
		if st.FlushedBytes >= st.LogBytes {
			t.Fatalf("flushed %d bytes of a log of %d: flushes wrote more than the log holds", st.FlushedBytes, st.LogBytes)
		}
		if st.FlushedBytes > 0 && st.CompactedBytes > 0 {
			return
		}
		if written > 200<<20 {
			t.Fatalf("after %d MiB of rows: flushed %d bytes, compacted %d: a flush or a compaction is not counted", written>>20, st.FlushedBytes, st.CompactedBytes)
		}
	}
}
