package cmdq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
)

type urgentJob struct{ N int }

func (urgentJob) CommandType() string { return "weights.urgent" }

type bulkJob struct{ N int }

func (bulkJob) CommandType() string { return "weights.bulk" }

// TestQueueWeights (both stores): a Client whose Config.QueueWeights
// gives queue "urgent" 3 and "bulk" 1, with 2 handler slots and both
// queues filled before Start, starts 3:1 (within ±15 %: urgent 60 ± 9,
// bulk 20 ± 3 of the first 80 starts, or of the next 80 on a machine
// too loaded for the first) while the test releases one blocked handler
// at a time. Weights for a queue no type routes to make
// Start fail with ErrInvalidConfig, naming the queue, before anything
// runs; a weight of 0 makes New fail.
func TestQueueWeights(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.Concurrency = 2
		cfg.QueueWeights = map[string]int{"urgent": 3, "bulk": 1}
		c := newClient(t, s, cfg)
		started := make(chan string, 256)
		release := make(chan struct{})
		done := make(chan struct{})
		defer close(done)
		block := func(ctx context.Context, queue string) error {
			started <- queue
			select {
			case <-release:
			case <-done:
			case <-ctx.Done():
			}
			return nil
		}
		if err := cmdq.RegisterWith(c, func(ctx context.Context, _ urgentJob, _ *cmdq.Attempt) error { return block(ctx, "urgent") }, cmdq.HandlerOptions{Queue: "urgent"}); err != nil {
			t.Fatal(err)
		}
		if err := cmdq.RegisterWith(c, func(ctx context.Context, _ bulkJob, _ *cmdq.Attempt) error { return block(ctx, "bulk") }, cmdq.HandlerOptions{Queue: "bulk"}); err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			if _, err := c.Issue(ctx, urgentJob{N: i}); err != nil {
				t.Fatal(err)
			}
			if i < 100 {
				if _, err := c.Issue(ctx, bulkJob{N: i}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		next := func() string { return waitFor(t, started, "a handler starts") }
		order := []string{next(), next()}
		// The starts follow the weights while both queues have messages in
		// hand when a slot frees. On a loaded machine a queue's dequeue can
		// still be out when its turns come, more often than its credit (one
		// round) makes up, and the other queue takes them (work-conserving):
		// then the next 80 starts are counted too, and must hold.
		for window := 1; ; window++ {
			for len(order) < 80 {
				release <- struct{}{}
				order = append(order, next())
			}
			counts := map[string]int{}
			for _, q := range order {
				counts[q]++
			}
			t.Logf("%s: starts %v", s.driver, counts)
			if counts["urgent"] >= 51 && counts["urgent"] <= 69 && counts["bulk"] >= 17 && counts["bulk"] <= 23 {
				break
			}
			if window == 2 {
				t.Fatalf("starts %v of 80, want urgent 60 ± 9 and bulk 20 ± 3 (weights 3:1)", counts)
			}
			order = order[:0]
		}
	})

	s := openStore(t, "embedded")
	cfg := fast()
	cfg.QueueWeights = map[string]int{"urgent": 3, "nowhere": 2}
	c := newClient(t, s, cfg)
	if err := cmdq.RegisterWith(c, func(context.Context, urgentJob, *cmdq.Attempt) error { return nil }, cmdq.HandlerOptions{Queue: "urgent"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.Start(ctx)
	if !errors.Is(err, cmdq.ErrInvalidConfig) || !strings.Contains(err.Error(), "weights for unknown queues nowhere") {
		t.Fatalf("Start with a weight for an unknown queue: %v, want ErrInvalidConfig naming it", err)
	}
	if c.Stats().Running {
		t.Fatal("the processor runs after Start failed")
	}
	if _, err := cmdq.New(s.st, cmdq.Config{QueueWeights: map[string]int{"urgent": 0}}); !errors.Is(err, cmdq.ErrInvalidConfig) || !strings.Contains(err.Error(), `QueueWeights["urgent"] = 0`) {
		t.Fatalf("New with a weight of 0: %v, want ErrInvalidConfig", err)
	}
}
