package shared_test

import (
	"errors"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// TestRateLedgerTake: a ledger grants a burst of up to Limit at once, then
// nothing until the oldest grant has counted for Per and the start
// allowance (Span), and says exactly when: not a millisecond before.
func TestRateLedgerTake(t *testing.T) {
	r := shared.Rate{Limit: 10, Per: time.Second}
	if r.Span() != 1100*time.Millisecond || r.MaxBlock() != 1 {
		t.Fatalf("span %s, block %d", r.Span(), r.MaxBlock())
	}
	l := shared.RateLedger{Type: "payments.charge"}
	n, l, _ := l.Take(t0, r, 4, 0)
	if n != 4 {
		t.Fatalf("first take: %d tokens, want 4", n)
	}
	n, l, _ = l.Take(t0.Add(300*time.Millisecond), r, 10, 0)
	if n != 6 {
		t.Fatalf("second take: %d tokens, want the 6 left", n)
	}
	n, _, next := l.Take(t0.Add(400*time.Millisecond), r, 1, 0)
	if n != 0 || !next.Equal(t0.Add(r.Span())) {
		t.Fatalf("with 10 used: %d tokens, next free %s, want 0 and %s", n, next, t0.Add(r.Span()))
	}
	if n, _, _ := l.Take(next.Add(-time.Millisecond), r, 1, 0); n != 0 {
		t.Fatalf("a millisecond before the next free time: %d tokens", n)
	}
	n, l2, _ := l.Take(next, r, 10, 0)
	if n != 4 {
		t.Fatalf("at the next free time: %d tokens, want the 4 of the first grant", n)
	}
	if len(l2.Grants) != 2 || l2.Used(next, r) != 10 {
		t.Fatalf("ledger after the first grant stopped counting: %+v", l2.Grants)
	}
	// A writer whose clock is behind the latest grant stamps its grant no
	// earlier than that grant.
	ahead := shared.RateLedger{Type: "payments.charge", Grants: []shared.RateGrant{{At: t0.Add(5 * time.Second), N: 1}}}
	n, out, _ := ahead.Take(t0, r, 1, 0)
	if n != 1 || !out.Grants[1].At.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("take behind the latest grant: %d, %+v", n, out.Grants)
	}
	// A grant stamped ahead (when its handler is expected to start)
	// counts from then.
	n, out, _ = shared.RateLedger{Type: "payments.charge"}.Take(t0, shared.Rate{Limit: 1, Per: time.Second}, 1, 30*time.Millisecond)
	if n != 1 || !out.Grants[0].At.Equal(t0.Add(30*time.Millisecond)) {
		t.Fatalf("take with a lead of 30ms: %d, %+v", n, out.Grants)
	}
	if next := out.NextFree(t0.Add(time.Second), shared.Rate{Limit: 1, Per: time.Second}); !next.Equal(t0.Add(30*time.Millisecond + 1100*time.Millisecond)) {
		t.Fatalf("next free after a grant stamped 30ms ahead: %s", next)
	}
}

// TestRateLedgerMerge: past MaxRateGrants grants a ledger merges the
// closest ones at the later time: the tokens are all kept, and at every
// later time at least as many count as without the merge (never more
// starts).
func TestRateLedgerMerge(t *testing.T) {
	r := shared.Rate{Limit: 1000, Per: time.Second}
	l := shared.RateLedger{Type: "payments.charge"}
	var all []shared.RateGrant
	at := t0
	for range 3 * shared.MaxRateGrants {
		at = at.Add(time.Duration(1+rand.IntN(3)) * time.Millisecond)
		var n int
		n, l, _ = l.Take(at, r, 1, 0)
		if n != 1 {
			t.Fatalf("take %d at %s: %d", len(all), at, n)
		}
		all = append(all, shared.RateGrant{At: at, N: 1})
	}
	if len(l.Grants) > shared.MaxRateGrants {
		t.Fatalf("%d grants kept, want at most %d", len(l.Grants), shared.MaxRateGrants)
	}
	full := shared.RateLedger{Grants: all}
	for d := time.Duration(0); d < 2*r.Span(); d += time.Millisecond {
		now := at.Add(d)
		if got, want := l.Used(now, r), full.Used(now, r); got < want {
			t.Fatalf("at %s: %d counted after the merges, %d without", now, got, want)
		}
	}
	if got := l.Used(at, r); got != len(all) {
		t.Fatalf("%d tokens counted at the last grant, want all %d", got, len(all))
	}
}

// TestRateLedgerShared: three takers that meet only through the ledger
// row (each with its own copy, read again when its write loses), on a
// clock the test moves: over 10 s of random asks with random leads, no
// window of Span holds grants of more than Limit tokens, no window of Per
// holds more than Limit starts when each start comes between its take
// and the start allowance after its grant's stamp, and the limit is
// reached: the takers asking all the time get close to Limit per Span.
func TestRateLedgerShared(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := testenv.Ctx(t)
		tb, err := env.Store.Table(ctx, env.Prefix+"commands")
		if err != nil {
			t.Fatal(err)
		}
		r := shared.Rate{Limit: 20, Per: time.Second}
		type taker struct {
			parts *shared.Partitions
			view  shared.RateLedger
			known bool
		}
		takers := make([]*taker, 3)
		for i := range takers {
			takers[i] = &taker{parts: shared.New(tb, time.Now)}
		}
		var grants []shared.RateGrant
		var starts []time.Time
		now := t0
		end := t0.Add(10 * time.Second)
		for now.Before(end) {
			now = now.Add(time.Duration(rand.IntN(40)) * time.Millisecond)
			tk := takers[rand.IntN(len(takers))]
			want := 1 + rand.IntN(r.MaxBlock())
			for try := 0; ; try++ {
				if try > 10 {
					t.Fatal("a take lost 10 writes in a row with one writer at a time")
				}
				if !tk.known {
					if tk.view, err = tk.parts.ReadRate(ctx, "payments.charge", ""); err != nil {
						t.Fatal(err)
					}
					tk.known = true
				}
				lead := time.Duration(rand.IntN(30)) * time.Millisecond
				n, out, _ := tk.view.Take(now, r, want, lead)
				if n == 0 {
					break
				}
				w, err := tk.parts.WriteRate(ctx, out)
				if errors.Is(err, shared.ErrRateChanged) {
					tk.known = false
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				tk.view = w
				stamp := out.Grants[len(out.Grants)-1].At
				grants = append(grants, shared.RateGrant{At: stamp, N: n})
				// Its handlers start at any time from now until the start
				// allowance after the stamp.
				for range n {
					starts = append(starts, now.Add(time.Duration(rand.Int64N(int64(stamp.Add(r.StartAllowance()).Sub(now))))))
				}
				break
			}
		}
		total := 0
		for i, g := range grants {
			total += g.N
			in := 0
			for _, h := range grants[:i+1] {
				if h.At.After(g.At.Add(-r.Span())) {
					in += h.N
				}
			}
			if in > r.Limit {
				t.Fatalf("%d tokens granted in the span before %s, limit %d", in, g.At, r.Limit)
			}
		}
		sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
		for i := range starts {
			if j := i + r.Limit; j < len(starts) && starts[j].Sub(starts[i]) < r.Per {
				t.Fatalf("%d starts from %s to %s, within %s", r.Limit+1, starts[i], starts[j], r.Per)
			}
		}
		// Asking every 20 ms on average, the takers are refused most of the
		// time: the grants come close to Limit per Span.
		if min := int(float64(r.Limit) * 10 * float64(time.Second) / float64(r.Span()) * 0.9); total < min {
			t.Fatalf("%d tokens granted over 10 s, want at least %d (limit %d per %s)", total, min, r.Limit, r.Span())
		}
		all, err := takers[0].parts.ReadRates(ctx)
		if err != nil || len(all) != 1 || all[0].Type != "payments.charge" || all[0].Rate != r || len(all[0].Grants) == 0 {
			t.Fatalf("ReadRates: %+v %v", all, err)
		}
	})
}
