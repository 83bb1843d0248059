package cmdqtest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/cmdqtest"
)

type order struct {
	ID string `json:"id"`
}

func (order) CommandType() string { return "shop.order" }

type ship struct {
	OrderID string `json:"orderId"`
}

func (ship) CommandType() string { return "shop.ship" }

type flaky struct{}

func (flaky) CommandType() string { return "shop.flaky" }

// TestDrainRunsEverything: Drain processes what the test issued and what
// the handlers issued in turn, retries included; the assertions read the
// outcome.
func TestDrainRunsEverything(t *testing.T) {
	t.Parallel()
	c := cmdqtest.New(t)
	ctx := context.Background()
	if err := cmdq.Register(c, func(ctx context.Context, o order, run *cmdq.Attempt) error {
		_, err := c.Issue(ctx, ship{OrderID: o.ID}) // a handler that issues a follow-up
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := cmdq.Register(c, func(context.Context, ship, *cmdq.Attempt) error { return nil }); err != nil {
		t.Fatal(err)
	}
	fast := cmdq.RetryPolicy{Base: 50 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 1}
	if err := cmdq.RegisterWith(c, func(ctx context.Context, _ flaky, run *cmdq.Attempt) error {
		if run.Number() < 3 {
			return fmt.Errorf("attempt %d fails", run.Number())
		}
		return nil
	}, cmdq.HandlerOptions{Retry: fast}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Issue(ctx, order{ID: "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	fl, err := c.Issue(ctx, flaky{})
	if err != nil {
		t.Fatal(err)
	}
	all := cmdqtest.Drain(t, c)
	if len(all) != 3 {
		t.Fatalf("Drain returned %d commands, want 3 (order, ship, flaky)", len(all))
	}
	cmdqtest.RequireState(t, c, res.ID, cmdq.StateCompleted)
	cmdqtest.RequireEvents(t, c, res.ID, cmdq.EventCreated, cmdq.EventStarted, cmdq.EventCompleted)
	st := cmdqtest.RequireState(t, c, fl.ID, cmdq.StateCompleted)
	if st.Attempts != 3 {
		t.Fatalf("flaky completed after %d attempts, want 3", st.Attempts)
	}
	shipped := cmdqtest.RequireIssued(t, c, "shop.ship")
	if len(shipped) != 1 {
		t.Fatalf("%d ship commands, want 1", len(shipped))
	}
	_, params, err := c.GetParams(ctx, shipped[0].ID)
	if err != nil || string(params) != `{"orderId":"o-1"}` {
		t.Fatalf("ship params %s %v", params, err)
	}
}

// recorder is a testing.TB whose Fatal records the message and ends the
// calling goroutine, as testing.T's does.
type recorder struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.mu.Lock()
	r.msg = fmt.Sprint(args...)
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) { r.Fatal(fmt.Sprintf(format, args...)) }

// fails runs f with a recorder and returns what it failed with ("" if it
// did not fail).
func fails(t *testing.T, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); f(r) }()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msg
}

// TestAssertionsFail: each assertion fails the test with a message that
// says what was found.
func TestAssertionsFail(t *testing.T) {
	t.Parallel()
	c := cmdqtest.New(t)
	ctx := context.Background()
	if err := cmdq.Register(c, func(context.Context, order, *cmdq.Attempt) error {
		return cmdq.Permanent(errors.New("out of stock"))
	}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Issue(ctx, order{ID: "o-2"})
	if err != nil {
		t.Fatal(err)
	}
	cmdqtest.Drain(t, c)
	for _, tc := range []struct {
		name string
		f    func(tb testing.TB)
		want []string
	}{
		{"state", func(tb testing.TB) { cmdqtest.RequireState(tb, c, res.ID, cmdq.StateCompleted) }, []string{"is poisoned", "want completed", "out of stock"}},
		{"events", func(tb testing.TB) {
			cmdqtest.RequireEvents(tb, c, res.ID, cmdq.EventCreated, cmdq.EventCompleted)
		}, []string{"[created started failed poisoned]", "want [created completed]"}},
		{"issued", func(tb testing.TB) { cmdqtest.RequireIssued(tb, c, "shop.ship") }, []string{"no command of type shop.ship", "shop.order"}},
		{"unknown", func(tb testing.TB) { cmdqtest.RequireState(tb, c, cmdq.NewID(), cmdq.StateCompleted) }, []string{"not found"}},
	} {
		msg := fails(t, tc.f)
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: failure %q does not say %q", tc.name, msg, w)
			}
		}
	}
	if msg := fails(t, func(tb testing.TB) { cmdqtest.RequireState(tb, c, res.ID, cmdq.StatePoisoned) }); msg != "" {
		t.Errorf("a true assertion failed: %s", msg)
	}
}

// TestDrainNeedsHandlers: a client without handlers cannot drain.
func TestDrainNeedsHandlers(t *testing.T) {
	t.Parallel()
	c := cmdqtest.New(t)
	if msg := fails(t, func(tb testing.TB) { cmdqtest.Drain(tb, c) }); !strings.Contains(msg, "no handlers") {
		t.Fatalf("Drain without handlers: %q", msg)
	}
}
