package processor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
)

// TestRetriedWriteNotDuplicated: Azurite applies a batch but the answer is
// lost (the connection reset after the request was served); the driver's
// transport retry then conflicts with the batch's own effect. The processor
// must recognise its own write instead of appending the events again: the
// history of a command whose step batch and completed batch both lost their
// answers reads created, started, step_completed, completed — once each —
// and the completion is counted once. Azure only: the embedded store
// commits in-process and has no answer to lose.
func TestRetriedWriteNotDuplicated(t *testing.T) {
	t.Parallel()
	e, through, px := azureBehind(t)
	batch := func(kind model.EventKind) faultproxy.Match {
		return faultproxy.Match{Method: "POST", Path: "$batch", Body: `"Kind":"` + string(kind) + `"`}
	}
	step := px.Add(batch(model.EventStepCompleted), faultproxy.LoseAnswer, 1)
	done := px.Add(batch(model.EventCompleted), faultproxy.LoseAnswer, 1)
	reg := registry.NewRegistry()
	var runs atomic.Int64
	register(t, reg, func(ctx context.Context, c stepCmd, run *registry.Attempt) error {
		runs.Add(1)
		return run.CompleteStep(ctx, 1, "one")
	}, registry.Options{})
	m := &counts{}
	cfg := e.cfg()
	cfg.Observer = m
	p := newProc(t, through, reg, cfg)
	start(t, p)
	id := e.issue(e.issuer(p.Notify), stepCmd{})
	st := e.waitState(id, model.StateCompleted, 15*time.Second)
	e.waitQueueEmpty("commands", 10*time.Second)
	evs := e.events(id)
	if !equalKinds(kinds(evs), model.EventCreated, model.EventStarted, model.EventStepCompleted, model.EventCompleted) {
		t.Fatalf("events %v, want each once (the answers of %d step and %d completed batches were lost)", kinds(evs), step.Hits(), done.Hits())
	}
	if step.Hits() != 1 || done.Hits() != 1 || runs.Load() != 1 || m.completed.Load() != 1 || st.Step != 1 || st.Attempts != 1 {
		t.Fatalf("lost answers %d+%d, handler ran %d times, %d completions counted, status %+v", step.Hits(), done.Hits(), runs.Load(), m.completed.Load(), st)
	}
}
