package cmdqtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// ErrLeaseLost is the cause (context.Cause) of a handler's context
// cancelled by LoseLeaseAfterStep: as when a processor's lease renewal
// finds the message taken, another delivery may run the command.
var ErrLeaseLost = errors.New("cmdqtest: the message's lease was lost; another delivery may run the command")

// ErrWriteFailed is wrapped by the errors of the writes FailWrites makes
// fail.
var ErrWriteFailed = errors.New("cmdqtest: a storage write failed")

// Step is a step a handler recorded (Attempt.CompleteStep).
type Step struct {
	// N is the step's number.
	N int
	// Note is its note.
	Note string
	// Delivery is the delivery that recorded it (from 1).
	Delivery int
}

// Outcome is what one delivery of Work's command did.
type Outcome struct {
	// Delivery numbers the delivery (from 1, in the order they started).
	Delivery int
	// Attempt is the attempt's number the handler saw (Attempt.Number).
	Attempt int
	// Err is what the handler returned (a panic: an error "panic: ...",
	// with Panicked set).
	Err error
	// Panicked says the handler panicked.
	Panicked bool
	// Permanent says Err is Permanent: the command would be poisoned.
	Permanent bool
	// Deferred says Err is RetryAfter, with its delay in RetryAfter.
	Deferred   bool
	RetryAfter time.Duration
	// Output is what SetOutput recorded last (nil: none), and OutputErr
	// the error of a SetOutput that failed after it (the attempt fails).
	Output    json.RawMessage
	OutputErr error
	// Steps are the steps this delivery recorded, in order (a step whose
	// write failed is not in it).
	Steps []Step
	// LastStep is the attempt's LastStep when the handler returned.
	LastStep int
	// Cause is context.Cause of the handler's context when it returned:
	// nil unless a fault cancelled it (ErrLeaseLost, or an error wrapping
	// cmdq.ErrCancelled).
	Cause error
	// Recorded says whether a processor would have recorded this
	// delivery's outcome: false when its lease was lost, it was
	// cancelled, or its writes failed (FailWrites).
	Recorded bool
}

// Result is what Work's handler did: the outcome of its last delivery
// (the one whose outcome counts), every delivery's and every step.
type Result struct {
	Outcome
	// Deliveries are every delivery's outcomes, in the order they
	// started: one, or two under a fault that delivers the command again.
	Deliveries []Outcome
	// Steps are every step recorded, by every delivery, in order.
	Steps []Step
}

// WorkOption changes how Work runs its handler: the command's state
// before it, or a fault on purpose.
type WorkOption func(*work)

type work struct {
	id         string
	attempt    int
	lastStep   int
	redeliver  bool // a second delivery after the first
	concurrent bool // two deliveries at once
	loseAt     int  // LoseLeaseAfterStep: step after which the lease is lost (-1: never)
	cancelAt   int  // CancelAfterStep (-1: never)
	failWrites bool
}

// CommandID sets the command's ID. Default: a new one (cmdq.NewID).
func CommandID(id string) WorkOption { return func(w *work) { w.id = id } }

// AttemptNumber sets the first delivery's attempt number
// (Attempt.Number). Default 1.
func AttemptNumber(n int) WorkOption { return func(w *work) { w.attempt = n } }

// LastStep sets the steps completed before the first delivery
// (Attempt.LastStep), as after an earlier attempt. Default 0.
func LastStep(n int) WorkOption { return func(w *work) { w.lastStep = n } }

// Redeliver delivers the command a second time after the first delivery
// returned, as if the first one's outcome was never recorded (its
// process died, or its completion's write failed): cmdq delivers a
// command at least once. The second delivery sees the steps the first
// recorded (Attempt.LastStep) and the next attempt number. An
// idempotent handler does each effect once over both.
func Redeliver() WorkOption { return func(w *work) { w.redeliver = true } }

// DeliverConcurrently runs two deliveries of the command at once, as when
// a lease ends while the handler still runs and another processor takes
// the message: both start with the same steps (none, unless LastStep).
// An idempotent handler does each effect once over both.
func DeliverConcurrently() WorkOption { return func(w *work) { w.concurrent = true } }

// LoseLeaseAfterStep loses the first delivery's lease once it has
// recorded step n (0: as it starts): its context is cancelled with cause
// ErrLeaseLost, its outcome is not recorded, and the command is
// delivered again afterwards, with the steps recorded so far. A handler
// that stops on ctx.Done and resumes from LastStep does each effect once.
func LoseLeaseAfterStep(n int) WorkOption { return func(w *work) { w.loseAt = n } }

// CancelAfterStep cancels the command once the delivery has recorded
// step n (0: as it starts), as Client.Cancel does: the context is
// cancelled with a cause wrapping cmdq.ErrCancelled and
// cmdq.ErrSuperseded, later CompleteStep calls fail with such an error,
// and nothing more of the attempt is recorded. A handler that stops on
// ctx.Done does no effect after it.
func CancelAfterStep(n int) WorkOption { return func(w *work) { w.cancelAt = n } }

// FailWrites makes the first delivery's writes fail: every CompleteStep
// returns an error wrapping ErrWriteFailed (the step is not recorded),
// and its outcome and output are not recorded, so the command is
// delivered again (writes working) with the steps recorded before. A
// handler that returns CompleteStep's error, or repeats only what it
// could not record, does each effect once.
func FailWrites() WorkOption { return func(w *work) { w.failWrites = true } }

// command is the state Work's deliveries share: the command's recorded
// steps.
type command struct {
	mu    sync.Mutex
	last  int
	steps []Step
}

// Work runs handler h on cmd once, as a processor would, without a store
// or a Client: cmd goes through its JSON encoding (the handler gets what
// a processor would decode), the handler gets a real *cmdq.Attempt
// (steps, output) and a context bounded by Timeout, and Work returns what
// it did. Client and handler middleware are not applied. Options set the
// command's state (CommandID, AttemptNumber, LastStep) or a fault on
// purpose (Redeliver, DeliverConcurrently, LoseLeaseAfterStep,
// CancelAfterStep, FailWrites): with them, check that the handler is
// idempotent (its effects happen once). A handler still running after
// Timeout fails the test.
func Work[T cmdq.Command](t testing.TB, h cmdq.Handler[T], cmd T, opts ...WorkOption) Result {
	if t != nil {
		t.Helper()
	}
	w := work{attempt: 1, loseAt: -1, cancelAt: -1}
	for _, o := range opts {
		o(&w)
	}
	if w.id == "" {
		w.id = cmdq.NewID()
	}
	params, err := json.Marshal(cmd)
	if err != nil {
		fail(t, "cmdqtest.Work: encode the command: %v", err)
	}
	cmdType := cmd.CommandType()
	state := &command{last: w.lastStep}
	invoke := func(ctx context.Context, a *cmdq.Attempt) (panicked bool, err error) {
		defer func() {
			if r := recover(); r != nil {
				panicked, err = true, fmt.Errorf("panic: %v", r)
			}
		}()
		var v T
		if err := json.Unmarshal(params, &v); err != nil {
			return false, cmdq.Permanent(fmt.Errorf("cmdqtest.Work: decode the command's parameters %s: %w", params, err))
		}
		return false, h(ctx, v, a)
	}
	deliver := func(n int, faulty bool) Outcome {
		return w.deliver(t, invoke, cmdType, state, n, faulty)
	}
	var res Result
	switch {
	case w.concurrent:
		outs := make([]Outcome, 2)
		var wg sync.WaitGroup
		for i := range outs {
			wg.Add(1)
			go func() { defer wg.Done(); outs[i] = deliver(i+1, i == 0) }()
		}
		wg.Wait()
		res.Deliveries = outs
	default:
		first := deliver(1, true)
		res.Deliveries = append(res.Deliveries, first)
		if w.redeliver || w.failWrites || w.loseAt >= 0 {
			res.Deliveries = append(res.Deliveries, deliver(2, false))
		}
	}
	res.Outcome = res.Deliveries[len(res.Deliveries)-1]
	state.mu.Lock()
	res.Steps = append([]Step(nil), state.steps...)
	state.mu.Unlock()
	return res
}

// fail fails the test, or panics without one.
func fail(t testing.TB, format string, args ...any) {
	if t == nil {
		panic(fmt.Sprintf(format, args...))
	}
	t.Helper()
	t.Fatalf(format, args...)
}

// deliver runs delivery n (from 1); faulty says the faults apply to it.
func (w *work) deliver(t testing.TB, invoke func(context.Context, *cmdq.Attempt) (bool, error), cmdType string, state *command, n int, faulty bool) Outcome {
	base, cancel := ctx(t)
	defer cancel()
	hctx, stop := context.WithCancelCause(base)
	defer stop(nil)
	out := Outcome{Delivery: n, Attempt: w.attempt + n - 1, Recorded: true}
	var mu sync.Mutex // guards out.Steps and over
	over := false     // cancelled: steps fail
	fault := func(cause error) {
		mu.Lock()
		over = over || errors.Is(cause, cmdq.ErrCancelled)
		out.Recorded = false
		mu.Unlock()
		stop(cause)
	}
	cancelled := fmt.Errorf("cmdqtest: the command was cancelled (CancelAfterStep): %w (%w)", cmdq.ErrCancelled, cmdq.ErrSuperseded)
	at := func(step int) {
		if !faulty {
			return
		}
		if w.loseAt == step {
			fault(ErrLeaseLost)
		}
		if w.cancelAt == step {
			fault(cancelled)
		}
	}
	state.mu.Lock()
	last := state.last
	state.mu.Unlock()
	a := cmdq.NewAttempt(cmdq.AttemptInfo{ID: w.id, Type: cmdType, Number: out.Attempt, LastStep: last,
		RecordStep: func(ctx context.Context, step int, note string) error {
			mu.Lock()
			stopped := over
			mu.Unlock()
			switch {
			case stopped:
				return fmt.Errorf("cmdqtest: step %d not recorded: %w", step, cancelled)
			case faulty && w.failWrites:
				return fmt.Errorf("cmdqtest: step %d not recorded (FailWrites): %w", step, ErrWriteFailed)
			}
			s := Step{N: step, Note: note, Delivery: n}
			state.mu.Lock()
			state.steps = append(state.steps, s)
			state.last = max(state.last, step)
			state.mu.Unlock()
			mu.Lock()
			out.Steps = append(out.Steps, s)
			mu.Unlock()
			at(step)
			return nil
		}})
	if faulty && w.failWrites {
		out.Recorded = false
	}
	at(0)
	out.Panicked, out.Err = invoke(hctx, a)
	out.Cause = context.Cause(hctx)
	if base.Err() != nil && out.Cause != nil && errors.Is(out.Cause, base.Err()) {
		if t == nil {
			panic(fmt.Sprintf("cmdqtest.Work: delivery %d of %s %s ran past Timeout (%s)", n, cmdType, w.id, Timeout))
		}
		t.Errorf("cmdqtest.Work: delivery %d of %s %s ran past Timeout (%s)", n, cmdType, w.id, Timeout) // maybe not the test's goroutine: no Fatal
	}
	out.Output, out.OutputErr = a.Output()
	out.LastStep = a.LastStep()
	out.Permanent = cmdq.IsPermanent(out.Err)
	if !out.Permanent {
		out.RetryAfter, out.Deferred = cmdq.IsRetryAfter(out.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	out.Steps = append([]Step(nil), out.Steps...)
	return out
}
