package processor_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/embedded"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// benchProcess issues b.N commands, then processes them with one processor
// and reports throughput and storage operations per command (issue and
// process separately).
func benchProcess(b *testing.B, st storage.Store) {
	// Every queue and table operation (the transactions Azure bills),
	// counted as it is made. The struct hides storage.Combiner: the
	// benchmark measures the two-call path.
	var ops atomic.Int64
	cs := struct{ storage.Store }{instrument.Wrap(st, instrument.Hooks{
		Before: func(instrument.Op) error { ops.Add(1); return nil },
	})}
	prefix := newPrefix()
	reg := registry.NewRegistry()
	var done atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	n := int64(b.N)
	if err := registry.Register(reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
		if done.Add(1) == n {
			once.Do(func() { close(all) })
		}
		return nil
	}, registry.Options{}); err != nil {
		b.Fatal(err)
	}
	p, err := processor.New(cs, reg, processor.Config{Prefix: prefix, ReconcileInterval: model.NoReconcile, MinPollInterval: 10 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	iss, err := issuer.NewIssuer(cs, issuer.IssuerOptions{Prefix: prefix})
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
	issueOps := ops.Swap(0)
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
	procOps := ops.Load()
	cancel()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cmds/s")
	b.ReportMetric(float64(issueOps)/float64(b.N), "issue-ops/cmd")
	b.ReportMetric(float64(procOps)/float64(b.N), "process-ops/cmd")
}

func BenchmarkProcessEmbedded(b *testing.B) {
	st, err := embedded.Open(filepath.Join(b.TempDir(), "cmdq-data"), nil)
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
