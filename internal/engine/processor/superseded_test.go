package processor_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

// TestSupersededAttemptWritesNothing: while a handler runs (its `started`
// not written yet: the lazy write), another delivery completes the command.
// The attempt learns it at its next write — here the lazy `started` write
// at the first lease renewal, which conflicts and finds the command final —
// and from then on it is over: the handler's context is cancelled with a
// cause wrapping registry.ErrSuperseded, CompleteStep returns an error
// wrapping it, nothing more is written whatever the handler returns (no
// second completed, no failed turning the command back to retrying), and
// the message is deleted. Before the fix the lazy write swallowed the news
// and the attempt's outcome was appended on top of the final record.
func TestSupersededAttemptWritesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		then func(ctx context.Context, run *registry.Attempt) error
	}{
		{"handler returns nil", func(ctx context.Context, run *registry.Attempt) error { return nil }},
		{"handler returns its error", func(ctx context.Context, run *registry.Attempt) error { return ctx.Err() }},
		{"handler records a step", func(ctx context.Context, run *registry.Attempt) error {
			err := run.CompleteStep(context.WithoutCancel(ctx), 1, "after the end")
			if !errors.Is(err, model.ErrSuperseded) {
				return registry.Permanent(fmt.Errorf("CompleteStep after the command completed elsewhere: %v, want ErrSuperseded", err))
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eachDriver(t, func(t *testing.T, e *env) {
				reg := registry.NewRegistry()
				running, elsewhere := make(chan struct{}), make(chan struct{})
				var cause atomic.Value
				register(t, reg, func(ctx context.Context, c stepCmd, run *registry.Attempt) error {
					close(running)
					<-elsewhere
					awaitCancel(ctx, &cause)
					return tc.then(ctx, run)
				}, registry.Options{Lease: 10 * time.Second, Retry: fastRetry})
				m := &counts{}
				cfg := e.cfg()
				cfg.Observer = m
				cfg.StartedWriteDelay = time.Minute // started is written at the first renewal (5 s: the test's load and batch come first on a loaded Azurite)
				p := newProc(t, e.store, reg, cfg)
				start(t, p)
				id := e.issue(e.issuer(p.Notify), stepCmd{})
				<-running
				completeElsewhere(t, e, id, "before the first renewal")
				close(elsewhere)
				wantOnlyOthersCompletion(t, e, id, m, &cause)
			})
		})
	}
}

// TestStepWriteFindsCommandFinal: the handler records a step after
// another delivery completed the command, before this attempt knows it
// (its started is not written: that waits for the first renewal, 5 s
// in, and the step comes at once). The step's write conflicts, the reload
// shows the command final, and the attempt is superseded from inside
// CompleteStep: it returns an error wrapping ErrSuperseded, the handler's
// context is cancelled with that cause, nothing more is written, and the
// message is deleted. Before the fix CompleteStep never returned: it held
// the Run's lock while the step was written, and the log line announcing
// the supersession read the attempt's trace ID through that same lock.
func TestStepWriteFindsCommandFinal(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		running, elsewhere := make(chan struct{}), make(chan struct{})
		stepErr := make(chan error, 1)
		var cause atomic.Value
		register(t, reg, func(ctx context.Context, c stepCmd, run *registry.Attempt) error {
			close(running)
			<-elsewhere
			stepErr <- run.CompleteStep(ctx, 1, "after the end")
			awaitCancel(ctx, &cause)
			return nil
		}, registry.Options{Lease: 10 * time.Second, Retry: fastRetry})
		m := &counts{}
		cfg := e.cfg()
		cfg.Observer = m
		cfg.StartedWriteDelay = time.Minute // started is due at the first renewal (5 s), long after the step
		p := newProc(t, e.store, reg, cfg)
		start(t, p)
		id := e.issue(e.issuer(p.Notify), stepCmd{})
		<-running
		completeElsewhere(t, e, id, "before the step")
		close(elsewhere)
		select {
		case err := <-stepErr:
			if !errors.Is(err, model.ErrSuperseded) {
				t.Fatalf("CompleteStep on a command completed elsewhere: %v, want an error wrapping ErrSuperseded", err)
			}
		case <-time.After(20 * time.Second): // a bound, not a wait for an event
			t.Fatal("CompleteStep on a command completed elsewhere did not return within 20s")
		}
		wantOnlyOthersCompletion(t, e, id, m, &cause)
	})
}

// awaitCancel waits for the handler's ctx to end and stores its cause in
// *cause (an error saying so if it did not end within 20 s: a bound, not
// a wait for an event).
func awaitCancel(ctx context.Context, cause *atomic.Value) {
	select {
	case <-ctx.Done():
		cause.Store(context.Cause(ctx))
	case <-time.After(20 * time.Second):
		cause.Store(errors.New("the handler's context was not cancelled within 20s"))
	}
}

// completeElsewhere plays another delivery completing command id while
// this processor's attempt runs: it checks that the attempt's started is
// not written yet (premise: before what), then appends the other
// delivery's started and completed.
func completeElsewhere(t *testing.T, e *env, id, premise string) {
	t.Helper()
	st := e.reader.Store
	rec, err := st.Load(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status.State != model.StatePending {
		t.Fatalf("the attempt's started was written %s: %+v", premise, rec.Status)
	}
	if err := st.Append(context.Background(), rec, model.Event{Kind: model.EventStarted, Attempt: 1, Worker: "other"},
		model.Event{Kind: model.EventCompleted, Attempt: 1, Worker: "other"}); err != nil {
		t.Fatal(err)
	}
}

// wantOnlyOthersCompletion checks that the superseded attempt wrote
// nothing (only the other delivery's started and completed, the command
// completed, no completion or failure counted here), that its message was
// deleted, and that the handler's context ended with a cause wrapping
// ErrSuperseded.
func wantOnlyOthersCompletion(t *testing.T, e *env, id string, m *counts, cause *atomic.Value) {
	t.Helper()
	e.waitQueueEmpty("commands", 30*time.Second)
	evs := e.events(id)
	if k := kinds(evs); !equalKinds(k, model.EventCreated, model.EventStarted, model.EventCompleted) || evs[2].Worker != "other" {
		t.Fatalf("events %v (%+v), want only the other delivery's started and completed", k, evs)
	}
	got, _ := e.reader.Get(context.Background(), id)
	if got.State != model.StateCompleted || m.completed.Load() != 0 || m.failed.Load() != 0 {
		t.Fatalf("status %+v; this processor counted %d completions and %d failures, want 0", got, m.completed.Load(), m.failed.Load())
	}
	if c, _ := cause.Load().(error); !errors.Is(c, model.ErrSuperseded) {
		t.Fatalf("the handler's context ended with %v, want a cause wrapping cmdq.ErrSuperseded", c)
	}
}
