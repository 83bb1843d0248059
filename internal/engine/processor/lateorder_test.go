package processor_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
)

// TestLateOutcomeHoldsOrderKey: the first processor's renewals are refused
// (Azurite behind a fault proxy), so its lease of A, the head of an order
// key, ends; a second processor takes A's message and runs A again (its
// started not yet written), while B, the key's next command, waits for its
// turn in a third. The first processor's outcome lands after its lease — a
// completion from a handler that ran on past it, or a poisoning whose
// batch the proxy held until 4 s after the second delivery began — and its
// delete finds the message taken. The key must not pass to B while the
// second delivery of A still runs: B starts only once that handler has
// returned, or, through the waiting delivery's check, a lease and the 2 s
// clock skew after A's last write landed — never in between. The second
// handler runs until 7 s after A's outcome landed (within those 8 s), so a
// key handed on at the late outcome, or counted from the poisoning's
// decision (8 s before its held batch landed) rather than from its
// landing, starts B inside its run.
func TestLateOutcomeHoldsOrderKey(t *testing.T) {
	t.Parallel()
	// Long enough that a poisoning handler returns well before its first
	// renewal (at half the lease) and its batch, held until the lease has
	// ended, lands a lease and the skew before a waiting delivery may take
	// the head out (the head's event time is the handler's return).
	const lease = 6 * time.Second
	const skew = 2 * time.Second // processor.maxClockSkew
	for _, outcome := range []model.State{model.StateCompleted, model.StatePoisoned} {
		t.Run(string(outcome), func(t *testing.T) {
			t.Parallel()
			e, through, px := azureBehind(t)
			px.Add(faultproxy.Match{Method: "PUT", Path: "/messages/"}, faultproxy.Refuse, -1)
			second := make(chan struct{}) // the second delivery of A began
			var held sync.Once
			if outcome == model.StatePoisoned {
				// The first processor's poison batch waits for the second
				// delivery (then goes through untouched).
				px.Add(faultproxy.Match{Method: "POST", Path: "$batch", Func: func(_ *http.Request, body []byte) bool {
					if bytes.Contains(body, []byte(`"Kind":"poisoned"`)) {
						<-second
						held.Do(func() { time.Sleep(4 * time.Second) }) // storage slow for a while more, not synchronisation
					}
					return false
				}}, faultproxy.Refuse, -1)
			}
			result := func() error {
				if outcome == model.StatePoisoned {
					return registry.Permanent(errors.New("refused"))
				}
				return nil
			}
			var (
				mu                       sync.Mutex
				runsA                    int
				secondErr                error
				secondReturned, bStarted time.Time
				aOutcomeWritten          time.Time // the outcome's time (its writer's decision)
				aOutcomeLanded           time.Time // when the second handler saw it landed
				started1                 = make(chan struct{})
				id                       string
			)
			handlerA := func(ctx context.Context, c okCmd, run *registry.Attempt) error {
				mu.Lock()
				runsA++
				n := runsA
				mu.Unlock()
				if n == 1 {
					close(started1)
					if outcome == model.StateCompleted {
						<-second // runs on past its lease
					}
					// A poisoning returns before the first renewal (half
					// the lease), so its handler is not cancelled by the
					// refused renewal, and a third of a lease after its
					// start, so that its poisoned event's time is close
					// to when its held batch lands.
					time.Sleep(lease / 3) // the handler's work, not synchronisation
					return result()
				}
				close(second)
				var st model.Status
				deadline := time.Now().Add(15 * time.Second)
				for !st.State.Final() {
					if time.Now().After(deadline) {
						mu.Lock()
						secondErr = errors.New("the first delivery's outcome did not land within 15 s")
						secondReturned = time.Now()
						mu.Unlock()
						return nil
					}
					time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
					st, _ = e.reader.Get(context.Background(), id)
				}
				// Run on until 7 s after the outcome landed (seen here):
				// inside the lease and skew after which a waiting delivery
				// may take a final head out of its key. A real handler
				// learns of the outcome at its next renewal, up to a
				// lease after the outcome landed, whenever its writer
				// decided it.
				landed := time.Now()
				for time.Now().Before(landed.Add(lease + skew - time.Second)) {
					time.Sleep(20 * time.Millisecond) // the handler's work, not synchronisation
				}
				mu.Lock()
				secondReturned, aOutcomeWritten, aOutcomeLanded = time.Now(), st.UpdatedAt, landed
				mu.Unlock()
				return result()
			}
			handlerB := func(ctx context.Context, c otherCmd, run *registry.Attempt) error {
				mu.Lock()
				if bStarted.IsZero() {
					bStarted = time.Now()
				}
				mu.Unlock()
				return nil
			}
			// The first processor's leases are all the same (it dequeues
			// for its longest lease, and a renewal, refused here, is what
			// would shorten it).
			reg := registry.NewRegistry()
			register(t, reg, handlerA, registry.Options{Lease: lease})
			register(t, reg, handlerB, registry.Options{Lease: lease})
			// The second processor keeps its leases (30 s) while its
			// handler of A runs.
			reg2 := registry.NewRegistry()
			register(t, reg2, handlerA, registry.Options{Lease: 30 * time.Second})
			register(t, reg2, handlerB, registry.Options{Lease: 30 * time.Second})
			cfg := e.cfg()
			cfg.StartedWriteDelay = 100 * time.Millisecond
			// One message at a time: the first processor takes nothing
			// else while it handles A.
			cfg.Concurrency, cfg.BatchSize, cfg.NewBatchThreshold = 1, 1, model.NoThreshold
			p1 := newProc(t, through, reg, cfg)
			start(t, p1)
			is := e.issuer(p1.Notify)
			ctx := context.Background()
			a, err := is.IssueRaw(ctx, model.Raw{Type: okCmd{}.CommandType(), Params: []byte(`{}`), OrderKey: "aggregate-1"})
			if err != nil {
				t.Fatal(err)
			}
			id = a.ID
			<-started1
			cfg2 := e.cfg()
			cfg2.Worker += "-2"
			// Its started is not written before the first delivery's
			// outcome lands (else that outcome would conflict); it runs
			// A alone.
			cfg2.StartedWriteDelay = time.Minute
			cfg2.Concurrency, cfg2.BatchSize, cfg2.NewBatchThreshold = 1, 1, model.NoThreshold
			p2 := newProc(t, e.store, reg2, cfg2)
			start(t, p2)
			<-second
			// B waits for its turn in a third processor, which knows A's
			// lease as the first one does (the lease a final head is
			// kept for counts from A's last write).
			b, err := is.IssueRaw(ctx, model.Raw{Type: otherCmd{}.CommandType(), Params: []byte(`{}`), OrderKey: "aggregate-1"})
			if err != nil {
				t.Fatal(err)
			}
			cfg3 := e.cfg()
			cfg3.Worker += "-3"
			start(t, newProc(t, e.store, reg, cfg3))
			e.waitState(b.ID, model.StateCompleted, 60*time.Second)
			eventually(t, 20*time.Second, "the second delivery's handler of A to return", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return !secondReturned.IsZero()
			})
			mu.Lock()
			defer mu.Unlock()
			if secondErr != nil {
				t.Fatal(secondErr)
			}
			if runsA != 2 {
				t.Fatalf("A's handler ran %d times, want 2", runsA)
			}
			if st, _ := e.reader.Get(ctx, id); st.State != outcome || st.Worker != cfg.Worker {
				t.Fatalf("A is %s by %s, want %s by %s (the first processor's late outcome)", st.State, st.Worker, outcome, cfg.Worker)
			}
			t.Logf("A's outcome landed %s after its writer decided it; B started %s and the second handler returned %s after the landing", aOutcomeLanded.Sub(aOutcomeWritten), bStarted.Sub(aOutcomeLanded), secondReturned.Sub(aOutcomeLanded))
			if bStarted.Before(secondReturned) && bStarted.Before(aOutcomeLanded.Add(lease+skew)) {
				t.Fatalf("B started %s after A's late %s outcome landed (%s after its writer decided it), while A's second delivery ran (it returned %s after the landing): the key passed early",
					bStarted.Sub(aOutcomeLanded), outcome, aOutcomeLanded.Sub(aOutcomeWritten), secondReturned.Sub(aOutcomeLanded))
			}
		})
	}
}
