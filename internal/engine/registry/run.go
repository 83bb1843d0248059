package registry

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// RunInfo is what the processor tells a Run.
type RunInfo struct {
	// ID is the command ID.
	ID string
	// Type is the command type.
	Type string
	// Attempt is this attempt's number (the message's dequeue count, from 1).
	Attempt int
	// LastStep is the last completed step recorded before this attempt (0 = none).
	LastStep int
	// Record persists a completed step (a step_completed event) before
	// CompleteStep returns. nil: steps are only kept in memory.
	Record func(ctx context.Context, step int, note string) error
	// Queue is the command's logical queue.
	Queue string
	// CorrelationID is the command's correlation ID ("" = none).
	CorrelationID string
	// TraceParent and TraceState are the W3C trace context the command was
	// issued in ("" = none); TraceID is its trace ID.
	TraceParent, TraceState, TraceID string
}

// Attempt is one attempt of one command, handed to the handler.
type Attempt struct {
	info RunInfo
	// stepMu serialises CompleteStep's calls, held while a step is
	// written (RunInfo.Record). mu guards the fields below it and is a
	// leaf lock: nothing is called while it is held, so the processor may
	// read them (TraceID, for a log line) while it holds its own locks,
	// whatever the handler is doing (a CompleteStep under way holds
	// stepMu, and the processor's attempt lock inside Record).
	stepMu sync.Mutex
	mu     sync.Mutex
	last   int

	output    []byte   // SetOutput's JSON
	outputErr error    // SetOutput's last failure (the attempt fails with it)
	traceID   [16]byte // the attempt span's trace ID (SetTraceID); zero: none
	onEnd     []func(Outcome)
	ended     bool
}

// The outcomes of an attempt (Outcome.Kind): what the processor recorded
// once the handler (and its middleware) returned.
const (
	// OutcomeCompleted: the completion is stored.
	OutcomeCompleted = "completed"
	// OutcomeRetrying: the failure is stored; the command is retried after
	// its retry delay.
	OutcomeRetrying = "retrying"
	// OutcomeDeferred: the deferral (RetryAfter) is stored; the command is
	// retried after its delay, and the attempt did not count toward the
	// poison ceiling.
	OutcomeDeferred = "deferred"
	// OutcomePoisoned: the command moved to the poison table (a permanent
	// error, undecodable params, or the last attempt the ceiling allows).
	OutcomePoisoned = "poisoned"
	// OutcomeLeaseLost: the lease ended while the handler ran (lost, or
	// not renewed): another delivery runs the command.
	OutcomeLeaseLost = "lease_lost"
	// OutcomeCancelled: the command was cancelled while the handler ran.
	OutcomeCancelled = "cancelled"
	// OutcomeSuperseded: the command finished elsewhere, or another
	// delivery took it over, while the handler ran: nothing was recorded.
	OutcomeSuperseded = "superseded"
	// OutcomeInterrupted: the processor stopped (drain timeout, RunFor's
	// end) while the handler ran: the message is released or reappears.
	OutcomeInterrupted = "interrupted"
	// OutcomeUnrecorded: storage failed while the outcome was written:
	// the message reappears when its lease ends and the command runs
	// again.
	OutcomeUnrecorded = "unrecorded"
)

// Outcome is what became of an attempt (Run.OnEnd).
type Outcome struct {
	// Kind is one of the Outcome* constants.
	Kind string
	// Err is the attempt's error (the handler's, or what failed it: an
	// output too large, a write's failure); nil for a completion.
	Err error
}

// OnEnd registers f to be called once the attempt's outcome is recorded
// (or known not to be): after every middleware and the handler returned,
// on the processor's goroutine. Middleware that started something for the
// attempt (a trace span) ends it there. Callbacks run in the order they
// were registered; after End they run at once.
func (r *Attempt) OnEnd(f func(Outcome)) {
	r.mu.Lock()
	if !r.ended {
		r.onEnd = append(r.onEnd, f)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	f(Outcome{})
}

// End reports the attempt's outcome to the OnEnd callbacks (once; later
// calls do nothing). The processor calls it for every attempt whose
// handler it invoked.
func (r *Attempt) End(o Outcome) {
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		return
	}
	r.ended = true
	fs := r.onEnd
	r.onEnd = nil
	r.mu.Unlock()
	for _, f := range fs {
		f(o)
	}
}

// Queue returns the command's logical queue.
func (r *Attempt) Queue() string { return r.info.Queue }

// CorrelationID returns the command's correlation ID ("" = none).
func (r *Attempt) CorrelationID() string { return r.info.CorrelationID }

// Trace returns the W3C trace context the command was issued in ("" =
// none).
func (r *Attempt) Trace() (traceParent, traceState string) {
	return r.info.TraceParent, r.info.TraceState
}

// SetTraceID records the trace ID of the attempt's span (tracing
// middleware), for the processor's log lines about the attempt.
func (r *Attempt) SetTraceID(id [16]byte) {
	r.mu.Lock()
	r.traceID = id
	r.mu.Unlock()
}

// TraceID returns the trace ID of the attempt's span (SetTraceID), else
// the issuing trace's (RunInfo.TraceID), else "".
func (r *Attempt) TraceID() string {
	r.mu.Lock()
	id := r.traceID
	r.mu.Unlock()
	if id != ([16]byte{}) {
		return hex.EncodeToString(id[:])
	}
	return r.info.TraceID
}

// SetOutput records v's JSON encoding as the attempt's output, stored with
// the command's completion (at most model.MaxOutputBytes of compact
// JSON). Called again, the last value wins. An error (model.ErrInvalidOutput,
// model.ErrOutputTooLarge) is returned and remembered: the attempt then
// fails with it even if the handler returns nil; a later successful call
// clears it.
func (r *Attempt) SetOutput(v any) error {
	b, err := json.Marshal(v)
	if err == nil && !json.Valid(b) {
		err = fmt.Errorf("not valid JSON")
	}
	if err != nil {
		err = fmt.Errorf("%w: command %s (%s): %v; record a value json.Marshal accepts", model.ErrInvalidOutput, r.info.ID, r.info.Type, err)
	} else {
		var buf bytes.Buffer
		_ = json.Compact(&buf, b) // valid: checked above
		b = buf.Bytes()
		if len(b) > model.MaxOutputBytes {
			err = fmt.Errorf("%w: command %s (%s) recorded %d bytes of JSON output; the limit is %d bytes (cmdq.MaxOutputBytes): record a reference (an ID, a URL) to a larger result instead", model.ErrOutputTooLarge, r.info.ID, r.info.Type, len(b), model.MaxOutputBytes)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.outputErr = err
		return err
	}
	r.output, r.outputErr = b, nil
	return nil
}

// Output returns the recorded output (nil: none) and the error of the last
// SetOutput that failed since the last that succeeded.
func (r *Attempt) Output() ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.output, r.outputErr
}

// NewRun returns a Run (used by the processor, and by tests calling handlers
// directly).
func NewRun(info RunInfo) *Attempt { return &Attempt{info: info, last: info.LastStep} }

// ID returns the command ID.
func (r *Attempt) ID() string { return r.info.ID }

// Type returns the command type.
func (r *Attempt) Type() string { return r.info.Type }

// Attempt returns the attempt number (1 for the first).
func (r *Attempt) Number() int { return r.info.Attempt }

// LastStep returns the last completed step (0 = none): a rerun skips steps up
// to it.
func (r *Attempt) LastStep() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// CompleteStep records step n (≥ 1) as completed, with an optional note,
// before it returns. Cost: one table batch.
// Steps may be recorded again (a rerun repeating a step) but LastStep never
// goes down. A Record failure is returned and the step is not counted.
func (r *Attempt) CompleteStep(ctx context.Context, n int, note string) error {
	if n < 1 {
		return fmt.Errorf("%w: step %d; steps are numbered from 1", model.ErrInvalidStep, n)
	}
	r.stepMu.Lock()
	defer r.stepMu.Unlock()
	if r.info.Record != nil {
		if err := r.info.Record(ctx, n, note); err != nil {
			return fmt.Errorf("handlers: record step %d of %s: %w", n, r.info.ID, err)
		}
	}
	r.mu.Lock()
	if n > r.last {
		r.last = n
	}
	r.mu.Unlock()
	return nil
}
