package storagetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// BenchParallelism is the number of goroutines EnqueueParallel16 uses (16).
const BenchParallelism = 16

// benchText is a queue message of the size cmdq sends: a small JSON envelope.
var benchText = `{"id":"0b9d5c1e-8a6f-4b0e-9a53-2f1f6c3a7d10","type":"orders.ship"}`

// Benchmark runs the shared storage benchmarks as sub-benchmarks:
//
//   - Enqueue: one goroutine enqueueing small messages (ns/op per message).
//   - EnqueueParallel16: BenchParallelism goroutines enqueueing; reports msgs/s.
//   - Dequeue32Delete: drains a pre-filled queue with Dequeue(32) and a
//     Delete per message; ns/op is per message; reports msgs/s.
//   - TableInsert: one entity of five properties per op.
//   - Batch100: one batch of 100 inserts per op; reports entities/s.
//
// open is called once per sub-benchmark run and may return a shared store;
// every sub-benchmark uses its own queue or table.
func Benchmark(b *testing.B, open func(b testing.TB) storage.Store) {
	b.Run("Enqueue", func(b *testing.B) {
		ctx := benchCtx(b)
		q := newQueue(b, open(b))
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := q.Enqueue(ctx, benchText, 0, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("EnqueueParallel%d", BenchParallelism), func(b *testing.B) {
		ctx := benchCtx(b)
		q := newQueue(b, open(b))
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		var failed firstErr
		for range BenchParallelism {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					if _, err := q.Enqueue(ctx, benchText, 0, 0); err != nil {
						failed.set(err)
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		if err := failed.get(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	})
	b.Run("Dequeue32Delete", func(b *testing.B) {
		ctx := benchCtx(b)
		q := newQueue(b, open(b))
		prefill(b, q, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		done := 0
		for done < b.N {
			ms, err := q.Dequeue(ctx, storage.MaxDequeue, leaseLong)
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
		b.ReportMetric(float64(done)/time.Since(start).Seconds(), "msgs/s")
	})
	b.Run("TableInsert", func(b *testing.B) {
		ctx := benchCtx(b)
		tb := newTable(b, open(b))
		props := map[string]any{"Type": "orders.ship", "Params": strings.Repeat("p", 200), "Attempt": int32(1), "Issued": time.Now().UTC(), "Seq": int64(1)}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			if _, err := tb.Insert(ctx, ent(fmt.Sprintf("p%d", i%64), fmt.Sprintf("r%09d", i), props)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Batch100", func(b *testing.B) {
		ctx := benchCtx(b)
		tb := newTable(b, open(b))
		props := map[string]any{"Type": "orders.ship", "Seq": int64(1)}
		ops := make([]storage.BatchOp, storage.MaxBatchOps)
		b.ReportAllocs()
		start := time.Now()
		i := 0
		for b.Loop() {
			i++
			pk := fmt.Sprintf("p%09d", i)
			for j := range ops {
				ops[j] = storage.BatchOp{Kind: storage.OpInsert, Entity: ent(pk, fmt.Sprintf("r%03d", j), props)}
			}
			if _, err := tb.Batch(ctx, pk, ops); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(i*storage.MaxBatchOps)/time.Since(start).Seconds(), "entities/s")
	})
}

// prefill enqueues n messages with BenchParallelism goroutines.
func prefill(b *testing.B, q storage.Queue, n int) {
	b.Helper()
	ctx := benchCtx(b)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed firstErr
	for range BenchParallelism {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := q.Enqueue(ctx, benchText, 0, 0); err != nil {
					failed.set(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.get(); err != nil {
		b.Fatalf("prefill: %v", err)
	}
}

// benchCtx returns a context for one benchmark run (10 minutes at most).
func benchCtx(b testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

// firstErr keeps the first error set on it; safe for concurrent use.
type firstErr struct {
	mu  sync.Mutex
	err error
}

func (f *firstErr) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstErr) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
