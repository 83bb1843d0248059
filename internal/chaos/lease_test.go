package chaos

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// waitJournal polls the journal until cond holds for the executions of id
// (at most d); it fails t otherwise.
func waitJournal(t *testing.T, w *world, id string, d time.Duration, what string, cond func([]*execution) bool) []*execution {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		j, err := readJournal(w.journal)
		if err != nil {
			t.Fatal(err)
		}
		if xs := j.byID[id]; cond(xs) {
			w.tl.logf("journal: %s", what)
			return xs
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, x := range j.byID[id] {
				b.WriteString("\n  " + x.String())
			}
			t.Fatalf("waited %s for the journal to show %s; it shows:%s\ntimeline:\n%s", d, what, b.String(), tail(w.tlf.Name(), 40))
		}
		waitCtx(context.Background(), 50*time.Millisecond)
	}
}

func oneCommand(rng *rand.Rand, typ, params string) *command {
	c := &command{ID: newID(rng), Type: typ, Params: params}
	c.body, _ = json.Marshal(map[string]any{"id": c.ID, "type": typ, "params": json.RawMessage(params)})
	return c
}

// TestLeaseRenewalBlocked is the lease edge case: worker w1 runs a handler
// (demo.sleep, 6 s; lease 2 s) and is cut off from storage right after it
// starts, so its lease renewals hang and the lease runs out while the
// handler still runs. Worker w2 then takes the message and runs the
// command again. When w1 is reconnected, the command must have completed
// exactly once, and the second execution must be explained by a lease_lost
// event for w1's attempt in the command's history; the first handler's context should have
// ended before its lease did (docs: "the handler's context ends before the
// lease would"), so the two executions do not overlap.
//
// queue-cut blocks only w1's queue endpoint (renewals hang, its table
// writes go through); queue-and-table-cut blocks both, so w1's own
// `started` write hangs too and lands only after w2 completed the command.
func TestLeaseRenewalBlocked(t *testing.T) {
	t.Parallel() // its own world (see TestChaos)
	requireAzurite(t)
	for _, tc := range []struct {
		name string
		svcs []string
	}{
		{"queue-cut", []string{svcQueue}},
		{"queue-and-table-cut", []string{svcQueue, svcTable}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, Scenario{Name: "lease-" + tc.name, Store: StoreAzure, Seed: 1, Workers: 2, Lease: 2 * time.Second,
				ServeNoDemo: true, Settle: time.Minute})
			defer w.close()
			ctx := context.Background()
			if err := w.startRole("serve"); err != nil {
				t.Fatal(err)
			}
			if err := w.waitServe(); err != nil {
				t.Fatal(err)
			}
			if err := w.startRole("w1"); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
			c := oneCommand(rng, "demo.sleep", `{"ms":6000}`)
			cl := newClients("http://"+w.addr, w.tl)
			cl.issue(ctx, c, time.Now().Add(time.Minute), rng)
			if !c.isAccepted() {
				t.Fatalf("the command was not accepted: %s %s", c.refused, c.lastErr)
			}
			waitJournal(t, w, c.ID, time.Minute, "w1 began the command", func(xs []*execution) bool {
				return len(xs) == 1 && strings.HasPrefix(xs[0].Worker, "w1.")
			})
			heal, err := w.net.addToxic([]string{"w1"}, tc.svcs, toxic{Type: "timeout", Stream: "upstream", Toxicity: 1, Attrs: map[string]any{"timeout": int64(0)}})
			if err != nil {
				t.Fatal(err)
			}
			w.tl.logf("w1 cut off from %v", tc.svcs)
			if err := w.startRole("w2"); err != nil {
				t.Fatal(err)
			}
			waitJournal(t, w, c.ID, time.Minute, "w2 ran the command to its end", func(xs []*execution) bool {
				for _, x := range xs {
					if strings.HasPrefix(x.Worker, "w2.") && x.End >= 0 {
						return true
					}
				}
				return false
			})
			heal()
			if err := w.net.dropConnections([]string{"w1"}, tc.svcs); err != nil {
				t.Fatal(err)
			}
			w.tl.logf("w1 reconnected")
			xs := waitJournal(t, w, c.ID, time.Minute, "w1's execution ended", func(xs []*execution) bool {
				return xs[0].End >= 0
			})
			rep := w.finish(ctx, cl, []*command{c})
			t.Log("\n" + rep.Figures())
			reportViolations(t, rep)
			// w2's execution is explained by a lease_lost event for w1's
			// attempt (not by a failed event: w1's handler did not fail, its
			// lease could not be renewed).
			if rep.Extra != 1 || rep.ExplainedLeaseLost != 1 {
				t.Errorf("w2's execution: %d extra executions, %d explained by lease_lost; want 1 and 1", rep.Extra, rep.ExplainedLeaseLost)
			}
			first, second := xs[0], xs[1]
			if first.End > second.Begin {
				t.Errorf("w1's handler outlived its lease: it ended at %s (journal line %d), after w2 began the command at %s (line %d); "+
					"its context should end before the lease does when renewals cannot get through",
					first.EndT.Format("15:04:05.000"), first.End, second.BeginT.Format("15:04:05.000"), second.Begin)
			}
		})
	}
}
