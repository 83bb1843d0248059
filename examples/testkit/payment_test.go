package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/cmdqtest"
)

// TestPoisonedAfterFiveAttempts: the default retry policy (5 attempts,
// 1 s doubling: 15 s of delays) poisons a command whose handler always
// fails; the test kit's clock skips the delays, so Drain, the part that
// runs on it, takes well under 2 s of wall time.
func TestPoisonedAfterFiveAttempts(t *testing.T) {
	c := cmdqtest.New(t)
	if err := cmdq.Register(c, Charge(func() bool { return true })); err != nil {
		t.Fatal(err)
	}
	res, err := c.Issue(context.Background(), ChargeCard{OrderID: "o-1"})
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
	t.Logf("poisoned after %d attempts: Drain took %s of wall time, the clock moved %s", st.Attempts, took.Round(time.Millisecond), cmdqtest.ClockOf(c).Ahead().Round(time.Millisecond))
	if took >= 2*time.Second {
		t.Fatalf("Drain took %s to poison the command; want under 2 s (the retry delays must not wait in real time)", took)
	}
}

// TestScheduledHourAhead: a command scheduled an hour ahead stays
// scheduled until the test moves the clock an hour; then it runs.
func TestScheduledHourAhead(t *testing.T) {
	c := cmdqtest.New(t)
	if err := cmdq.Register(c, Charge(func() bool { return false })); err != nil {
		t.Fatal(err)
	}
	res, err := c.Issue(context.Background(), ChargeCard{OrderID: "o-2"}, cmdq.After(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cmdqtest.Drain(t, c)
	cmdqtest.RequireState(t, c, res.ID, cmdq.StateScheduled)
	cmdqtest.ClockOf(c).Advance(time.Hour)
	cmdqtest.Drain(t, c)
	st := cmdqtest.RequireState(t, c, res.ID, cmdq.StateCompleted)
	if string(st.Output) != `{"charged":"o-2"}` {
		t.Fatalf("output %s", st.Output)
	}
}
