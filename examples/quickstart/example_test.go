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

	"github.com/cmdq-dev/cmdq/commands"
	"github.com/cmdq-dev/cmdq/handlers"
	"github.com/cmdq-dev/cmdq/processor"
	"github.com/cmdq-dev/cmdq/status"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// SendGreeting is a command: its fields are the JSON parameters.
type SendGreeting struct {
	Name string `json:"name"`
}

// CommandType names the command type (a constant, called on the zero value).
func (SendGreeting) CommandType() string { return "greetings.send" }

// Example registers a handler, starts a processor, issues a command and waits
// until it is completed, all on the embedded store (one file, no server).
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "cmdq-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// Storage: the embedded store in one file.
	st, err := embedded.Open(filepath.Join(dir, "cmdq-data"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	// Handlers: a typed function per command type.
	reg := handlers.NewRegistry()
	err = handlers.Register(reg, func(ctx context.Context, cmd SendGreeting, run *handlers.Run) error {
		fmt.Printf("handler: hello, %s (attempt %d)\n", cmd.Name, run.Attempt())
		return nil
	}, handlers.Options{})
	if err != nil {
		log.Fatal(err)
	}

	// Processor: pulls messages and runs the handlers until ctx ends.
	proc, err := processor.New(st, reg, processor.Config{Worker: "example"})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- proc.Run(runCtx) }()
	defer func() { stop(); <-done }()

	// Issuer: stores the command and enqueues it; Notify wakes the
	// processor at once. WithID makes the ID (and this output) fixed.
	issuer, err := commands.NewIssuer(st, commands.Options{Notify: proc.Notify, QueueFor: reg.QueueFor})
	if err != nil {
		log.Fatal(err)
	}
	res, err := issuer.Issue(ctx, SendGreeting{Name: "Ada"},
		commands.WithID("0b9e1c52-5a0f-4c8e-9d61-3f2a7c4b8e10"))
	if err != nil {
		log.Fatal(err)
	}

	// Reader: what GET /v1/commands/{id} and /events return.
	reader, err := status.OpenReader(ctx, st, status.Names{}, status.Options{})
	if err != nil {
		log.Fatal(err)
	}
	s := waitFor(ctx, reader, res.ID, status.Completed)
	fmt.Printf("%s %s: %s after %d attempt(s)\n", s.Type, s.ID, s.Status, s.Attempts)
	printEvents(ctx, reader, res.ID)

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
	dir, err := os.MkdirTemp("", "cmdq-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	st, err := embedded.Open(filepath.Join(dir, "cmdq-data"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	var configured atomic.Bool // the payment gateway's key is missing at first
	reg := handlers.NewRegistry()
	err = handlers.Register(reg, func(ctx context.Context, cmd ChargeCard, run *handlers.Run) error {
		if !configured.Load() {
			// Retrying cannot help: poison at once for an operator to look at.
			return handlers.Permanent(errors.New("payment gateway key not configured"))
		}
		fmt.Printf("handler: charged %d cents for order %s\n", cmd.Cents, cmd.OrderID)
		return nil
	}, handlers.Options{})
	if err != nil {
		log.Fatal(err)
	}
	proc, err := processor.New(st, reg, processor.Config{
		Worker:          "example",
		MaxPollInterval: 200 * time.Millisecond, // poll often in an example
	})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- proc.Run(runCtx) }()
	defer func() { stop(); <-done }()

	issuer, err := commands.NewIssuer(st, commands.Options{Notify: proc.Notify, QueueFor: reg.QueueFor})
	if err != nil {
		log.Fatal(err)
	}
	res, err := issuer.Issue(ctx, ChargeCard{OrderID: "A-1001", Cents: 4200},
		commands.WithID("5d2c8f0e-7b1a-4e3d-8c9f-0a1b2c3d4e5f"))
	if err != nil {
		log.Fatal(err)
	}
	reader, err := status.OpenReader(ctx, st, status.Names{}, status.Options{})
	if err != nil {
		log.Fatal(err)
	}
	s := waitFor(ctx, reader, res.ID, status.Poisoned)
	fmt.Printf("status: %s (%s)\n", s.Status, s.LastError)

	// The operator lists the poison table (GET /v1/poison, `cmdq poison ls`).
	page, err := reader.ListPoison(ctx, status.PoisonQuery{})
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range page.Entries {
		fmt.Printf("poisoned: %s %s reason=%q dequeues=%d\n", p.Type, p.CommandID, p.Reason, p.DequeueCount)
	}

	// The cause is fixed; the operator requeues (POST /v1/poison/{id}/requeue).
	configured.Store(true)
	if err := reader.Requeue(ctx, res.ID, "ops@example.com"); err != nil {
		log.Fatal(err)
	}
	proc.Notify("commands") // the requeue enqueued on another code path: wake the poller now
	s = waitFor(ctx, reader, res.ID, status.Completed)
	fmt.Printf("status: %s after %d attempt(s) since the requeue\n", s.Status, s.Attempts)
	printEvents(ctx, reader, res.ID)

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

// waitFor polls the command's status every 10 ms until it reaches want (as a
// client of GET /v1/commands/{id} would), for at most 10 s.
func waitFor(ctx context.Context, r *status.Reader, id string, want status.State) status.Status {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		s, err := r.Get(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		if s.Status == want {
			return s
		}
		select {
		case <-ctx.Done():
			log.Fatalf("command %s is %s, not %s: %v", id, s.Status, want, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// printEvents prints the command's lifecycle events, oldest first.
func printEvents(ctx context.Context, r *status.Reader, id string) {
	evs, err := r.Events(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range evs {
		line := fmt.Sprintf("event %d: %s", e.Seq, e.Kind)
		if e.Attempt > 0 {
			line += fmt.Sprintf(" (attempt %d)", e.Attempt)
		}
		if e.Kind == status.Requeued || e.Kind == status.DiscardedEvent {
			line += " by " + e.Worker
		}
		if e.Reason != "" {
			line += " " + e.Reason
		}
		fmt.Println(line)
	}
}
