package cmdq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// SendGreeting is a command: a Go type whose fields are its JSON
// parameters, and whose CommandType names it.
type SendGreeting struct {
	Name string `json:"name"`
}

func (SendGreeting) CommandType() string { return "greetings.send" }

// exampleClient returns a Client on an embedded store in a temporary
// directory, and a function that stops it and removes the directory.
func exampleClient(cfg cmdq.Config) (*cmdq.Client, func()) {
	dir, err := os.MkdirTemp("", "cmdq-example-")
	if err != nil {
		log.Fatal(err)
	}
	st, err := embedded.Open(dir, nil) // a data directory; or azure.Open(ctx, azure.Config{…})
	if err != nil {
		log.Fatal(err)
	}
	// Fast polls make the examples quick; the defaults suit production.
	cfg.MinPollInterval, cfg.MaxPollInterval = 10*time.Millisecond, 100*time.Millisecond
	c, err := cmdq.New(st, cfg)
	if err != nil {
		log.Fatal(err)
	}
	return c, func() {
		_ = c.Stop(context.Background())
		_ = st.Close()
		_ = os.RemoveAll(dir)
	}
}

// A handler, a processor in the background, a command issued and waited
// for.
func Example() {
	ctx := context.Background()
	c, done := exampleClient(cmdq.Config{})
	defer done()

	err := cmdq.Register(c, func(ctx context.Context, cmd SendGreeting, run *cmdq.Attempt) error {
		fmt.Printf("hello, %s (attempt %d)\n", cmd.Name, run.Number())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil { // storage problems show here, before any work
		log.Fatal(err)
	}

	res, err := c.Issue(ctx, SendGreeting{Name: "Ada"})
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.Wait(ctx, res.ID) // the in-process processor ends the wait at once
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Type, s.State, "after", s.Attempts, "attempt(s)")
	// Output:
	// hello, Ada (attempt 1)
	// greetings.send completed after 1 attempt(s)
}

// Issuing with an ID is idempotent: the same ID and parameters again return
// the existing command; other parameters under that ID are refused.
func ExampleClient_Issue() {
	ctx := context.Background()
	c, done := exampleClient(cmdq.Config{})
	defer done()

	id := "0b9e1c52-5a0f-4c8e-9d61-3f2a7c4b8e10" // e.g. derived from the web request
	first, err := c.Issue(ctx, SendGreeting{Name: "Ada"}, cmdq.CommandID(id))
	if err != nil {
		log.Fatal(err)
	}
	again, err := c.Issue(ctx, SendGreeting{Name: "Ada"}, cmdq.CommandID(id))
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Issue(ctx, SendGreeting{Name: "Bob"}, cmdq.CommandID(id))
	fmt.Println(first.ID, first.Existing)
	fmt.Println(again.ID, again.Existing)
	fmt.Println(errors.Is(err, cmdq.ErrIDConflict))
	// Output:
	// 0b9e1c52-5a0f-4c8e-9d61-3f2a7c4b8e10 false
	// 0b9e1c52-5a0f-4c8e-9d61-3f2a7c4b8e10 true
	// true
}

// ChargeCard fails permanently while the payment gateway is not
// configured.
type ChargeCard struct {
	OrderID string `json:"orderId"`
	Cents   int64  `json:"cents"`
}

func (ChargeCard) CommandType() string { return "payments.charge-card" }

// A permanent error poisons the command at once (no retries); after the
// cause is fixed, an operator requeues it and it runs again, woken at once.
func ExampleClient_Requeue() {
	ctx := context.Background()
	c, done := exampleClient(cmdq.Config{})
	defer done()

	var configured atomic.Bool
	err := cmdq.Register(c, func(ctx context.Context, cmd ChargeCard, run *cmdq.Attempt) error {
		if !configured.Load() {
			return cmdq.Permanent(errors.New("payment gateway key missing"))
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := c.Issue(ctx, ChargeCard{OrderID: "o-17", Cents: 1250}, cmdq.CommandID("7d3c2b1a-0f9e-4d8c-b7a6-5e4d3c2b1a09"))
	if err != nil {
		log.Fatal(err)
	}
	s, _ := c.Wait(ctx, res.ID)
	entry, _ := c.GetPoison(ctx, res.ID)
	fmt.Println(s.State, "-", entry.Reason+":", entry.LastError)

	configured.Store(true) // the cause is fixed
	if err := c.Requeue(ctx, res.ID, "ops@example.com"); err != nil {
		log.Fatal(err)
	}
	s, _ = c.Wait(ctx, res.ID)
	fmt.Println(s.State, "after", s.Attempts, "attempt(s) since the requeue")
	evs, _ := c.Events(ctx, res.ID)
	for _, e := range evs {
		fmt.Println(strings.TrimSpace(string(e.Kind) + " " + e.By))
	}
	// Output:
	// poisoned - permanent error: permanent: payment gateway key missing
	// completed after 1 attempt(s) since the requeue
	// created
	// started
	// failed
	// poisoned
	// requeued ops@example.com
	// started
	// completed
}

// ConvertFiles converts a batch of files, one step per file.
type ConvertFiles struct {
	Files []string `json:"files"`
}

func (ConvertFiles) CommandType() string { return "files.convert" }

// A multi-step handler records each step before going on; when an attempt
// fails, the retry resumes after the last recorded step.
func ExampleRegister_steps() {
	ctx := context.Background()
	c, done := exampleClient(cmdq.Config{})
	defer done()

	var failed atomic.Bool // the converter crashes once on b.doc
	err := cmdq.RegisterWith(c, func(ctx context.Context, cmd ConvertFiles, run *cmdq.Attempt) error {
		for i := run.LastStep(); i < len(cmd.Files); i++ {
			if cmd.Files[i] == "b.doc" && !failed.Swap(true) {
				return fmt.Errorf("converter crashed on %s", cmd.Files[i])
			}
			fmt.Printf("attempt %d: converted %s\n", run.Number(), cmd.Files[i])
			if err := run.CompleteStep(ctx, i+1, cmd.Files[i]); err != nil {
				return err
			}
		}
		return nil
	}, cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: 50 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 1}})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := c.Issue(ctx, ConvertFiles{Files: []string{"a.doc", "b.doc", "c.doc"}})
	if err != nil {
		log.Fatal(err)
	}
	s, _ := c.Wait(ctx, res.ID)
	fmt.Println(s.State, "with", s.Step, "steps after", s.Attempts, "attempts")
	// Output:
	// attempt 1: converted a.doc
	// attempt 2: converted b.doc
	// attempt 2: converted c.doc
	// completed with 3 steps after 2 attempts
}

// Under a scheduler that starts a job every minute, RunFor processes what
// is there and returns before its time is up, leaving no message leased.
func ExampleClient_RunFor() {
	ctx := context.Background()
	// Under a scheduler that starts this program every minute, use
	// RunFor(ctx, 55*time.Second). Until it has timed a handler, RunFor
	// keeps a margin of HandlerDurationEstimate × Tolerance before its end
	// (1.5 s by default); these handlers take microseconds.
	c, done := exampleClient(cmdq.Config{HandlerDurationEstimate: 10 * time.Millisecond})
	defer done()

	err := cmdq.Register(c, func(ctx context.Context, cmd SendGreeting, run *cmdq.Attempt) error { return nil })
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"Ada", "Grace", "Edsger"} {
		if _, err := c.Issue(ctx, SendGreeting{Name: name}); err != nil {
			log.Fatal(err)
		}
	}
	sum, err := c.RunFor(ctx, 3*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// Whether it stopped because the queue stayed empty (StopIdle) or
	// because the next handler might not finish in time (StopDeadline)
	// depends on the machine's load; either way it ended on its own.
	fmt.Println("completed", sum.Completed, "- ended on its own:", sum.StoppedBecause != cmdq.StopCancelled)
	// Output:
	// completed 3 - ended on its own: true
}

// ResizeImage declares its queue and defaults: every process routes it to
// the "images" queue without any wiring, and a handler registered for it
// takes these options as its defaults.
type ResizeImage struct {
	URL string `json:"url"`
}

func (ResizeImage) CommandType() string { return "images.resize" }

func (ResizeImage) CommandOptions() cmdq.CommandOptions {
	return cmdq.CommandOptions{Queue: "images", Lease: 2 * time.Minute, PoisonCeiling: 3}
}

// A process that only issues (a web front end) routes a command type that
// declares its queue; a worker elsewhere registers its handler.
func ExampleCommandWithOptions() {
	ctx := context.Background()
	front, done := exampleClient(cmdq.Config{})
	defer done()

	res, err := front.Issue(ctx, ResizeImage{URL: "https://example.com/a.png"})
	if err != nil {
		log.Fatal(err)
	}
	n, _ := front.QueueDepth(ctx, "images")
	fmt.Println("queue", res.Queue, "holds", n)
	// Output:
	// queue images holds 1
}

// Stats counts what the processor did since the client was created: live
// while it runs (a dashboard of an embedding program), final after Stop.
func ExampleClient_Stats() {
	ctx := context.Background()
	c, done := exampleClient(cmdq.Config{Concurrency: 4})
	defer done()

	if err := cmdq.Register(c, func(context.Context, SendGreeting, *cmdq.Attempt) error { return nil }); err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	results, err := c.IssueMany(ctx, SendGreeting{Name: "a"}, SendGreeting{Name: "b"})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		if _, err := c.Wait(ctx, r.ID); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("running:", c.Stats().Running)
	if err := c.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	st := c.Stats()
	fmt.Println("running:", st.Running, "- completed:", st.Completed, "- in flight:", st.InFlight)
	// Output:
	// running: true
	// running: false - completed: 2 - in flight: 0
}

// errRateLimited is what a rate-limited downstream answers.
var errRateLimited = errors.New("rate limited")

// A handler whose downstream answers "429, retry after 20 ms" defers the
// command with RetryAfter: it is retried after that delay, recorded as a
// deferred event, and the attempt does not count toward its poison
// ceiling. errors.Is and IsRetryAfter see through the wrapper.
func ExampleRetryAfter() {
	ctx := context.Background()
	c, done := exampleClient(cmdq.Config{})
	defer done()

	var calls atomic.Int32
	if err := cmdq.Register(c, func(ctx context.Context, g SendGreeting, a *cmdq.Attempt) error {
		if calls.Add(1) == 1 {
			return cmdq.RetryAfter(20*time.Millisecond, errRateLimited) // say, a 429 with Retry-After
		}
		return nil
	}); err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := c.Issue(ctx, SendGreeting{Name: "Ada"})
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.Wait(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	evs, err := c.Events(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range evs {
		if e.Kind == cmdq.EventDeferred {
			fmt.Printf("%s: %s, due %s later\n", e.Kind, e.Error, e.RunAt.Sub(e.Time))
		}
	}
	fmt.Printf("%s after %d attempts, %d of them deferred\n", st.State, st.Attempts, st.Deferrals)

	err = cmdq.RetryAfter(time.Minute, errRateLimited)
	d, ok := cmdq.IsRetryAfter(err)
	fmt.Println(errors.Is(err, errRateLimited), d, ok)
	// Output:
	// deferred: retry after 20ms: rate limited, due 20ms later
	// completed after 2 attempts, 1 of them deferred
	// true 1m0s true
}
