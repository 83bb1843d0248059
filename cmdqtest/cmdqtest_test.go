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

type broken struct{}

func (broken) CommandType() string { return "shop.broken" }

// TestPoisonWithoutWaiting: a type with the default retry policy (5
// attempts, 1 s doubling: 15 s of delays) is poisoned after its five
// attempts without the test waiting for the delays: the kit advances the
// client's clock by at least their sum.
func TestPoisonWithoutWaiting(t *testing.T) {
	t.Parallel()
	c := cmdqtest.New(t)
	if err := cmdq.Register(c, func(context.Context, broken, *cmdq.Attempt) error {
		return errors.New("always fails")
	}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Issue(context.Background(), broken{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmdqtest.Drain(t, c)
	took := time.Since(start)
	st := cmdqtest.RequireState(t, c, res.ID, cmdq.StatePoisoned)
	if st.Attempts != 5 {
		t.Fatalf("poisoned after %d attempts, want 5", st.Attempts)
	}
	// The events' times are the clock's: from the first failure to the
	// poisoning, the four retry delays passed on it; the clock was moved
	// ahead by all of that but the wall time Drain took.
	evs := cmdqtest.RequireEvents(t, c, res.ID, cmdq.EventCreated,
		cmdq.EventStarted, cmdq.EventFailed, cmdq.EventStarted, cmdq.EventFailed, cmdq.EventStarted, cmdq.EventFailed,
		cmdq.EventStarted, cmdq.EventFailed, cmdq.EventStarted, cmdq.EventFailed, cmdq.EventPoisoned)
	span := evs[len(evs)-1].Time.Sub(evs[2].Time)
	if ahead := cmdqtest.ClockOf(c).Ahead(); span < 5*time.Second || ahead < span-took {
		t.Fatalf("the retries took %s on the clock, which is %s ahead after %s of wall time: they waited in real time", span, ahead, took)
	}
	t.Logf("poisoned after 5 attempts (%s of retry delays on the clock) in %s of wall time", span, took)
}

type report struct{}

func (report) CommandType() string { return "shop.report" }

// TestAdvanceRunsScheduled: a command scheduled an hour ahead stays
// scheduled (the kit does not jump that far by itself) until the test
// moves the clock an hour; then it runs.
func TestAdvanceRunsScheduled(t *testing.T) {
	t.Parallel()
	c := cmdqtest.New(t)
	ran := make(chan struct{}, 1)
	if err := cmdq.Register(c, func(context.Context, report, *cmdq.Attempt) error {
		ran <- struct{}{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Issue(context.Background(), report{}, cmdq.After(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	all := cmdqtest.Drain(t, c)
	if len(all) != 1 || all[0].State != cmdq.StateScheduled {
		t.Fatalf("Drain before the hour: %+v, want the command scheduled", all)
	}
	select {
	case <-ran:
		t.Fatal("the handler ran before the clock moved")
	default:
	}
	cmdqtest.ClockOf(c).Advance(time.Hour)
	cmdqtest.Drain(t, c)
	cmdqtest.RequireState(t, c, res.ID, cmdq.StateCompleted)
	cmdqtest.RequireEvents(t, c, res.ID, cmdq.EventCreated, cmdq.EventStarted, cmdq.EventCompleted)
}

// TestAdvanceTicksPeriodic: a periodic schedule's tick comes when the
// test moves the clock past it.
func TestAdvanceTicksPeriodic(t *testing.T) {
	t.Parallel()
	c := cmdqtest.New(t)
	if err := cmdq.Register(c, func(context.Context, report, *cmdq.Attempt) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.Periodic("shop.hourly", "@hourly", report{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdqtest.Timeout)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if all := cmdqtest.Drain(t, c); len(all) != 0 {
		t.Fatalf("%d commands before the clock moved, want none", len(all))
	}
	cmdqtest.ClockOf(c).Advance(time.Hour)
	for {
		page, err := c.ListCommands(ctx, cmdq.CommandQuery{Type: "shop.report"})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Commands) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no tick issued after the clock moved an hour")
		case <-time.After(10 * time.Millisecond):
		}
	}
	all := cmdqtest.Drain(t, c)
	if len(all) != 1 || all[0].State != cmdq.StateCompleted {
		t.Fatalf("after the hour: %+v, want one completed tick", all)
	}
}
