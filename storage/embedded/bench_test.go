package embedded_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

const benchText = `{"id":"0190a0b1-7c3e-7cde-8f00-123456789abc","type":"orders.place"}`

func reportRate(b *testing.B, n int) {
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "ops/s")
}

func reportBatch(b *testing.B, s *embedded.Store) {
	st := s.Stats()
	if st.Commits > 0 {
		b.ReportMetric(float64(st.Writes)/float64(st.Commits), "writes/commit")
	}
}

// BenchmarkEnqueueParallel16: 16 producers enqueue concurrently; their writes
// share commits.
func BenchmarkEnqueueParallel16(b *testing.B) {
	s := openStore(b, nil)
	q := mustQ(b, s, "benchpar")
	ctx := context.Background()
	b.ResetTimer()
	parallel16(b, b.N, func(int64) error {
		_, err := q.Enqueue(ctx, benchText, 0, 0)
		return err
	})
	reportRate(b, b.N)
	reportBatch(b, s)
}

// BenchmarkEnqueueSerial: one producer, one commit (two fsyncs) per enqueue.
func BenchmarkEnqueueSerial(b *testing.B) {
	s := openStore(b, nil)
	q := mustQ(b, s, "benchser")
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := q.Enqueue(ctx, benchText, 0, 0); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N)
}

// BenchmarkDequeue32Delete: 4 consumers each dequeue 32 messages and delete
// them concurrently (as a processor's handlers do); one op is one message
// dequeued and deleted.
func BenchmarkDequeue32Delete(b *testing.B) {
	s := openStore(b, nil)
	q := mustQ(b, s, "benchdeq")
	ctx := context.Background()
	fill(b, q, b.N)
	b.ResetTimer()
	var done atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < int64(b.N) {
				msgs, err := q.Dequeue(ctx, 32, time.Minute)
				if err != nil {
					b.Error(err)
					return
				}
				if len(msgs) == 0 {
					return
				}
				var dw sync.WaitGroup
				for _, m := range msgs {
					dw.Add(1)
					go func() {
						defer dw.Done()
						if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil {
							b.Error(err)
						}
					}()
				}
				dw.Wait()
				done.Add(int64(len(msgs)))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if n := done.Load(); n != int64(b.N) {
		b.Fatalf("processed %d messages; want %d", n, b.N)
	}
	reportRate(b, b.N)
}

// fill enqueues n messages from 16 producers.
func fill(b *testing.B, q storage.Queue, n int) {
	b.Helper()
	ctx := context.Background()
	parallel16(b, n, func(int64) error {
		_, err := q.Enqueue(ctx, benchText, 0, 0)
		return err
	})
}

// parallel16 calls op(i) for i in 1..n from 16 goroutines; a goroutine stops
// at its first error, which fails b.
func parallel16(b *testing.B, n int, op func(i int64) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkTableInsert: 16 writers insert entities (one per command
// partition, a few properties); one op is one insert.
func BenchmarkTableInsert(b *testing.B) {
	s := openStore(b, nil)
	tb, err := s.Table(context.Background(), "benchins")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	parallel16(b, b.N, func(i int64) error {
		e := storage.Entity{PartitionKey: strconv.FormatInt(i, 10), RowKey: "cmd", Properties: map[string]any{
			"Type": "orders.place", "Params": `{"sku":"abc","qty":3}`, "IssuedAt": time.Now().UTC(), "Attempts": int32(0),
		}}
		_, err := tb.Insert(ctx, e)
		return err
	})
	reportRate(b, b.N)
}

// BenchmarkBatch100: one writer, batches of 100 inserts in one partition;
// one op is one batch.
func BenchmarkBatch100(b *testing.B) {
	s := openStore(b, nil)
	tb, err := s.Table(context.Background(), "benchbatch")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		pk := fmt.Sprint(i)
		ops := make([]storage.BatchOp, 100)
		for j := range ops {
			ops[j] = storage.BatchOp{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: pk, RowKey: fmt.Sprintf("%03d", j), Properties: map[string]any{"N": int64(j), "S": "event detail"}}}
		}
		if _, err := tb.Batch(ctx, pk, ops); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N)
}

// BenchmarkOpenVerify measures Open of a closed store holding about
// $CMDQ_OPEN_BENCH_MIB MiB (default 64) of entities, with the checksum
// verification of every data file (verify) and without (skip). The store
// is built once per run.
func BenchmarkOpenVerify(b *testing.B) {
	mib := 64
	if v, err := strconv.Atoi(os.Getenv("CMDQ_OPEN_BENCH_MIB")); err == nil && v > 0 {
		mib = v
	}
	dir := filepath.Join(b.TempDir(), "cmdq-data")
	s, err := embedded.Open(dir, &embedded.Options{PurgeInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	tb, err := s.Table(context.Background(), "benchopen")
	if err != nil {
		b.Fatal(err)
	}
	// Entities of 15 × 30,000 characters (60,000 bytes in UTF-16, as
	// Azure counts: under the 1 MiB entity limit).
	props := map[string]any{}
	for i := range 15 {
		props[fmt.Sprintf("P%02d", i)] = strings.Repeat(string(rune('a'+i)), 30000)
	}
	n := (mib << 20) / (15 * 30000)
	parallel16(b, n, func(i int64) error {
		_, err := tb.Insert(context.Background(), storage.Entity{PartitionKey: strconv.FormatInt(i, 10), RowKey: "r", Properties: props})
		return err
	})
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	var size int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			size += fi.Size()
		}
	}
	for _, mode := range []struct {
		name string
		skip bool
	}{{"verify", false}, {"skip", true}} {
		b.Run(mode.name, func(b *testing.B) {
			for range b.N {
				s, err := embedded.Open(dir, &embedded.Options{SkipVerify: mode.skip, PurgeInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(size)/(1<<20), "MiB")
		})
	}
}

// BenchmarkGetRandom measures Get of a random row among 200,000 command
// rows of about 300 bytes (a store of about 60 MB, more than any cache
// here), by the size of the block cache (Options.CacheSize): the case a
// smaller cache costs most (a burn-down reads rows in the order it wrote
// them). The store is built once per run and reopened for each size.
func BenchmarkGetRandom(b *testing.B) {
	const rows = 200_000
	dir := filepath.Join(b.TempDir(), "cmdq-data")
	s, err := embedded.Open(dir, &embedded.Options{PurgeInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	tb, err := s.Table(ctx, "benchget")
	if err != nil {
		b.Fatal(err)
	}
	// Rows i = 1..rows (parallel16's numbers) in partitions spread over
	// the key space, as command IDs are.
	pk := func(i int64) string { return fmt.Sprintf("%08x", i*2654435761%(1<<32)) }
	params := strings.Repeat("p", 200)
	parallel16(b, rows, func(i int64) error {
		_, err := tb.Insert(ctx, storage.Entity{PartitionKey: pk(i), RowKey: "a:cmd", Properties: map[string]any{
			"Type": "orders.place", "Params": params, "IssuedAt": time.Now().UTC(), "Attempts": int32(0),
		}})
		return err
	})
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	for _, mib := range []int64{2, 4, 8, 16} {
		b.Run(fmt.Sprintf("cache=%dMiB", mib), func(b *testing.B) {
			s, err := embedded.Open(dir, &embedded.Options{PurgeInterval: -1, CacheSize: mib << 20, SkipVerify: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			tb, err := s.Table(ctx, "benchget")
			if err != nil {
				b.Fatal(err)
			}
			st := s.Stats()
			r := rand.New(rand.NewPCG(1, 2))
			for b.Loop() {
				if _, err := tb.Get(ctx, pk(r.Int64N(rows)+1), "a:cmd"); err != nil {
					b.Fatal(err)
				}
			}
			now := s.Stats()
			b.ReportMetric(float64(now.CacheMisses-st.CacheMisses)/float64(b.N), "misses/op")
		})
	}
}
