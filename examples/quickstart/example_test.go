package quickstart_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// SendGreeting is a command: its fields are the JSON parameters.
type SendGreeting struct {
	Name string `json:"name"`
}

// CommandType names the command type (a constant, called on the zero value).
func (SendGreeting) CommandType() string { return "greetings.send" }

// open returns a client on the embedded store in a new temporary directory
// and a function that stops it and removes the directory.
func open() (*cmdq.Client, func()) {
	dir, err := os.MkdirTemp("", "cmdq-example-")
	if err != nil {
		log.Fatal(err)
	}
	// Storage: the embedded store in one data directory (or azure.Open).
	st, err := embedded.Open(filepath.Join(dir, "cmdq-data"), nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := cmdq.New(st, cmdq.Config{
		Worker:          "example",
		MaxPollInterval: 200 * time.Millisecond, // poll often in an example
	})
	if err != nil {
		log.Fatal(err)
	}
	return c, func() {
		_ = c.Stop(context.Background())
		_ = st.Close()
		_ = os.RemoveAll(dir)
	}
}

// Example registers a handler, starts processing, issues a command and waits
// until it is completed, all on the embedded store (one directory, no
// server).
func Example() {
	ctx := context.Background()
	c, done := open()
	defer done()

	// Handlers: a typed function per command type.
	err := cmdq.Register(c, func(ctx context.Context, cmd SendGreeting, run *cmdq.Attempt) error {
		fmt.Printf("handler: hello, %s (attempt %d)\n", cmd.Name, run.Number())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Processing runs in the background until Stop.
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}

	// Issue: stores the command and enqueues it, waking the processor at
	// once. CommandID makes the ID (and this output) fixed.
	res, err := c.Issue(ctx, SendGreeting{Name: "Ada"}, cmdq.CommandID("0b9e1c52-5a0f-4c8e-9d61-3f2a7c4b8e10"))
	if err != nil {
		log.Fatal(err)
	}

	// Wait and read: what GET /v1/commands/{id} and /events return.
	s, err := c.Wait(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s %s: %s after %d attempt(s)\n", s.Type, s.ID, s.State, s.Attempts)
	printEvents(ctx, c, res.ID)

	// Output:
	// handler: hello, Ada (attempt 1)
	// greetings.send 0b9e1c52-5a0f-4c8e-9d61-3f2a7c4b8e10: completed after 1 attempt(s)
	// event 1: created
	// event 2: started (attempt 1)
	// event 3: completed (attempt 1)
}

// ChargeCard is a command whose handler fails permanently until it is
// configured.
type ChargeCard struct {
	OrderID string `json:"orderId"`
	Cents   int64  `json:"cents"`
}

// CommandType names the command type.
func (ChargeCard) CommandType() string { return "payments.charge-card" }

// Example_poisonAndRequeue shows the operator's side: a permanent error
// poisons the command at once (no retries); after the cause is fixed, an
// operator requeues it and it completes.
func Example_poisonAndRequeue() {
	ctx := context.Background()
	c, done := open()
	defer done()

	var configured atomic.Bool // the payment gateway's key is missing at first
	err := cmdq.Register(c, func(ctx context.Context, cmd ChargeCard, run *cmdq.Attempt) error {
		if !configured.Load() {
			// Retrying cannot help: poison at once for an operator to look at.
			return cmdq.Permanent(errors.New("payment gateway key not configured"))
		}
		fmt.Printf("handler: charged %d cents for order %s\n", cmd.Cents, cmd.OrderID)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := c.Issue(ctx, ChargeCard{OrderID: "A-1001", Cents: 4200}, cmdq.CommandID("5d2c8f0e-7b1a-4e3d-8c9f-0a1b2c3d4e5f"))
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.Wait(ctx, res.ID) // poisoned is final until an operator acts
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("status: %s (%s)\n", s.State, s.LastError)

	// The operator lists the poison table (GET /v1/poison, `cmdq poison ls`).
	page, err := c.ListPoison(ctx, cmdq.PoisonQuery{})
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range page.Entries {
		fmt.Printf("poisoned: %s %s reason=%q dequeues=%d\n", p.Type, p.CommandID, p.Reason, p.DequeueCount)
	}

	// The cause is fixed; the operator requeues (POST /v1/poison/{id}/requeue),
	// which wakes the processor at once.
	configured.Store(true)
	if err := c.Requeue(ctx, res.ID, "ops@example.com"); err != nil {
		log.Fatal(err)
	}
	s, err = c.Wait(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("status: %s after %d attempt(s) since the requeue\n", s.State, s.Attempts)
	printEvents(ctx, c, res.ID)

	// Output:
	// status: poisoned (permanent: payment gateway key not configured)
	// poisoned: payments.charge-card 5d2c8f0e-7b1a-4e3d-8c9f-0a1b2c3d4e5f reason="permanent error" dequeues=1
	// handler: charged 4200 cents for order A-1001
	// status: completed after 1 attempt(s) since the requeue
	// event 1: created
	// event 2: started (attempt 1)
	// event 3: failed (attempt 1)
	// event 4: poisoned (attempt 1) permanent error
	// event 5: requeued by ops@example.com
	// event 6: started (attempt 1)
	// event 7: completed (attempt 1)
}

// printEvents prints the command's lifecycle events, oldest first.
func printEvents(ctx context.Context, c *cmdq.Client, id string) {
	evs, err := c.Events(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range evs {
		line := fmt.Sprintf("event %d: %s", e.Seq, e.Kind)
		if e.Attempt > 0 {
			line += fmt.Sprintf(" (attempt %d)", e.Attempt)
		}
		if e.By != "" {
			line += " by " + e.By
		}
		if e.Reason != "" {
			line += " " + e.Reason
		}
		fmt.Println(line)
	}
}
