package cmdqtest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/cmdqtest"
)

// Work runs a handler once, without a store, and reports what it did.
// (In a test, pass its *testing.T instead of nil.)
func ExampleWork() {
	res := cmdqtest.Work(nil, func(ctx context.Context, c ChargeOrder, a *cmdq.Attempt) error {
		if err := a.CompleteStep(ctx, 1, "charged"); err != nil {
			return err
		}
		return a.SetOutput(map[string]int{"cents": c.Cents})
	}, ChargeOrder{OrderID: "o-1", Cents: 250})
	fmt.Println("error:", res.Err)
	fmt.Println("output:", string(res.Output))
	fmt.Println("steps:", len(res.Steps), "last:", res.LastStep)
	// Output:
	// error: <nil>
	// output: {"cents":250}
	// steps: 1 last: 1
}

// Redeliver runs the command again after the first delivery, as if its
// outcome was lost: a handler that skips its completed steps charges
// once.
func ExampleRedeliver() {
	s := newShop()
	res := cmdqtest.Work(nil, idempotent(s), ChargeOrder{OrderID: "o-1"}, cmdqtest.Redeliver())
	charged, shipped := s.counts("o-1")
	fmt.Println("deliveries:", len(res.Deliveries))
	fmt.Println("charged:", charged, "shipped:", shipped)
	// Output:
	// deliveries: 2
	// charged: 1 shipped: 1
}

// DeliverConcurrently runs two deliveries at once: steps cannot tell them
// apart, an idempotency key (the command ID) can. A handler without one
// charges twice.
func ExampleDeliverConcurrently() {
	s := newShop()
	cmdqtest.Work(nil, naive(s), ChargeOrder{OrderID: "o-1"}, cmdqtest.DeliverConcurrently())
	charged, _ := s.counts("o-1")
	fmt.Println("naive handler, charged:", charged)

	s = newShop()
	cmdqtest.Work(nil, idempotent(s), ChargeOrder{OrderID: "o-1"}, cmdqtest.DeliverConcurrently())
	charged, _ = s.counts("o-1")
	fmt.Println("idempotent handler, charged:", charged)
	// Output:
	// naive handler, charged: 2
	// idempotent handler, charged: 1
}

// LoseLeaseAfterStep cancels the first delivery's context with
// ErrLeaseLost after step 1 and delivers the command again: the
// handler resumes after step 1.
func ExampleLoseLeaseAfterStep() {
	s := newShop()
	res := cmdqtest.Work(nil, idempotent(s), ChargeOrder{OrderID: "o-1"}, cmdqtest.LoseLeaseAfterStep(1))
	first := res.Deliveries[0]
	fmt.Println("first delivery:", first.Cause, "- recorded:", first.Recorded)
	fmt.Println("second delivery recorded steps:", res.Deliveries[1].Steps[0].N)
	charged, shipped := s.counts("o-1")
	fmt.Println("charged:", charged, "shipped:", shipped)
	// Output:
	// first delivery: cmdqtest: the message's lease was lost; another delivery may run the command - recorded: false
	// second delivery recorded steps: 2
	// charged: 1 shipped: 1
}

// CancelAfterStep cancels the command after step 1, as Client.Cancel
// does: a handler that checks its context ships nothing.
func ExampleCancelAfterStep() {
	s := newShop()
	res := cmdqtest.Work(nil, idempotent(s), ChargeOrder{OrderID: "o-1"}, cmdqtest.CancelAfterStep(1))
	charged, shipped := s.counts("o-1")
	fmt.Println("cancelled:", errors.Is(res.Cause, cmdq.ErrCancelled))
	fmt.Println("charged:", charged, "shipped:", shipped)
	// Output:
	// cancelled: true
	// charged: 1 shipped: 0
}

// FailWrites makes the first delivery's step writes fail and its outcome
// unrecorded, so the command runs again from the start: only an
// idempotency key keeps the charge single.
func ExampleFailWrites() {
	s := newShop()
	res := cmdqtest.Work(nil, idempotent(s), ChargeOrder{OrderID: "o-1"}, cmdqtest.FailWrites())
	fmt.Println("first delivery:", errors.Is(res.Deliveries[0].Err, cmdqtest.ErrWriteFailed))
	charged, shipped := s.counts("o-1")
	fmt.Println("charged:", charged, "shipped:", shipped)
	// Output:
	// first delivery: true
	// charged: 1 shipped: 1
}
