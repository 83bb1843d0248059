package chaos

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite/emulator"
)

// Environment variables of the suite.
const (
	// EnvForm chooses the form: short (default, part of `make test`),
	// smoke (a half-minute check of the harness), medium, or long
	// (`make chaos-long`).
	EnvForm = "CMDQ_CHAOS"
	// EnvSeed replays a run: the seed its report printed.
	EnvSeed = "CMDQ_CHAOS_SEED"
)

func TestMain(m *testing.M) {
	code := m.Run()
	CleanupBinary()
	os.Exit(code)
}

// seed returns CMDQ_CHAOS_SEED, or a new random seed.
func seed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv(EnvSeed); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer (the seed a report printed)", EnvSeed, s)
		}
		return v
	}
	return rand.Uint64() >> 1
}

// requireAzurite skips (or, with CMDQ_REQUIRE_AZURITE=1, fails) when Azurite
// is not installed.
func requireAzurite(t *testing.T) {
	t.Helper()
	if _, err := emulator.Bin(); err != nil {
		if os.Getenv("CMDQ_REQUIRE_AZURITE") == "1" {
			t.Fatalf("the chaos suite needs Azurite: %v; install it with `make azurite` (or `npm ci --prefix tools/azurite`)", err)
		}
		t.Skipf("Azurite not installed (%v): the Azure scenarios need it; install it with `npm ci --prefix tools/azurite`", err)
	}
}

// scenarios returns the runs of a form.
func scenarios(form string, seed uint64) ([]Scenario, error) {
	switch form {
	case "", "short":
		return []Scenario{
			{Name: "embedded-kills", Store: StoreEmbedded, Seed: seed, Chaos: 40 * time.Second, Commands: 800, Cancels: 0.12, Pauses: true, Scheduled: 0.15, Limit: 3, Ordered: 0.1,
				Lease: 4 * time.Second, KillEvery: [2]time.Duration{2 * time.Second, 6 * time.Second}, Settle: 90 * time.Second},
			{Name: "azure-kills-faults", Store: StoreAzure, Seed: seed, Chaos: 80 * time.Second, Commands: 900, Workers: 3, Cancels: 0.12, Pauses: true, Scheduled: 0.15, Limit: 3, Ordered: 0.1,
				KillEvery: [2]time.Duration{5 * time.Second, 12 * time.Second}, FaultEvery: [2]time.Duration{2 * time.Second, 5 * time.Second},
				Skews: []time.Duration{5 * time.Minute, -5 * time.Minute}, Settle: 90 * time.Second},
		}, nil
	case "smoke":
		return []Scenario{
			{Name: "embedded-kills", Store: StoreEmbedded, Seed: seed, Chaos: 15 * time.Second, Commands: 200, Cancels: 0.12, Pauses: true, Scheduled: 0.15, Limit: 3, Ordered: 0.1,
				Lease: 4 * time.Second, KillEvery: [2]time.Duration{3 * time.Second, 6 * time.Second}, Settle: time.Minute},
			{Name: "azure-kills-faults", Store: StoreAzure, Seed: seed, Chaos: 30 * time.Second, Commands: 250, Workers: 3, Cancels: 0.12, Pauses: true, Scheduled: 0.15, Limit: 3, Ordered: 0.1,
				KillEvery: [2]time.Duration{4 * time.Second, 8 * time.Second}, FaultEvery: [2]time.Duration{1 * time.Second, 3 * time.Second},
				Skews: []time.Duration{5 * time.Minute, -5 * time.Minute}, Settle: time.Minute},
		}, nil
	case "medium":
		return []Scenario{
			{Name: "embedded-kills", Store: StoreEmbedded, Seed: seed, Chaos: 2 * time.Minute, Commands: 3000, Cancels: 0.12, Pauses: true, Scheduled: 0.15, Limit: 3, Ordered: 0.1,
				Lease: 4 * time.Second, KillEvery: [2]time.Duration{3 * time.Second, 8 * time.Second}, Settle: 2 * time.Minute},
			{Name: "azure-kills-faults", Store: StoreAzure, Seed: seed, Chaos: 4 * time.Minute, Commands: 4000, Workers: 3, Cancels: 0.12, Pauses: true, Scheduled: 0.15, Limit: 3, Ordered: 0.1,
				KillEvery: [2]time.Duration{4 * time.Second, 10 * time.Second}, FaultEvery: [2]time.Duration{1 * time.Second, 4 * time.Second},
				FaultLoops: 2, Skews: []time.Duration{5 * time.Minute, -5 * time.Minute}, Settle: 3 * time.Minute},
		}, nil
	case "long":
		// A fifth of the commands are demo.sleep, limited to 3 at once on
		// the shared queue. At the default 0–1.5 s a sleep (0.75 s on
		// average) it runs 4 a second, less under kills, while the long
		// forms issue 6.7 (embedded) and 3.9 (Azurite) a second of it:
		// its backlog grew, its waiting messages past 2 × Concurrency
		// were counted as held and the whole queue drained at the limit's
		// pace (docs/processor.md, "Global concurrency"): the embedded
		// run of seed 8207421139963637245 had 2,424 commands pending
		// after a 3-minute settle. Sleeps of 0–0.4 s (15 a second at the
		// limit) keep the limited type ahead of its arrivals, so the
		// limit is exercised without overloading it (that run now settles
		// in about 30 s); the settle still leaves room for a backlog the
		// kills build. The Azurite case asks more than Azurite serves on
		// 2 cores under its faults (2–5 handler runs a second, issuing
		// still going 20 minutes after the chaos window): seed
		// 6010002973532015013 left 2,241 pending after 15 minutes, and
		// sizing it to Azurite's rate is still to do.
		return []Scenario{
			{Name: "embedded-kills", Store: StoreEmbedded, Seed: seed, Chaos: 4 * time.Minute, Commands: 8000, Cancels: 0.12, Pauses: true, Scheduled: 0.15, Limit: 3, Ordered: 0.1,
				MaxSleep: 400 * time.Millisecond, Lease: 4 * time.Second, KillEvery: [2]time.Duration{3 * time.Second, 8 * time.Second}, Settle: 15 * time.Minute},
			{Name: "azure-kills-faults", Store: StoreAzure, Seed: seed, Chaos: 12 * time.Minute, Commands: 14000, Workers: 3, Cancels: 0.12, Pauses: true, Scheduled: 0.15, Limit: 3, Ordered: 0.1,
				MaxSleep: 400 * time.Millisecond, KillEvery: [2]time.Duration{3 * time.Second, 8 * time.Second}, FaultEvery: [2]time.Duration{1 * time.Second, 3 * time.Second},
				FaultLoops: 3, Skews: []time.Duration{5 * time.Minute, -5 * time.Minute}, Settle: 15 * time.Minute},
		}, nil
	case "soak":
		d := soakDuration()
		// 4 commands a second on the embedded store; 2 on Azurite, whose
		// one Node process shares the 2 cores with serve, three workers
		// and the suite: at 4 a second a run whose machine was also busy
		// with other work fell behind (5,334 messages left after the
		// settle, nothing lost).
		n := int(4 * d.Seconds())
		return []Scenario{
			{Name: "embedded-soak", Store: StoreEmbedded, Seed: seed, Chaos: d, Commands: n, Cancels: 0.12, Pauses: true, Scheduled: 0.15, Limit: 3, Ordered: 0.1,
				Lease: 4 * time.Second, KillEvery: [2]time.Duration{3 * time.Second, 9 * time.Second}, Settle: 5 * time.Minute},
			{Name: "azure-soak", Store: StoreAzure, Seed: seed, Chaos: d, Commands: n / 2, Workers: 3, Cancels: 0.12, Pauses: true, Scheduled: 0.15, Limit: 3, Ordered: 0.1,
				KillEvery: [2]time.Duration{6 * time.Second, 18 * time.Second}, FaultEvery: [2]time.Duration{6 * time.Second, 18 * time.Second},
				Skews: []time.Duration{5 * time.Minute, -5 * time.Minute}, Spare: []string{"serve", "w3"}, Sample: min(30*time.Second, max(time.Second, d/60)), Settle: 10 * time.Minute},
		}, nil
	}
	return nil, &formError{form}
}

// EnvSoak sets the soak's chaos time (CMDQ_CHAOS=soak): a duration,
// default 1h.
const EnvSoak = "CMDQ_SOAK"

func soakDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(EnvSoak)); err == nil && d > 0 {
		return d
	}
	return time.Hour
}

type formError struct{ form string }

func (e *formError) Error() string {
	return EnvForm + "=" + strconv.Quote(e.form) + ": use short (the default), smoke, medium, long or soak"
}

// TestChaos runs the form CMDQ_CHAOS names (short by default): the embedded
// store under SIGKILLs of `cmdq serve`, then Azurite under SIGKILLs of
// `cmdq serve` and three competing `cmdq worker` processes and every kind of
// storage fault. It prints the figures of each run and fails on any broken
// invariant, with the histories, journal and logs of the commands involved.
//
// The short and smoke forms run their scenarios side by side and beside the
// package's other tests, which are parallel too: each run has its own
// Azurite, processes, fault proxies and directory, and the suite mostly
// waits (on leases, kills, fault windows), so the short form's runs
// together use about a quarter of 2 cores and `make chaos` (which lets 4
// run at once) takes about as long as its longest run, not the sum. The
// medium and long forms run one scenario at a time, as the figures of
// docs/reliability.md were taken.
func TestChaos(t *testing.T) {
	form := os.Getenv(EnvForm)
	together := form == "" || form == "short" || form == "smoke" || form == "soak"
	if together {
		t.Parallel()
	}
	scs, err := scenarios(form, seed(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scs {
		t.Run(sc.Name, func(t *testing.T) {
			if together {
				t.Parallel()
			}
			if sc.Store == StoreAzure {
				requireAzurite(t)
			}
			rep := sc.Run(t)
			t.Log("\n" + rep.Figures())
			reportViolations(t, rep)
		})
	}
}

// reportViolations fails t once per violated invariant, naming the commands.
func reportViolations(t *testing.T, rep *Report) {
	t.Helper()
	by := map[string][]string{}
	first := map[string]string{} // invariant → its first violation's detail
	var order []string
	for _, v := range rep.Violations {
		if _, ok := by[v.Invariant]; !ok {
			order = append(order, v.Invariant)
			first[v.Invariant] = v.Detail
		}
		by[v.Invariant] = append(by[v.Invariant], v.CommandID)
	}
	for _, inv := range order {
		ids := by[inv]
		more := ""
		if len(ids) > 5 {
			more = " …"
			ids = ids[:5]
		}
		// The first one's detail goes here too: a CI log cut to its last
		// lines keeps it.
		t.Errorf("invariant %s broken %d times (seed %d): %s%s; details above; the first: %s", inv, len(by[inv]), rep.Seed, strings.Join(ids, ", "), more, first[inv])
	}
}
