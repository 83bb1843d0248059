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
// and the completion is counted once. So too for a first delivery that
// starts and completes in one write holding both events in the command row
// (no event row: layout.StartedAtProp), found by the row's write ID. Azure
// only: the embedded store commits in-process and has no answer to lose.
func TestRetriedWriteNotDuplicated(t *testing.T) {
	t.Parallel()
	batch := func(body string) faultproxy.Match {
		return faultproxy.Match{Method: "POST", Path: "$batch", Body: body}
	}
	kind := func(k model.EventKind) string { return `"Kind":"` + string(k) + `"` }
	for _, tc := range []struct {
		name  string
		lose  []string // bodies of the batches whose answers are lost
		steps int
		want  []model.EventKind
	}{
		{"step and completion rows", []string{kind(model.EventStepCompleted), kind(model.EventCompleted)}, 1,
			[]model.EventKind{model.EventCreated, model.EventStarted, model.EventStepCompleted, model.EventCompleted}},
		{"completion in the command row", []string{`"StartedSeq"`}, 0,
			[]model.EventKind{model.EventCreated, model.EventStarted, model.EventCompleted}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, through, px := azureBehind(t)
			var lost []*faultproxy.Rule
			for _, body := range tc.lose {
				lost = append(lost, px.Add(batch(body), faultproxy.LoseAnswer, 1))
			}
			reg := registry.NewRegistry()
			var runs atomic.Int64
			register(t, reg, func(ctx context.Context, c stepCmd, run *registry.Attempt) error {
				runs.Add(1)
				if tc.steps == 0 {
					return nil
				}
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
			hits := make([]int, len(lost))
			for i, r := range lost {
				hits[i] = int(r.Hits())
			}
			if evs := e.events(id); !equalKinds(kinds(evs), tc.want...) {
				t.Fatalf("events %v, want %v once each (answers lost: %v)", kinds(evs), tc.want, hits)
			}
			for i, h := range hits {
				if h != 1 {
					t.Fatalf("batch %s lost %d answers, want 1", tc.lose[i], h)
				}
			}
			if runs.Load() != 1 || m.completed.Load() != 1 || st.Step != tc.steps || st.Attempts != 1 {
				t.Fatalf("handler ran %d times, %d completions counted, status %+v", runs.Load(), m.completed.Load(), st)
			}
		})
	}
}
