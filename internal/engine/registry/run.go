package registry

import (
	"context"
	"fmt"
	"sync"

	"github.com/cmdq-dev/cmdq/cmdqtype"
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
}

// Run is one attempt of one command, handed to the handler.
type Run struct {
	info RunInfo
	mu   sync.Mutex
	last int
}

// NewRun returns a Run (used by the processor, and by tests calling handlers
// directly).
func NewRun(info RunInfo) *Run { return &Run{info: info, last: info.LastStep} }

// ID returns the command ID.
func (r *Run) ID() string { return r.info.ID }

// Type returns the command type.
func (r *Run) Type() string { return r.info.Type }

// Attempt returns the attempt number (1 for the first).
func (r *Run) Attempt() int { return r.info.Attempt }

// LastStep returns the last completed step (0 = none): a rerun skips steps up
// to it.
func (r *Run) LastStep() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// CompleteStep records step n (≥ 1) as completed, with an optional note,
// before it returns. Cost: one table batch.
// Steps may be recorded again (a rerun repeating a step) but LastStep never
// goes down. A Record failure is returned and the step is not counted.
func (r *Run) CompleteStep(ctx context.Context, n int, note string) error {
	if n < 1 {
		return fmt.Errorf("%w: step %d; steps are numbered from 1", cmdqtype.ErrInvalidStep, n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.info.Record != nil {
		if err := r.info.Record(ctx, n, note); err != nil {
			return fmt.Errorf("handlers: record step %d of %s: %w", n, r.info.ID, err)
		}
	}
	if n > r.last {
		r.last = n
	}
	return nil
}
