package azure_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// Benchmarks against Azurite (or AZURE_STORAGE_CONNECTION_STRING). Run with
// go test -run '^$' -bench . ./storage/azure/

func BenchmarkEnqueue(b *testing.B) {
	q := newQueue(b)
	ctx := ctxT(b)
	text := `{"id":"0f8fad5b-d9cb-469f-a165-70867728950e","type":"bench.command"}`
	b.ResetTimer()
	for b.Loop() {
		if _, err := q.Enqueue(ctx, text, 0, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDequeue32Delete measures one Dequeue of 32 messages plus their 32
// Deletes; the per-op figure is per message.
func BenchmarkDequeue32Delete(b *testing.B) {
	q := newQueue(b)
	ctx := ctxT(b)
	text := `{"id":"0f8fad5b-d9cb-469f-a165-70867728950e","type":"bench.command"}`
	for i := 0; i < b.N; i++ {
		if _, err := q.Enqueue(ctx, text, 0, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	done := 0
	for done < b.N {
		ms, err := q.Dequeue(ctx, storage.MaxDequeue, 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if len(ms) == 0 {
			b.Fatalf("queue empty after %d of %d messages", done, b.N)
		}
		for _, m := range ms {
			if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil {
				b.Fatal(err)
			}
		}
		done += len(ms)
	}
}

func BenchmarkTableInsert(b *testing.B) {
	tb := newTable(b)
	ctx := ctxT(b)
	props := map[string]any{"Type": "bench.command", "Params": `{"a":1,"b":"two"}`, "At": time.Now().UTC(), "N": int64(1)}
	i := 0
	for b.Loop() {
		i++
		if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: strconv.Itoa(i), Properties: props}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBatch100 inserts 100 entities in one transaction per op.
func BenchmarkBatch100(b *testing.B) {
	tb := newTable(b)
	ctx := ctxT(b)
	props := map[string]any{"Type": "bench.command", "Params": `{"a":1,"b":"two"}`, "N": int64(1)}
	i := 0
	for b.Loop() {
		i++
		pk := "p" + strconv.Itoa(i)
		ops := make([]storage.BatchOp, storage.MaxBatchOps)
		for j := range ops {
			ops[j] = storage.BatchOp{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: pk, RowKey: strconv.Itoa(j), Properties: props}}
		}
		if _, err := tb.Batch(ctx, pk, ops); err != nil {
			b.Fatal(err)
		}
	}
}
