package cmdq_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/cmdq-dev/cmdq"
)

// slowJob declares a cap of 2 handlers at once in a process.
type slowJob struct {
	N int `json:"n"`
}

func (slowJob) CommandType() string { return "jobs.slow" }
func (slowJob) CommandOptions() cmdq.CommandOptions {
	return cmdq.CommandOptions{MaxConcurrency: 2}
}

// TestMaxConcurrency: a type capped at 2 (declared by the type) with 10
// handlers blocked never has more than 2 running, while another type on
// the same queue keeps completing in the remaining handler slots (the
// waiting messages of the capped type hold none); released, every one
// completes, still 2 at a time at most. A cap set at Register overrides
// the declared one; a negative one is refused.
func TestMaxConcurrency(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.Concurrency = 4 // without the cap, 4 slow handlers would take every slot
		c := newClient(t, s, cfg)
		var mu sync.Mutex
		running, peak := 0, 0
		startedSlow := make(chan struct{}, 10)
		release := make(chan struct{})
		if err := cmdq.Register(c, func(ctx context.Context, j slowJob, _ *cmdq.Attempt) error {
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			defer func() {
				mu.Lock()
				running--
				mu.Unlock()
			}()
			startedSlow <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}); err != nil {
			t.Fatal(err)
		}
		if err := cmdq.Register(c, func(ctx context.Context, g greet, _ *cmdq.Attempt) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if info, ok := c.Lookup("jobs.slow"); !ok || info.Options.MaxConcurrency != 2 {
			t.Fatalf("Lookup: %+v", info)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var slow []string
		for i := range 10 {
			res, err := c.Issue(ctx, slowJob{N: i})
			if err != nil {
				t.Fatal(err)
			}
			slow = append(slow, res.ID)
		}
		waitFor(t, startedSlow, "a slow handler starts")
		waitFor(t, startedSlow, "a second slow handler starts")

		// The other type completes meanwhile, 20 of it.
		for i := range 20 {
			res, err := c.Issue(ctx, greet{Name: "fast"})
			if err != nil {
				t.Fatal(err)
			}
			if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StateCompleted {
				t.Fatalf("fast command %d: %+v %v", i, st, err)
			}
		}
		mu.Lock()
		r, p := running, peak
		mu.Unlock()
		if r != 2 || p != 2 {
			t.Fatalf("slow handlers running %d (peak %d) while 10 were issued, want 2 (the cap)", r, p)
		}

		close(release)
		for _, id := range slow {
			if st, err := c.Wait(ctx, id); err != nil || st.State != cmdq.StateCompleted {
				t.Fatalf("slow command: %+v %v", st, err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if peak != 2 {
			t.Fatalf("peak slow handlers %d, want 2", peak)
		}
	})
}

// TestMaxConcurrencyOptions: HandlerOptions.MaxConcurrency overrides the
// declared cap; a negative cap is refused with ErrInvalidOptions.
func TestMaxConcurrencyOptions(t *testing.T) {
	s := openStore(t, "embedded")
	c := newClient(t, s, fast())
	noop := func(ctx context.Context, j slowJob, _ *cmdq.Attempt) error { return nil }
	if err := cmdq.RegisterWith(c, noop, cmdq.HandlerOptions{MaxConcurrency: -1}); !errors.Is(err, cmdq.ErrInvalidOptions) {
		t.Fatalf("MaxConcurrency -1: %v, want ErrInvalidOptions", err)
	}
	if err := cmdq.RegisterWith(c, noop, cmdq.HandlerOptions{MaxConcurrency: 5}); err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Lookup("jobs.slow"); info.Options.MaxConcurrency != 5 {
		t.Fatalf("MaxConcurrency %d, want 5 (the registered over the declared 2)", info.Options.MaxConcurrency)
	}
}
