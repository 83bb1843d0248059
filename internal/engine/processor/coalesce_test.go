package processor_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage/embedded"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// TestTrickleDequeuesCoalesced issues commands at a steady trickle from
// several goroutines, each waking the processor (the Issuer's Wake =
// Notify), on the real embedded store counted by a wrapper. The poll
// schedule is an hour, so only wake-ups and full batches make the poller
// dequeue. Coalesced, a wake-up costs at most one dequeue however many
// arrive together, and a batch smaller than asked for (the queue was empty)
// is not followed by another dequeue unless a wake-up came meanwhile: at
// most one dequeue per command (plus the first poll and one per full
// batch). Without coalescing every non-empty dequeue was followed at once
// by another, mostly empty one, and wake-ups that came during a dequeue
// each left a token for a third: about two per command.
func TestTrickleDequeuesCoalesced(t *testing.T) {
	const (
		goroutines = 4
		perG       = 50
		n          = goroutines * perG
		spacing    = 2 * time.Millisecond // between commands, all goroutines together: 500/s
	)
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var calls [instrument.NumOps]atomic.Int64
	counted := instrument.Wrap(st, instrument.Hooks{
		Before: func(o instrument.Op) error { calls[o].Add(1); return nil },
	})
	prefix := newPrefix()
	reg := registry.NewRegistry()
	var handled atomic.Int64
	all := make(chan struct{})
	register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
		if handled.Add(1) == n {
			close(all)
		}
		return nil
	}, registry.Options{})
	polled := make(chan struct{}, 1)
	p, err := processor.New(counted, reg, processor.Config{
		Prefix: prefix, ReconcileInterval: model.NoReconcile,
		MinPollInterval: time.Hour, MaxPollInterval: time.Hour,
		Observer: onPoll(func(model.Observation) {
			select {
			case polled <- struct{}{}:
			default:
			}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	iss, err := issuer.NewIssuer(counted, issuer.IssuerOptions{Prefix: prefix, Wake: p.Notify})
	if err != nil {
		t.Fatal(err)
	}
	// Create the queue and tables (the first Issue would) before counting.
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-polled: // the first poll found the queue empty; the next wait is an hour
	case <-time.After(30 * time.Second):
		t.Fatal("no first poll within 30s")
	}
	dequeues0 := calls[instrument.QueueDequeue].Load()

	began := time.Now()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				// A paced issuer: command k goes at began + k × spacing
				// (late ones go at once).
				k := i*goroutines + g
				if w := time.Until(began.Add(time.Duration(k) * spacing)); w > 0 {
					time.Sleep(w)
				}
				if _, err := iss.Issue(context.Background(), okCmd{N: k}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		t.Fatalf("%d of %d commands handled within 60s", handled.Load(), n)
	}
	dequeues := calls[instrument.QueueDequeue].Load() - dequeues0
	perCmd := float64(dequeues) / n
	t.Logf("%d commands at %d/s from %d goroutines: %d dequeues, %.3f per command", n, int(time.Second/spacing), goroutines, dequeues, perCmd)
	// Coalesced: at most one per wake-up plus one per full batch of 32.
	if bound := 1 + 1.0/32; perCmd > bound {
		t.Errorf("%.3f dequeues per command (%d for %d commands), want at most %.3f: wake-ups are not coalesced", perCmd, dequeues, n, bound)
	}
}
