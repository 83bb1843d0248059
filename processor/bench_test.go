package processor_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/commands"
	"github.com/cmdq-dev/cmdq/handlers"
	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/processor"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// countingStore counts every queue and table operation (the transactions
// Azure bills).
type countingStore struct {
	storage.Store
	ops atomic.Int64
}

func (c *countingStore) Queue(ctx context.Context, name string) (storage.Queue, error) {
	q, err := c.Store.Queue(ctx, name)
	if err != nil {
		return nil, err
	}
	return &countingQueue{Queue: q, n: &c.ops}, nil
}

func (c *countingStore) Table(ctx context.Context, name string) (storage.Table, error) {
	t, err := c.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return &countingTable{Table: t, n: &c.ops}, nil
}

type countingQueue struct {
	storage.Queue
	n *atomic.Int64
}

func (q *countingQueue) Enqueue(ctx context.Context, text string, d, ttl time.Duration) (storage.Message, error) {
	q.n.Add(1)
	return q.Queue.Enqueue(ctx, text, d, ttl)
}
func (q *countingQueue) Dequeue(ctx context.Context, max int, v time.Duration) ([]storage.Message, error) {
	q.n.Add(1)
	return q.Queue.Dequeue(ctx, max, v)
}
func (q *countingQueue) UpdateVisibility(ctx context.Context, id, r string, v time.Duration) (string, time.Time, error) {
	q.n.Add(1)
	return q.Queue.UpdateVisibility(ctx, id, r, v)
}
func (q *countingQueue) Delete(ctx context.Context, id, r string) error {
	q.n.Add(1)
	return q.Queue.Delete(ctx, id, r)
}

type countingTable struct {
	storage.Table
	n *atomic.Int64
}

func (t *countingTable) Insert(ctx context.Context, e storage.Entity) (string, error) {
	t.n.Add(1)
	return t.Table.Insert(ctx, e)
}
func (t *countingTable) Get(ctx context.Context, pk, rk string) (storage.Entity, error) {
	t.n.Add(1)
	return t.Table.Get(ctx, pk, rk)
}
func (t *countingTable) Update(ctx context.Context, e storage.Entity, m storage.UpdateMode, ifMatch string) (string, error) {
	t.n.Add(1)
	return t.Table.Update(ctx, e, m, ifMatch)
}
func (t *countingTable) Upsert(ctx context.Context, e storage.Entity, m storage.UpdateMode) (string, error) {
	t.n.Add(1)
	return t.Table.Upsert(ctx, e, m)
}
func (t *countingTable) Delete(ctx context.Context, pk, rk, ifMatch string) error {
	t.n.Add(1)
	return t.Table.Delete(ctx, pk, rk, ifMatch)
}
func (t *countingTable) Query(ctx context.Context, q storage.Query) (storage.Page, error) {
	t.n.Add(1)
	return t.Table.Query(ctx, q)
}
func (t *countingTable) Batch(ctx context.Context, pk string, ops []storage.BatchOp) ([]string, error) {
	t.n.Add(1)
	return t.Table.Batch(ctx, pk, ops)
}

// benchProcess issues b.N commands, then processes them with one processor
// and reports throughput and storage operations per command (issue and
// process separately).
func benchProcess(b *testing.B, st storage.Store) {
	cs := &countingStore{Store: st}
	prefix := newPrefix()
	reg := handlers.NewRegistry()
	var done atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	n := int64(b.N)
	if err := handlers.Register(reg, func(ctx context.Context, c okCmd, run *handlers.Run) error {
		if done.Add(1) == n {
			once.Do(func() { close(all) })
		}
		return nil
	}, handlers.Options{}); err != nil {
		b.Fatal(err)
	}
	p, err := processor.New(cs, reg, processor.Config{Prefix: prefix, ReconcileInterval: processor.NoReconcile, MinPollInterval: 10 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	iss, err := commands.NewIssuer(cs, commands.Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < b.N; i += 16 {
				if _, err := iss.Issue(context.Background(), okCmd{N: i}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	issueOps := cs.ops.Swap(0)
	b.ResetTimer()
	began := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatal("commands not processed within 5 minutes")
	}
	elapsed := time.Since(began)
	b.StopTimer()
	// Let the last deletes land before counting.
	deadline := time.Now().Add(10 * time.Second)
	for p.Health().InFlight > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	procOps := cs.ops.Load()
	cancel()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cmds/s")
	b.ReportMetric(float64(issueOps)/float64(b.N), "issue-ops/cmd")
	b.ReportMetric(float64(procOps)/float64(b.N), "process-ops/cmd")
}

func BenchmarkProcessEmbedded(b *testing.B) {
	st, err := embedded.Open(filepath.Join(b.TempDir(), "cmdq.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	benchProcess(b, st)
}

func BenchmarkProcessAzurite(b *testing.B) {
	st, err := azure.Open(context.Background(), azure.Config{ConnectionString: azurite.ConnectionString(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	benchProcess(b, st)
}
