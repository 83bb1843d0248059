package cmdqtest_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/cmdqtest"
)

// ChargeOrder charges an order, then ships it: two effects on outside
// systems, the kind a handler must do once per command.
type ChargeOrder struct {
	OrderID string `json:"orderId"`
	Cents   int    `json:"cents"`
}

func (ChargeOrder) CommandType() string { return "shop.charge" }

// shop is the outside world of the handlers: a payment provider and a
// carrier, counting what they were asked to do. Charge and Ship do it
// every time; their Once forms take an idempotency key and do it once
// per key, as real providers offer.
type shop struct {
	mu      sync.Mutex
	charged map[string]int // order → charges
	shipped map[string]int // order → shipments
	keys    map[string]bool
}

func newShop() *shop {
	return &shop{charged: map[string]int{}, shipped: map[string]int{}, keys: map[string]bool{}}
}

func (s *shop) do(m map[string]int, order, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key != "" {
		if s.keys[key] {
			return
		}
		s.keys[key] = true
	}
	m[order]++
}

func (s *shop) counts(order string) (charged, shipped int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.charged[order], s.shipped[order]
}

// naive charges and ships without looking at its steps, its context or
// CompleteStep's errors, and without idempotency keys: at-least-once
// delivery makes it charge twice.
func naive(s *shop) cmdq.Handler[ChargeOrder] {
	return func(ctx context.Context, c ChargeOrder, a *cmdq.Attempt) error {
		s.do(s.charged, c.OrderID, "")
		_ = a.CompleteStep(ctx, 1, "charged")
		s.do(s.shipped, c.OrderID, "")
		_ = a.CompleteStep(ctx, 2, "shipped")
		return nil
	}
}

// idempotent skips the steps done, stops when its context ends, returns
// CompleteStep's errors, and gives each effect an idempotency key (the
// command ID and the step): whatever the deliveries, each effect happens
// once.
func idempotent(s *shop) cmdq.Handler[ChargeOrder] {
	return func(ctx context.Context, c ChargeOrder, a *cmdq.Attempt) error {
		if a.LastStep() < 1 {
			s.do(s.charged, c.OrderID, a.ID()+"/charge")
			if err := a.CompleteStep(ctx, 1, "charged"); err != nil {
				return err
			}
		}
		if err := context.Cause(ctx); err != nil {
			return err
		}
		if a.LastStep() < 2 {
			s.do(s.shipped, c.OrderID, a.ID()+"/ship")
			if err := a.CompleteStep(ctx, 2, "shipped"); err != nil {
				return err
			}
		}
		return nil
	}
}

// requireOnce fails tb unless the order was charged once and shipped
// want times (0 when the command was cancelled before it shipped).
func requireOnce(tb testing.TB, s *shop, order string, wantShipped int) {
	tb.Helper()
	if c, sh := s.counts(order); c != 1 || sh != wantShipped {
		tb.Fatalf("order %s charged %d times and shipped %d times; want charged once and shipped %d times", order, c, sh, wantShipped)
	}
}

// TestWork: Work runs a handler once with a real Attempt and reports
// what it did: its error, output, steps, and a RetryAfter or Permanent.
func TestWork(t *testing.T) {
	t.Parallel()
	res := cmdqtest.Work(t, func(ctx context.Context, c ChargeOrder, a *cmdq.Attempt) error {
		if err := a.CompleteStep(ctx, 1, "charged "+c.OrderID); err != nil {
			return err
		}
		if err := a.SetOutput(map[string]int{"cents": c.Cents}); err != nil {
			return err
		}
		return cmdq.RetryAfter(time.Minute, errors.New("carrier busy"))
	}, ChargeOrder{OrderID: "o-1", Cents: 250}, cmdqtest.AttemptNumber(3))
	if len(res.Deliveries) != 1 || res.Attempt != 3 || !res.Deferred || res.RetryAfter != time.Minute || res.Permanent {
		t.Fatalf("outcome %+v; want one delivery, attempt 3, deferred by a minute", res.Outcome)
	}
	if string(res.Output) != `{"cents":250}` || res.LastStep != 1 || len(res.Steps) != 1 || res.Steps[0].Note != "charged o-1" {
		t.Fatalf("output %s, last step %d, steps %+v", res.Output, res.LastStep, res.Steps)
	}
	perm := cmdqtest.Work(t, func(context.Context, ChargeOrder, *cmdq.Attempt) error {
		return cmdq.Permanent(errors.New("card declined"))
	}, ChargeOrder{OrderID: "o-2"})
	if !perm.Permanent || perm.Deferred || perm.Err == nil || !perm.Recorded {
		t.Fatalf("a Permanent error: %+v", perm.Outcome)
	}
	boom := cmdqtest.Work(t, func(context.Context, ChargeOrder, *cmdq.Attempt) error { panic("boom") }, ChargeOrder{})
	if !boom.Panicked || boom.Err == nil || !strings.Contains(boom.Err.Error(), "boom") {
		t.Fatalf("a panic: %+v", boom.Outcome)
	}
	resumed := cmdqtest.Work(t, idempotent(newShop()), ChargeOrder{OrderID: "o-3"}, cmdqtest.LastStep(1))
	if len(resumed.Steps) != 1 || resumed.Steps[0].N != 2 {
		t.Fatalf("resumed after step 1: steps %+v, want step 2 only", resumed.Steps)
	}
}

// TestFaultsExposeNaiveHandlers: under each fault option the naive
// handler's effects happen twice (or after a cancel), which requireOnce
// reports; the idempotent handler's happen once.
func TestFaultsExposeNaiveHandlers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		opt         cmdqtest.WorkOption
		deliveries  int
		wantShipped int
		naive       string // what requireOnce says of the naive handler
	}{
		{"Redeliver", cmdqtest.Redeliver(), 2, 1, "charged 2 times and shipped 2 times"},
		{"DeliverConcurrently", cmdqtest.DeliverConcurrently(), 2, 1, "charged 2 times and shipped 2 times"},
		{"LoseLeaseAfterStep", cmdqtest.LoseLeaseAfterStep(1), 2, 1, "charged 2 times and shipped 2 times"},
		{"CancelAfterStep", cmdqtest.CancelAfterStep(1), 1, 0, "charged 1 times and shipped 1 times"},
		{"FailWrites", cmdqtest.FailWrites(), 2, 1, "charged 2 times and shipped 2 times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := newShop()
			res := cmdqtest.Work(t, naive(bad), ChargeOrder{OrderID: "o-1"}, tc.opt)
			if len(res.Deliveries) != tc.deliveries {
				t.Fatalf("%d deliveries, want %d", len(res.Deliveries), tc.deliveries)
			}
			if msg := fails(t, func(tb testing.TB) { requireOnce(tb, bad, "o-1", tc.wantShipped) }); !strings.Contains(msg, tc.naive) {
				t.Fatalf("the naive handler under %s: requireOnce said %q, want it to report %q", tc.name, msg, tc.naive)
			}
			good := newShop()
			res = cmdqtest.Work(t, idempotent(good), ChargeOrder{OrderID: "o-1"}, tc.opt)
			requireOnce(t, good, "o-1", tc.wantShipped)
			if tc.deliveries == 2 && (res.Deliveries[1].Err != nil || !res.Deliveries[1].Recorded) {
				t.Fatalf("the idempotent handler's second delivery: %+v", res.Deliveries[1])
			}
		})
	}
}

// TestFaultCauses: the lease-lost and cancel faults cancel the handler's
// context with their causes, and are not recorded.
func TestFaultCauses(t *testing.T) {
	t.Parallel()
	wait := func(ctx context.Context, _ ChargeOrder, a *cmdq.Attempt) error {
		if a.Number() > 1 {
			return nil // the redelivery
		}
		<-ctx.Done()
		return context.Cause(ctx)
	}
	lost := cmdqtest.Work(t, wait, ChargeOrder{}, cmdqtest.LoseLeaseAfterStep(0))
	if first := lost.Deliveries[0]; !errors.Is(first.Cause, cmdqtest.ErrLeaseLost) || first.Recorded {
		t.Fatalf("lease lost: %+v", first)
	}
	cancelled := cmdqtest.Work(t, func(ctx context.Context, _ ChargeOrder, a *cmdq.Attempt) error {
		if err := a.CompleteStep(ctx, 1, ""); err != nil {
			return err
		}
		return a.CompleteStep(ctx, 2, "")
	}, ChargeOrder{}, cmdqtest.CancelAfterStep(1))
	if !errors.Is(cancelled.Cause, cmdq.ErrCancelled) || !errors.Is(cancelled.Err, cmdq.ErrSuperseded) || cancelled.LastStep != 1 || cancelled.Recorded {
		t.Fatalf("cancelled after step 1: %+v", cancelled.Outcome)
	}
	failed := cmdqtest.Work(t, func(ctx context.Context, _ ChargeOrder, a *cmdq.Attempt) error {
		return a.CompleteStep(ctx, 1, "")
	}, ChargeOrder{}, cmdqtest.FailWrites())
	if first := failed.Deliveries[0]; !errors.Is(first.Err, cmdqtest.ErrWriteFailed) || first.LastStep != 0 || first.Recorded {
		t.Fatalf("writes failing: %+v", first)
	}
	if failed.Err != nil || failed.LastStep != 1 {
		t.Fatalf("the delivery after the failed writes: %+v", failed.Outcome)
	}
}
