package processor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

// sleepCmd runs for MS milliseconds (or until cancelled).
type sleepCmd struct {
	MS int `json:"ms"`
}

func (sleepCmd) CommandType() string { return "test.sleep" }

func sleeper(ctx context.Context, c sleepCmd, run *registry.Attempt) error {
	select {
	case <-time.After(time.Duration(c.MS) * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// completedBy counts the completed events of ids per worker.
func (e *env) completedBy(ids []string) map[string]int {
	e.t.Helper()
	m := map[string]int{}
	for _, id := range ids {
		for _, ev := range e.events(id) {
			if ev.Kind == model.EventCompleted {
				m[ev.Worker]++
			}
		}
	}
	return m
}

// TestRunForWorksThroughWhatItHolds: a 6 s RunFor at concurrency 1 over 13
// queued 600 ms commands holds one message at a time, keeps working after
// its first handler (how many more fit depends on how long the handlers
// take on a loaded machine: at least one), and stops because of the
// deadline, not as "idle" after a second with eleven messages released.
func TestRunForWorksThroughWhatItHolds(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		register(t, reg, sleeper, registry.Options{})
		iss := e.issuer(nil)
		const n = 13
		for range n {
			e.issue(iss, sleepCmd{MS: 600})
		}
		cfg := e.cfg()
		cfg.Concurrency = 1
		p := newProc(t, e.store, reg, cfg)
		// 6 s: 13 × 600 ms do not fit, and at least two do unless the
		// machine is loaded enough that each command's dequeue, completion
		// and delete take seconds: then the run is tried again, twice as
		// long (every run must still hold nothing back), up to 24 s.
		completed := 0
		for d := 6 * time.Second; ; d *= 2 {
			sum, err := p.RunFor(context.Background(), d)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("RunFor(%s), %d × 600 ms at concurrency 1: %+v", d, n-completed, sum)
			completed += sum.Completed
			if sum.Processed != sum.Completed || sum.Released > 1 || sum.Interrupted != 0 {
				t.Fatalf("summary %+v: want nothing hoarded and released, nothing interrupted", sum)
			}
			if sum.Completed >= 2 {
				// Stopped by the deadline; or, on a longer try, because
				// it worked through all that was left.
				if sum.StoppedBecause != model.StopDeadline && (completed != n || sum.StoppedBecause != model.StopIdle) {
					t.Fatalf("summary %+v (%d of %d completed): want stopped by the deadline", sum, completed, n)
				}
				break
			}
			if sum.StoppedBecause != model.StopDeadline || d >= 24*time.Second {
				t.Fatalf("summary %+v: want stopped by the deadline after at least 2 completions", sum)
			}
		}
		q := e.queue("commands")
		peek, err := q.Peek(context.Background(), 32)
		if err != nil {
			t.Fatal(err)
		}
		if len(peek) != n-completed {
			t.Fatalf("%d messages visible after the run, want %d (nothing left leased)", len(peek), n-completed)
		}
	})
}

// TestCompetingWorkersShareQueue: two processors with one handler slot each
// share a queue: each holds only what it can start, so both run commands.
func TestCompetingWorkersShareQueue(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		register(t, reg, sleeper, registry.Options{})
		iss := e.issuer(nil)
		ids := make([]string, 12)
		for i := range ids {
			ids[i] = e.issue(iss, sleepCmd{MS: 300})
		}
		cfg := e.cfg()
		cfg.Concurrency = 1
		p1 := newProc(t, e.store, reg, cfg)
		start(t, p1)
		eventually(t, 10*time.Second, "the first processor to start a command", func() bool { return p1.Health().InFlight > 0 })
		cfg.Worker += "-2"
		p2 := newProc(t, e.open(), reg, cfg)
		start(t, p2)
		for _, id := range ids {
			e.waitState(id, model.StateCompleted, 30*time.Second)
		}
		by := e.completedBy(ids)
		if by["w-"+e.driver] < 3 || by[cfg.Worker] < 3 {
			t.Fatalf("completed per worker %v: the first processor hoarded the queue", by)
		}
	})
}

// TestWaitingMessageReleasedBeforeRenewal: a processor that dequeued more
// than it can start (its handlers turned out slower than it expected) does
// not keep the waiting messages by renewing their leases: it releases each
// when its lease would need renewing, and another processor runs them
// while the first handler is still busy.
func TestWaitingMessageReleasedBeforeRenewal(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		release := make(chan struct{})
		var first atomic.Bool
		var held atomic.Value // the ID of the command whose handler blocks
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
			if first.CompareAndSwap(false, true) {
				held.Store(run.ID())
				select { // far longer than the others' leases
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		}, registry.Options{Lease: 2 * time.Second})
		iss := e.issuer(nil)
		ids := make([]string, 5)
		for i := range ids {
			ids[i] = e.issue(iss, okCmd{N: i})
		}
		cfg := e.cfg()
		cfg.Concurrency = 1
		cfg.HandlerDurationEstimate = time.Millisecond // expects fast handlers: prefetches
		p1 := newProc(t, e.store, reg, cfg)
		start(t, p1)
		eventually(t, 10*time.Second, "the first processor to hold several messages", func() bool { return p1.Health().InFlight > 1 })
		cfg.Worker += "-2"
		p2 := newProc(t, e.open(), reg, cfg)
		start(t, p2)
		defer close(release)
		// Every command but the blocked one completes (that one may too,
		// when a renewal of its lease answered late on a loaded Azurite).
		eventually(t, 20*time.Second, "the second processor to run the messages the first could not start", func() bool {
			for _, id := range ids {
				if id == held.Load() {
					continue
				}
				if st, _ := e.reader.Get(context.Background(), id); st.State != model.StateCompleted {
					return false
				}
			}
			return true
		})
	})
}
