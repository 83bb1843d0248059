package processor_test

import (
	"context"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
)

// TestTypeSlotWaitHoldsNoPermit: a type with both a MaxConcurrency and a
// GlobalConcurrency takes its slot here before a permit, so messages
// waiting for the slot hold none of the permits another process's handler
// could run with. (Taking the permit first, two messages waiting here held
// two of the three permits while one handler ran.)
func TestTypeSlotWaitHoldsNoPermit(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		running := make(chan struct{}, 3)
		release := make(chan struct{})
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			running <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, registry.Options{MaxConcurrency: 1, GlobalConcurrency: 3, Lease: 10 * time.Second})
		p := newProc(t, e.store, reg, e.cfg())
		start(t, p)
		iss := e.issuer(p.Notify)
		var ids []string
		for i := range 3 {
			ids = append(ids, e.issue(iss, okCmd{N: i}))
		}
		<-running
		eventually(t, 20*time.Second, "two messages to wait for the type's slot", func() bool { return p.Parked("test.ok") == 2 })
		tb, err := e.store.Table(context.Background(), e.prefix+"commands")
		if err != nil {
			t.Fatal(err)
		}
		held, err := shared.New(tb, time.Now).ReadPermits(context.Background(), shared.Scope("test.ok", ""))
		if err != nil {
			t.Fatal(err)
		}
		if len(held) != 1 {
			t.Fatalf("%d permits held with one handler running and two messages waiting for its slot, want 1: %+v", len(held), held)
		}
		close(release)
		for _, id := range ids {
			e.waitState(id, model.StateCompleted, 20*time.Second)
		}
	})
}
