package cmdq

import (
	"cmp"
	"context"
	"encoding/json"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

// AttemptInfo describes an Attempt made outside a Client (NewAttempt).
type AttemptInfo struct {
	// ID is the command ID. Defaults to a new one (NewID).
	ID string
	// Type is the command type. Defaults to "".
	Type string
	// Queue is the command's logical queue. Defaults to DefaultQueue.
	Queue string
	// Number is the attempt's number. Defaults to 1.
	Number int
	// LastStep is the last step completed before this attempt (0 = none).
	LastStep int
	// CorrelationID is the command's correlation ID. Defaults to "".
	CorrelationID string
	// RecordStep, when set, records a completed step: CompleteStep calls
	// it after checking n, returns its error, and counts the step (for
	// LastStep) only when it returns nil. Defaults to nil: steps are
	// counted in memory only.
	RecordStep func(ctx context.Context, n int, note string) error
}

// NewAttempt returns an Attempt that belongs to no Client: for calling a
// handler directly, as cmdqtest.Work does. Its steps go to
// info.RecordStep; Output returns what SetOutput recorded.
func NewAttempt(info AttemptInfo) *Attempt {
	return &Attempt{r: registry.NewRun(registry.RunInfo{
		ID: cmp.Or(info.ID, NewID()), Type: info.Type, Queue: cmp.Or(info.Queue, model.DefaultQueue),
		Attempt: max(info.Number, 1), LastStep: info.LastStep, CorrelationID: info.CorrelationID,
		Record: info.RecordStep,
	})}
}

// Output returns the output recorded by SetOutput so far (nil: none) and
// the error of the last SetOutput that failed since the last that
// succeeded (the attempt fails with it).
func (a *Attempt) Output() (json.RawMessage, error) {
	b, err := a.r.Output()
	return json.RawMessage(b), err
}
