package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite/emulator"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// Store kinds a scenario runs on.
const (
	StoreEmbedded = "embedded"
	StoreAzure    = "azure"
)

// Fault kinds (Scenario.Faults).
const (
	// FaultLatency: 100–500 ms latency with 50–300 ms jitter on every
	// process's storage connections, for 3–8 s.
	FaultLatency = "latency"
	// FaultReset: connection resets (TCP RST) on 30 % of the connections,
	// after up to 50 ms, for 2–4 s.
	FaultReset = "reset"
	// FaultStall: connections stall (no data passes) and are closed after
	// 1–3 s, for 3–5 s: timeouts.
	FaultStall = "stall"
	// FaultBlackHole: storage accepts connections and never answers, for
	// 10–14 s, on every process; when it heals, the connections it held
	// are closed (the requests on them fail and are retried).
	FaultBlackHole = "blackhole"
	// FaultRefused: the storage endpoints refuse connections (and close
	// open ones), for 3–8 s.
	FaultRefused = "refused"
	// Fault503: a burst of 503 Server Busy for 3–6 s: half of the requests
	// refused before they reach storage, 15 % answered 503 after the
	// operation was applied (the answer is lost, the write landed).
	Fault503 = "http503"
	// FaultAzuriteRestart: Azurite stops (cleanly, its data on disk) for
	// 2–5 s and starts again on the same endpoints.
	FaultAzuriteRestart = "azurite-restart"
	// FaultPartition: one worker's storage connections black-holed for 2–3
	// leases (its lease renewals are blocked while its handlers run), then
	// its hung connections reset.
	FaultPartition = "partition"
)

// AllFaults lists every fault kind.
var AllFaults = []string{FaultLatency, FaultReset, FaultStall, FaultBlackHole, FaultRefused, Fault503, FaultAzuriteRestart, FaultPartition}

// Scenario is one chaos run.
type Scenario struct {
	// Name names the run in reports and in its directory.
	Name string
	// Store is StoreEmbedded (one `cmdq serve`) or StoreAzure (Azurite,
	// `cmdq serve` and Workers `cmdq worker` processes on one queue).
	Store string
	// Seed makes the schedule (commands, ids, kills, faults) replayable.
	Seed uint64
	// Chaos is how long commands are issued while kills and faults happen.
	Chaos time.Duration
	// Commands is how many commands are issued, evenly over Chaos.
	Commands int
	// Clients is how many concurrent HTTP clients issue them (default 8).
	Clients int
	// Workers is the number of `cmdq worker` processes (StoreAzure only).
	Workers int
	// Lease is the demo handlers' lease (default 5 s).
	Lease time.Duration
	// MaxSleep bounds demo.sleep's duration (default 1.5 s).
	MaxSleep time.Duration
	// Concurrency is each process's --concurrency (default 8).
	Concurrency int
	// KillEvery is the range of the random gap between SIGKILLs (zero: no kills).
	KillEvery [2]time.Duration
	// FaultEvery is the range of the random gap between storage faults
	// (StoreAzure; zero: none).
	FaultEvery [2]time.Duration
	// Faults are the fault kinds, injected in shuffled rounds (each kind
	// once per round); default AllFaults.
	Faults []string
	// FaultLoops is how many fault loops run at once, each with its own
	// schedule, so that faults overlap (default 1).
	FaultLoops int
	// Settle is how long, after the chaos, every accepted command has to
	// become final (default 2 minutes).
	Settle time.Duration
	// ServeNoDemo runs serve with --no-demo: the API only, no processor
	// (for cases that control which worker runs a command).
	ServeNoDemo bool
	// ServeArgs are more flags for serve (e.g. --recovery-delay).
	ServeArgs []string
	// Cancels is the share (0..1) of the commands that are cancelled
	// through the API, a random moment (under 2 s) after they were
	// accepted (default 0: none).
	Cancels float64
	// Pauses: the demo handlers' queue is paused and resumed through the
	// API now and then during the chaos, some pauses longer than 10 s
	// (default false).
	Pauses bool
	// Accounts is the number of storage accounts (StoreAzure): Azurite
	// instances, every process given each one's connection string (the
	// first behind the fault proxies, the others direct). Default 1.
	Accounts int
	// Shards is the number of shards of the commands queue (--shards);
	// default 1.
	Shards int
	// AccountDown, when set, stops the last account's Azurite
	// AccountDown[0] into the chaos for at least AccountDown[1], then
	// starts it again with its data (Accounts ≥ 2); the run checks that
	// commands of the other accounts complete meanwhile (see accountDown).
	AccountDown [2]time.Duration
	// FirstAccountDown, when set, stops the first account's Azurite (the
	// one behind the fault proxies) FirstAccountDown[0] into the chaos,
	// and not before the AccountDown outage is over, for at least
	// FirstAccountDown[1], with the same checks (Accounts ≥ 2).
	FirstAccountDown [2]time.Duration
	// Scheduled is the share (0..1) of the commands issued with a delay
	// ("delay" in the request): most of them 0.5-8 s, one in twenty an
	// hour, longer than the run, so that they end still scheduled
	// (default 0: none).
	Scheduled float64
	// Limit, when above 0, caps demo.sleep across every process
	// (--global-concurrency demo.sleep=Limit) and the check holds the
	// journal to it (flow.go). Default 0: none.
	Limit int
	// Ordered is the share (0..1) of the commands due at once that carry
	// one of orderKeys order keys (flow.go). Default 0: none.
	Ordered float64
	// Skews are the clock skews of workers w1, w2, … (StoreAzure): each
	// runs as a machine whose clock is that far ahead (negative: behind)
	// would (cmdq worker --test-clock-skew). The checks hold as for any
	// run; not-early compares the handlers' real begin times with run-at
	// times. Default none.
	Skews []time.Duration
	// Spare are roles the kill loop never kills ("serve", "w3"); Sample,
	// when set, is how often their resident memory and goroutines are
	// sampled during the chaos (soak.go). Default none.
	Spare  []string
	Sample time.Duration
}

func (sc *Scenario) defaults() {
	if sc.Clients == 0 {
		sc.Clients = 8
	}
	if sc.Lease == 0 {
		sc.Lease = 5 * time.Second
	}
	if sc.MaxSleep == 0 {
		sc.MaxSleep = 1500 * time.Millisecond
	}
	if sc.Concurrency == 0 {
		sc.Concurrency = 8
	}
	if sc.Faults == nil {
		sc.Faults = AllFaults
	}
	if sc.FaultLoops == 0 {
		sc.FaultLoops = 1
	}
	if sc.Settle == 0 {
		sc.Settle = 2 * time.Minute
	}
}

// world is everything a run started.
type world struct {
	t       testing.TB
	sc      *Scenario
	dir     string
	logDir  string
	journal string
	tl      timeline
	ps      *procs
	addr    string // serve's API address
	dataDir string // embedded

	az    *azuriteCtl
	extra []*azuriteCtl // the other accounts (Scenario.Accounts)
	net   *faultNet

	tlf     *os.File
	started time.Time
	keep    bool // keep the run's directory

	pauses pauses // the pause windows (control.go)

	downErr    error      // what accountOutages found wrong
	downProbes []*command // the commands accountDown issued (under mu)
	outages    []string   // what each account outage saw (under mu)

	mu       sync.Mutex
	downTill map[string]time.Time // role → not restarted before
	stopping bool
	faults   map[string]int
	kills    int
	mem      []MemSeries // the spared roles' samples (soak.go)
}

// Run runs the scenario and returns its report; a harness failure (not an
// invariant violation) fails tb. Every process it started is killed when it
// returns. The run's directory (logs, journal, timeline) is removed when
// the report has no violations and tb has not failed, and kept otherwise.
func (sc Scenario) Run(tb testing.TB) *Report {
	tb.Helper()
	w := newWorld(tb, sc)
	defer w.close()
	sc = *w.sc
	if err := w.startAll(); err != nil {
		tb.Fatalf("chaos %s: set up: %v\ntimeline:\n%s", sc.Name, err, tail(filepath.Join(w.dir, "timeline.log"), 50))
	}
	rng := rand.New(rand.NewPCG(sc.Seed, 1))
	cmds := mix(rng, sc.Commands, sc.MaxSleep, sc.Cancels)
	schedule(rand.New(rand.NewPCG(sc.Seed, 96)), cmds, sc.Scheduled)
	order(rand.New(rand.NewPCG(sc.Seed, 97)), cmds, sc.Ordered)
	cl := newClients("http://"+w.addr, w.tl)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	chaosCtx, stopChaos := context.WithTimeout(ctx, sc.Chaos)
	defer stopChaos()
	// pausing is the pause loop, waited for after the processes are
	// restarted: its last resume needs a serve to answer it, and a kill
	// just before the chaos ends leaves none until healAll (the supervisor
	// stops with the chaos).
	var bg, pausing sync.WaitGroup
	bg.Add(1)
	go func() { defer bg.Done(); w.supervise(chaosCtx) }()
	if sc.KillEvery[1] > 0 {
		bg.Add(1)
		go func() { defer bg.Done(); w.killLoop(chaosCtx, rand.New(rand.NewPCG(sc.Seed, 2))) }()
	}
	if sc.Pauses {
		pausing.Add(1)
		go func() { defer pausing.Done(); w.pauseLoop(chaosCtx, cl, rand.New(rand.NewPCG(sc.Seed, 64))) }()
	}
	if sc.AccountDown[1] > 0 || sc.FirstAccountDown[1] > 0 {
		bg.Add(1)
		go func() { defer bg.Done(); w.accountOutages(chaosCtx, cl) }()
	}
	if sc.Sample > 0 && len(sc.Spare) > 0 {
		bg.Add(1)
		go func() { defer bg.Done(); w.sampleLoop(chaosCtx) }()
	}
	if sc.Store == StoreAzure && sc.FaultEvery[1] > 0 {
		for i := range sc.FaultLoops {
			bg.Add(1)
			go func() { defer bg.Done(); w.faultLoop(chaosCtx, rand.New(rand.NewPCG(sc.Seed, 3+uint64(i)))) }()
		}
	}
	issued := make(chan struct{})
	go func() {
		defer close(issued)
		cl.issueAll(ctx, cmds, float64(sc.Commands)/sc.Chaos.Seconds(), sc.Clients, time.Now().Add(sc.Chaos+sc.Settle/2), sc.Seed)
	}()
	<-chaosCtx.Done()
	bg.Wait()
	for _, o := range w.outages {
		tb.Logf("chaos %s: %s", sc.Name, o)
	}
	if w.downErr != nil {
		tb.Errorf("chaos %s: %v", sc.Name, w.downErr)
	}
	w.tl.logf("chaos over: healing faults, restarting every process")
	if err := w.healAll(); err != nil {
		tb.Fatalf("chaos %s: heal: %v", sc.Name, err)
	}
	pausing.Wait()
	<-issued
	w.tl.logf("every client is done")
	cmds = append(cmds, w.downProbes...)
	return w.finish(ctx, cl, cmds)
}

// newWorld creates the run's directory and starts its storage (Azurite and
// the fault proxies for StoreAzure); no cmdq process yet.
func newWorld(tb testing.TB, sc Scenario) *world {
	tb.Helper()
	sc.defaults()
	bin, err := Binary()
	if err != nil {
		tb.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "cmdq-chaos-"+sc.Name+"-")
	if err != nil {
		tb.Fatal(err)
	}
	w := &world{t: tb, sc: &sc, dir: dir, logDir: filepath.Join(dir, "logs"), journal: filepath.Join(dir, "journal.jsonl"),
		downTill: map[string]time.Time{}, faults: map[string]int{}, started: time.Now(), keep: true}
	if err := os.MkdirAll(w.logDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if w.tlf, err = os.Create(filepath.Join(dir, "timeline.log")); err != nil {
		tb.Fatal(err)
	}
	w.tl = newTimeline(w.tlf)
	w.ps = newProcs(bin, w.logDir, w.tl)
	w.tl.logf("scenario %+v", sc)
	if err := w.setUp(); err != nil {
		w.close()
		tb.Fatalf("chaos %s: set up: %v\ntimeline:\n%s", sc.Name, err, tail(filepath.Join(dir, "timeline.log"), 50))
	}
	return w
}

// close kills every process, stops the storage, and removes the run's
// directory unless the run is to be kept (violations, or tb failed).
func (w *world) close() {
	w.shutdown()
	_ = w.tlf.Close()
	if !w.keep && !w.t.Failed() {
		_ = os.RemoveAll(w.dir)
	} else {
		w.t.Logf("chaos %s: run directory kept: %s (logs/, journal.jsonl, timeline.log)", w.sc.Name, w.dir)
	}
}

// finish waits until every accepted command is final (at most Settle),
// stops every process cleanly, reads storage and the journal, and checks
// the invariants.
func (w *world) finish(ctx context.Context, cl *clients, cmds []*command) *Report {
	rep := &Report{Scenario: w.sc.Name, Seed: w.sc.Seed, Faults: w.faults, Limit: w.sc.Limit, Skews: w.sc.Skews}
	settleStart := time.Now()
	// A process that exits on its own while the commands settle is
	// restarted, as a service manager would.
	supCtx, stopSup := context.WithCancel(ctx)
	supDone := make(chan struct{})
	go func() { defer close(supDone); w.supervise(supCtx) }()
	left, err := cl.settle(ctx, cmds, settleStart.Add(w.sc.Settle))
	stopSup()
	<-supDone
	rep.SettleTime = time.Since(settleStart)
	if err != nil {
		w.tl.logf("settle: %d commands not final after %s", len(left), w.sc.Settle)
	} else {
		w.tl.logf("settle: every accepted command is final after %s", rep.SettleTime.Round(time.Millisecond))
	}
	if w.sc.Sample > 0 {
		w.sampleIdle(ctx)
	}
	w.mu.Lock()
	rep.Mem = slices.Clone(w.mem)
	w.stopping = true
	w.mu.Unlock()
	// Stop cleanly (SIGTERM: the processes drain and record what they
	// still can), all at once.
	var stops sync.WaitGroup
	for _, role := range w.roles() {
		if p := w.ps.current(role); p != nil {
			stops.Add(1)
			go func() { defer stops.Done(); w.ps.stop(p, 20*time.Second) }()
		}
	}
	stops.Wait()

	snap, err := w.snapshot(cmds)
	if err != nil {
		w.t.Fatalf("chaos %s: read storage: %v", w.sc.Name, err)
	}
	j, err := readJournal(w.journal)
	if err != nil {
		w.t.Fatalf("chaos %s: read journal: %v", w.sc.Name, err)
	}
	rep.ClientRetries = cl.retries.Load()
	w.pauses.mu.Lock()
	rep.Pauses, rep.PausesFailed = append([]pauseWindow(nil), w.pauses.windows...), w.pauses.failed
	w.pauses.mu.Unlock()
	check(rep, cmds, snap, j, w.ps)
	w.mu.Lock()
	rep.Kills = w.kills
	w.mu.Unlock()
	_, rep.SelfExits, _ = w.ps.exitSummary()
	rep.LeaseGrowths = len(w.ps.grepLogs("growing the lease", 1<<20))
	if w.net != nil {
		rep.Injected503 = w.net.injected503()
	}
	rep.Duration = time.Since(w.started)
	_, leaks := memFigures(rep.Mem)
	for _, l := range leaks {
		rep.Violations = append(rep.Violations, Violation{Invariant: InvLeak, Detail: l})
	}
	w.keep = len(rep.Violations) > 0
	if w.keep {
		w.explainViolations(rep, snap, j)
	}
	return rep
}

// setUp picks serve's address and starts the storage.
func (w *world) setUp() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	w.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	switch w.sc.Store {
	case StoreEmbedded:
		w.dataDir = filepath.Join(w.dir, "data")
	case StoreAzure:
		w.az = &azuriteCtl{loc: filepath.Join(w.dir, "azurite"), tl: w.tl}
		if err := w.az.start(); err != nil {
			return err
		}
		var err error
		if w.net, err = newFaultNet(w.az.connString(), w.sc.Seed); err != nil {
			return err
		}
		for i := 1; i < w.sc.Accounts; i++ {
			a := &azuriteCtl{loc: filepath.Join(w.dir, fmt.Sprintf("azurite%d", i)), tl: w.tl}
			if err := a.start(); err != nil {
				return err
			}
			w.extra = append(w.extra, a)
		}
	default:
		return fmt.Errorf("unknown store %q", w.sc.Store)
	}
	return nil
}

// startAll starts every role and waits until serve answers.
func (w *world) startAll() error {
	for _, role := range w.roles() {
		if err := w.startRole(role); err != nil {
			return err
		}
	}
	return w.waitServe()
}

// waitServe waits (up to a minute) until this world's serve answers HTTP
// on w.addr: its log must say it listens there before /healthz counts,
// since freePort releases the port it picked and another world's Azurite,
// proxy or serve can take it before serve binds it (an answer from that
// process once passed for serve's). A serve that exits without listening
// (its port was taken) is started again on another free port, up to three
// times. It runs before the clients and the supervisor, which read w.addr.
func (w *world) waitServe() error {
	deadline := time.Now().Add(time.Minute)
	starts := 1
	for {
		p := w.ps.current("serve")
		switch {
		case w.listening(p):
			resp, err := http.Get("http://" + w.addr + "/healthz")
			if err == nil {
				_ = resp.Body.Close()
				w.tl.logf("serve answers on %s", w.addr)
				return nil
			}
		case !p.alive() && starts < 3:
			port, err := freePort()
			if err != nil {
				return err
			}
			old := w.addr
			w.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			w.tl.logf("serve exited without listening on %s (taken meanwhile?); starting it on %s", old, w.addr)
			if err := w.startRole("serve"); err != nil {
				return err
			}
			starts++
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("serve did not answer on %s within a minute; its log:\n%s", w.addr, tail(p.log, 30))
		}
		waitCtx(context.Background(), 50*time.Millisecond)
	}
}

// listening reports whether serve process p's log says it listens on
// w.addr (cmd/cmdq logs "cmdq serve: listening" with its URL once bound).
func (w *world) listening(p *proc) bool {
	b, err := os.ReadFile(p.log)
	return err == nil && bytes.Contains(b, []byte(`"url":"http://`+w.addr+`"`)) && bytes.Contains(b, []byte(`cmdq serve: listening`))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// roles are the processes of the run: serve, then w1…wN.
func (w *world) roles() []string {
	roles := []string{"serve"}
	if w.sc.Store == StoreAzure {
		for i := 1; i <= w.sc.Workers; i++ {
			roles = append(roles, fmt.Sprintf("w%d", i))
		}
	}
	return roles
}

// args returns the command line of a role.
func (w *world) args(role string) ([]string, error) {
	var args []string
	if role == "serve" {
		args = []string{"serve", "--addr", w.addr}
		if w.sc.ServeNoDemo {
			args = append(args, "--no-demo")
		}
		args = append(args, w.sc.ServeArgs...)
	} else {
		args = []string{"worker"}
		var i int
		if _, err := fmt.Sscanf(role, "w%d", &i); err == nil && i >= 1 && i <= len(w.sc.Skews) && w.sc.Skews[i-1] != 0 {
			args = append(args, "--test-clock-skew", w.sc.Skews[i-1].String())
		}
		if w.sc.Sample > 0 && w.spared(role) {
			// Port 0: the worker binds a free port itself and logs its URL
			// (metricsURL reads it), so no other world can take it first.
			args = append(args, "--metrics-addr", "127.0.0.1:0")
		}
	}
	switch w.sc.Store {
	case StoreEmbedded:
		args = append(args, "--store", "embedded", "--data", w.dataDir)
	case StoreAzure:
		cs, err := w.net.connString(role)
		if err != nil {
			return nil, err
		}
		args = append(args, "--store", "azure", "--azure-connection-string", cs)
		for _, a := range w.extra {
			args = append(args, "--azure-connection-string", a.connString())
		}
	}
	if w.sc.Shards > 1 {
		args = append(args, "--shards", fmt.Sprintf("%s=%d", commandsQueue, w.sc.Shards))
	}
	if w.sc.Limit > 0 {
		args = append(args, "--global-concurrency", fmt.Sprintf("%s=%d", limitedType, w.sc.Limit))
	}
	return append(args, "--log-format", "json", "--worker-id", "{worker}",
		"--demo-journal", w.journal, "--demo-lease", w.sc.Lease.String(),
		"--concurrency", strconv.Itoa(w.sc.Concurrency),
		"--max-poll-interval", "1s", "--drain-timeout", "2s"), nil
}

func (w *world) startRole(role string) error {
	args, err := w.args(role)
	if err != nil {
		return err
	}
	_, err = w.ps.start(role, args)
	return err
}

// supervise restarts a process that is not running once its down time is
// over: after a kill (the kill loop sets the down time) or after it exited
// on its own (for example because storage was unreachable when it started),
// as a service manager would.
func (w *world) supervise(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, role := range w.roles() {
			p := w.ps.current(role)
			if p == nil || p.alive() {
				continue // never started (a case starts its roles itself), or running
			}
			w.mu.Lock()
			till, stopping := w.downTill[role], w.stopping
			if p != nil && p.killed().IsZero() && till.IsZero() {
				// Exited on its own: restart after a second.
				till = time.Now().Add(time.Second)
				w.downTill[role] = till
				w.tl.logf("%s exited on its own; restarting it in 1s", p.worker)
			}
			w.mu.Unlock()
			if stopping || time.Now().Before(till) {
				continue
			}
			w.mu.Lock()
			delete(w.downTill, role)
			w.mu.Unlock()
			if err := w.startRole(role); err != nil {
				w.tl.logf("restart %s: %v", role, err)
			}
		}
	}
}

// killLoop SIGKILLs a process at random moments. On Azure the first worker
// is the usual victim (half of the kills); serve and the other workers
// share the rest.
func (w *world) killLoop(ctx context.Context, rng *rand.Rand) {
	roles := w.roles()
	for {
		if !waitRand(ctx, rng, w.sc.KillEvery) {
			return
		}
		role := roles[0]
		if len(roles) > 1 {
			if rng.IntN(2) == 0 {
				role = "w1"
			} else {
				role = roles[rng.IntN(len(roles))]
			}
		}
		if w.spared(role) {
			continue
		}
		p := w.ps.current(role)
		if p == nil || !p.alive() {
			continue
		}
		down := time.Duration(rng.Int64N(int64(1500 * time.Millisecond)))
		w.mu.Lock()
		w.downTill[role] = time.Now().Add(down)
		w.mu.Unlock()
		if w.ps.kill(p, "chaos") {
			w.mu.Lock()
			w.kills++
			w.mu.Unlock()
		}
	}
}

// waitRand waits a random duration in r (or until ctx ends: false).
func waitRand(ctx context.Context, rng *rand.Rand, r [2]time.Duration) bool {
	d := r[0]
	if r[1] > r[0] {
		d += time.Duration(rng.Int64N(int64(r[1] - r[0])))
	}
	return waitCtx(ctx, d)
}

func waitCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// faultLoop injects storage faults: rounds of every kind in a shuffled
// order, one at a time, each for its own duration, with a random gap.
func (w *world) faultLoop(ctx context.Context, rng *rand.Rand) {
	for {
		kinds := slices.Clone(w.sc.Faults)
		rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		for _, kind := range kinds {
			if !waitRand(ctx, rng, w.sc.FaultEvery) {
				return
			}
			if err := w.inject(ctx, rng, kind); err != nil {
				w.tl.logf("fault %s: %v", kind, err)
				continue
			}
			w.mu.Lock()
			w.faults[kind]++
			w.mu.Unlock()
		}
	}
}

// inject applies one fault for its duration and heals it. The fault ends
// early when ctx does.
func (w *world) inject(ctx context.Context, rng *rand.Rand, kind string) error {
	both := []string{svcQueue, svcTable}
	hold := func(d time.Duration) { waitCtx(ctx, d) }
	switch kind {
	case FaultLatency:
		lat, jit := between(rng, 100, 500), between(rng, 50, 300)
		d := between(rng, 3*time.Second, 8*time.Second)
		rm, err := w.net.addToxic(nil, both, toxic{Type: "latency", Stream: "downstream", Toxicity: 1, Attrs: map[string]any{"latency": int64(lat), "jitter": int64(jit)}})
		if err != nil {
			return err
		}
		w.tl.logf("fault %s: %d ms ± %d ms for %s", kind, lat, jit, d.Round(time.Millisecond))
		hold(d)
		rm()
	case FaultReset:
		d := between(rng, 2*time.Second, 4*time.Second)
		rm, err := w.net.addToxic(nil, both, toxic{Type: "reset_peer", Stream: "upstream", Toxicity: 0.3, Attrs: map[string]any{"timeout": int64(between(rng, 0, 50))}})
		if err != nil {
			return err
		}
		w.tl.logf("fault %s: 30%% of connections reset, for %s", kind, d.Round(time.Millisecond))
		hold(d)
		rm()
	case FaultStall:
		d := between(rng, 3*time.Second, 5*time.Second)
		after := between(rng, 1000, 3000)
		rm, err := w.net.addToxic(nil, both, toxic{Type: "timeout", Stream: "upstream", Toxicity: 1, Attrs: map[string]any{"timeout": int64(after)}})
		if err != nil {
			return err
		}
		w.tl.logf("fault %s: connections stall and close after %d ms, for %s", kind, after, d.Round(time.Millisecond))
		hold(d)
		rm()
	case FaultBlackHole:
		d := between(rng, 10*time.Second, 14*time.Second)
		rm, err := w.net.addToxic(nil, both, toxic{Type: "timeout", Stream: "upstream", Toxicity: 1, Attrs: map[string]any{"timeout": int64(0)}})
		if err != nil {
			return err
		}
		w.tl.logf("fault %s: storage never answers, for %s", kind, d.Round(time.Millisecond))
		hold(d)
		rm()
	case FaultRefused:
		d := between(rng, 3*time.Second, 8*time.Second)
		reopen := w.net.refuse(nil, both)
		w.tl.logf("fault %s: connections refused for %s", kind, d.Round(time.Millisecond))
		hold(d)
		return reopen()
	case Fault503:
		d := between(rng, 3*time.Second, 6*time.Second)
		w.net.burst503(0.5, 0.15)
		w.tl.logf("fault %s: 503 to 50%% of requests before and 15%% after they are applied, for %s", kind, d.Round(time.Millisecond))
		hold(d)
		w.net.burst503(0, 0)
	case FaultAzuriteRestart:
		d := between(rng, 2*time.Second, 5*time.Second)
		w.tl.logf("fault %s: stopping Azurite for %s", kind, d.Round(time.Millisecond))
		if err := w.az.stop(); err != nil {
			w.tl.logf("azurite stop: %v", err)
		}
		hold(d)
		return w.az.start()
	case FaultPartition:
		var ws []string
		for _, r := range w.roles() {
			if r != "serve" {
				ws = append(ws, r)
			}
		}
		if len(ws) == 0 {
			ws = []string{"serve"}
		}
		role := ws[rng.IntN(len(ws))]
		d := between(rng, 2*w.sc.Lease, 3*w.sc.Lease)
		rm, err := w.net.addToxic([]string{role}, both, toxic{Type: "timeout", Stream: "upstream", Toxicity: 1, Attrs: map[string]any{"timeout": int64(0)}})
		if err != nil {
			return err
		}
		w.tl.logf("fault %s: %s cut off from storage (renewals blocked) for %s", kind, role, d.Round(time.Millisecond))
		hold(d)
		rm()
		return w.net.dropConnections([]string{role}, both)
	default:
		return fmt.Errorf("unknown fault kind %q", kind)
	}
	return nil
}

// healAll ends every fault, makes sure Azurite runs and every process is
// running again.
func (w *world) healAll() error {
	if w.net != nil {
		if err := w.net.heal(); err != nil {
			return err
		}
	}
	for _, a := range append([]*azuriteCtl{w.az}, w.extra...) {
		if a != nil && !a.running() {
			if err := a.start(); err != nil {
				return err
			}
		}
	}
	w.mu.Lock()
	clear(w.downTill)
	w.mu.Unlock()
	for _, role := range w.roles() {
		if p := w.ps.current(role); p == nil || !p.alive() {
			if err := w.startRole(role); err != nil {
				return err
			}
		}
	}
	// From here on a process that exits is restarted by nobody: the
	// settle phase reports what that leaves undone.
	return nil
}

// shutdown kills every process and stops the storage and proxies.
func (w *world) shutdown() {
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
	w.ps.killAll("cleanup")
	if w.net != nil {
		w.net.close()
	}
	if w.az != nil {
		w.az.kill()
	}
	for _, a := range w.extra {
		a.kill()
	}
}

// snapshot opens the storage directly (not through the fault proxies) and
// reads what the run left.
func (w *world) snapshot(cmds []*command) (*snapshot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var st storage.Store
	var err error
	switch w.sc.Store {
	case StoreEmbedded:
		st, err = embedded.Open(w.dataDir, &embedded.Options{LockTimeout: 10 * time.Second})
	case StoreAzure:
		st, err = w.accounts(ctx)
	}
	if err != nil {
		return nil, err
	}
	defer st.Close()
	ids := make([]string, 0, len(cmds))
	for _, c := range cmds {
		ids = append(ids, c.ID)
	}
	return readSnapshot(ctx, st, "cmdq", w.sc.Shards, ids)
}

// explainViolations logs every violation with the command's history, its
// journalled executions and the log lines that name it, then the timeline.
func (w *world) explainViolations(rep *Report, snap *snapshot, j *journal) {
	const perInvariant = 8
	shown := map[string]int{}
	var b strings.Builder
	for _, v := range rep.Violations {
		shown[v.Invariant]++
		if shown[v.Invariant] > perInvariant {
			continue
		}
		fmt.Fprintf(&b, "\n[%s] %s: %s\n", v.Invariant, v.CommandID, v.Detail)
		if h := snap.cmds[v.CommandID]; h != nil {
			fmt.Fprintf(&b, "  history:\n%s\n", h)
		}
		if xs := j.byID[v.CommandID]; len(xs) > 0 {
			b.WriteString("  journal:\n")
			for _, x := range xs {
				fmt.Fprintf(&b, "    %s\n", x)
			}
		}
		if v.CommandID != "" {
			if lines := w.ps.grepLogs(v.CommandID, 12); len(lines) > 0 {
				b.WriteString("  logs:\n")
				for _, l := range lines {
					if len(l) > 400 {
						l = l[:400] + "…"
					}
					fmt.Fprintf(&b, "    %s\n", l)
				}
			}
		}
	}
	for inv, n := range shown {
		if n > perInvariant {
			fmt.Fprintf(&b, "\n[%s] … and %d more\n", inv, n-perInvariant)
		}
	}
	b.WriteString("\nlast log lines of each process:\n")
	for _, role := range w.roles() {
		if p := w.ps.current(role); p != nil {
			fmt.Fprintf(&b, "  %s (%s):\n%s\n", p.worker, p.log, indent(tail(p.log, 6)))
		}
	}
	_, _, notes := w.ps.exitSummary()
	if len(notes) > 0 {
		b.WriteString("\nprocesses that exited on their own:\n")
		for _, n := range notes {
			b.WriteString("  " + n + "\n")
		}
	}
	fmt.Fprintf(&b, "\ntimeline (last 80 lines; all in %s):\n%s\n", filepath.Join(w.dir, "timeline.log"), tail(filepath.Join(w.dir, "timeline.log"), 80))
	w.t.Log(b.String())
}

// azuriteCtl runs Azurite with its data on disk, so it can be stopped and
// started again on the same endpoints.
type azuriteCtl struct {
	loc string
	tl  timeline

	mu    sync.Mutex
	inst  *emulator.Instance
	ports [3]int
	conn  string
}

func (a *azuriteCtl) start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inst != nil {
		return nil
	}
	// Node can take long to start on a loaded machine: wait for it.
	o := emulator.Options{Location: a.loc, QueuePort: a.ports[1], TablePort: a.ports[2], Timeout: 2 * time.Minute} // a new blob port: unused, and maybe taken since
	var errs []error
	for try := 0; try < 5; try++ {
		inst, err := emulator.StartWith(o)
		if err == nil {
			a.inst = inst
			b, q, t := inst.Ports()
			a.ports = [3]int{b, q, t}
			a.conn = inst.ConnectionString
			a.tl.logf("azurite running (queue port %d, table port %d)", q, t)
			return nil
		}
		if errors.Is(err, emulator.ErrNotInstalled) {
			return err
		}
		errs = append(errs, err)
		t := time.NewTimer(time.Duration(try+1) * 500 * time.Millisecond)
		<-t.C
	}
	return fmt.Errorf("azurite would not start: %w", errors.Join(errs...))
}

func (a *azuriteCtl) stop() error {
	a.mu.Lock()
	inst := a.inst
	a.inst = nil
	a.mu.Unlock()
	if inst == nil {
		return nil
	}
	err := inst.Shutdown(20 * time.Second)
	a.tl.logf("azurite stopped")
	return err
}

func (a *azuriteCtl) kill() {
	a.mu.Lock()
	inst := a.inst
	a.inst = nil
	a.mu.Unlock()
	if inst != nil {
		inst.Stop()
	}
}

func (a *azuriteCtl) running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inst != nil
}

func (a *azuriteCtl) connString() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conn
}
