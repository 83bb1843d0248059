package processor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

// Commands of the three weighted queues.

type critJob struct{ N int }

func (critJob) CommandType() string { return "test.critical" }

type defJob struct{ N int }

func (defJob) CommandType() string { return "test.default" }

type lowJob struct{ N int }

func (lowJob) CommandType() string { return "test.low" }

// weightedStarts runs a processor of concurrency handler slots on queues
// critical, default and low with weights (nil: none), each queue filled
// first with fill[queue] commands whose handlers block until the test
// releases them one at a time, once every slot is taken: every start is
// a handler slot's grant among messages of every queue. It returns the
// queues of the first n starts, in order, as the handlers recorded them.
func weightedStarts(t *testing.T, e *env, weights map[string]int, concurrency, n int, fill map[string]int) []string {
	t.Helper()
	reg := registry.NewRegistry()
	started := make(chan string, n+concurrency+64)
	release := make(chan struct{})
	stopped := make(chan struct{})
	block := func(ctx context.Context, queue string) error {
		started <- queue
		select {
		case <-release:
			return nil
		case <-stopped:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	register(t, reg, func(ctx context.Context, _ critJob, _ *registry.Attempt) error { return block(ctx, "critical") }, registry.Options{Queue: "critical"})
	register(t, reg, func(ctx context.Context, _ defJob, _ *registry.Attempt) error { return block(ctx, "default") }, registry.Options{Queue: "default"})
	register(t, reg, func(ctx context.Context, _ lowJob, _ *registry.Attempt) error { return block(ctx, "low") }, registry.Options{Queue: "low"})

	// Fill the queues before the processor starts, 8 issues at a time.
	iss, err := issuer.NewIssuer(e.store, issuer.IssuerOptions{Prefix: e.prefix, Routes: reg})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	jobs := make(chan issuer.Command)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range jobs {
				if _, err := iss.Issue(context.Background(), c); err != nil {
					t.Errorf("issue %s: %v", c.CommandType(), err)
				}
			}
		}()
	}
	for i := range max(fill["critical"], fill["default"], fill["low"]) {
		if i < fill["critical"] {
			jobs <- critJob{N: i}
		}
		if i < fill["default"] {
			jobs <- defJob{N: i}
		}
		if i < fill["low"] {
			jobs <- lowJob{N: i}
		}
	}
	close(jobs)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	cfg := e.cfg()
	cfg.Concurrency = concurrency
	cfg.QueueWeights = weights
	var pollMu sync.Mutex
	polls, got := map[string]int{}, map[string]int{}
	cfg.Observer = onPoll(func(o model.Observation) {
		pollMu.Lock()
		polls[o.Queue]++
		got[o.Queue] += o.Received
		pollMu.Unlock()
	})
	defer func() {
		pollMu.Lock()
		t.Logf("%s: dequeues %v bringing %v messages", e.driver, polls, got)
		pollMu.Unlock()
	}()
	p := newProc(t, e.store, reg, cfg)
	stop := start(t, p)
	defer func() { close(stopped); stop() }()

	var order []string
	next := func() string {
		select {
		case q := <-started:
			return q
		case <-time.After(time.Minute):
			t.Fatalf("no handler started within a minute (after %d starts: %v; stats %+v)", len(order), order, p.Stats())
			return ""
		}
	}
	for range concurrency {
		order = append(order, next())
	}
	for len(order) < n {
		release <- struct{}{} // every slot is taken: one handler returns
		order = append(order, next())
	}
	return order[:n]
}

// shares counts each queue's starts in order, and the longest run of
// other queues' starts between two starts of queue (or before its first).
func shares(order []string, queue string) (counts map[string]int, longest int) {
	counts = map[string]int{}
	run := 0
	for _, q := range order {
		counts[q]++
		if q == queue {
			run = 0
			continue
		}
		run++
		longest = max(longest, run)
	}
	return counts, longest
}

// TestQueueWeights (both stores): a processor of 4 handler slots polls
// critical, default and low weighing 6:3:1, each filled with more
// commands than it starts in the test; handlers block until the test
// releases them one at a time, so every start is a slot given among
// waiting messages of every queue. Over the first 200 starts the shares
// are 60/30/10 % within ±15 % of each (critical 120 ± 18, default 60 ± 9,
// low 20 ± 3), and low is never starved: at most 2 × its bound (20) of
// the others' starts between two of its own (the bound, plus the turns
// its own dequeue may miss, which it catches up on).
func TestQueueWeights(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		const n = 200
		order := weightedStarts(t, e, map[string]int{"critical": 6, "default": 3, "low": 1}, 4, n,
			map[string]int{"critical": 200, "default": 120, "low": 60})
		counts, gap := shares(order, "low")
		t.Logf("%s: starts %v, low's longest wait %d starts; order %v", e.driver, counts, gap, order)
		for q, w := range map[string]int{"critical": 6, "default": 3, "low": 1} {
			want := float64(n*w) / 10
			if got := float64(counts[q]); got < want*0.85 || got > want*1.15 {
				t.Errorf("%s: %d of %d starts, want %.0f ± 15 %% (weights 6:3:1)", q, counts[q], n, want)
			}
		}
		if gap > 40 {
			t.Errorf("low waited through %d starts of the others, want at most 40 (2 × its bound of 20)", gap)
		}
	})
}
