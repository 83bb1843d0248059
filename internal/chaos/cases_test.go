package chaos

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

// The cases in this file each reproduce, deterministically, one fault the
// random runs of TestChaos met, with the same processes, proxies and
// invariant checks. Each failed on the code it was written against; see
// docs/reliability.md.

// startWorld starts serve (and the named workers) of a one-command case.
func startWorld(t *testing.T, sc Scenario, roles ...string) *world {
	t.Helper()
	requireAzurite(t)
	w := newWorld(t, sc)
	if err := w.startRole("serve"); err != nil {
		w.close()
		t.Fatal(err)
	}
	if err := w.waitServe(); err != nil {
		w.close()
		t.Fatal(err)
	}
	for _, r := range roles {
		if err := w.startRole(r); err != nil {
			w.close()
			t.Fatal(err)
		}
	}
	return w
}

func isBatch(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/$batch")
}

// TestRetriedWriteAfterLostAnswer: a worker's first table batch (the
// command's `started` and `step_completed 1`) is applied, but its answer is
// lost (503 after the write landed); the driver retries it. The history
// must hold each event once (invariant event-once).
func TestRetriedWriteAfterLostAnswer(t *testing.T) {
	t.Parallel() // its own world (see TestChaos)
	w := startWorld(t, Scenario{Name: "retried-write", Store: StoreAzure, Seed: 1, Workers: 1, ServeNoDemo: true, Settle: time.Minute})
	defer w.close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 8))
	c := oneCommand(rng, "demo.steps", `{"steps":2,"failAt":0}`)
	cl := newClients("http://"+w.addr, w.tl)
	cl.issue(ctx, c, time.Now().Add(time.Minute), rng)
	if !c.isAccepted() {
		t.Fatalf("the command was not accepted: %s %s", c.refused, c.lastErr)
	}
	w.net.failNext(svcTable, 1, true, isBatch)
	w.tl.logf("armed: the next table batch is applied and answered 503")
	if err := w.startRole("w1"); err != nil {
		t.Fatal(err)
	}
	rep := w.finish(ctx, cl, []*command{c})
	t.Log("\n" + rep.Figures())
	if rep.Injected503 != 1 {
		t.Fatalf("the fault was not injected (503 answers: %d)", rep.Injected503)
	}
	reportViolations(t, rep)
}

// TestAcceptedNeverStranded: the API stores a command but can neither
// enqueue its message (the one try of the issue's enqueue answered 503)
// nor write the reconciler's marker (each of its tries answered 503). The
// API must not answer 2xx then: nothing durable would queue the command.
// It answers 503; the client retries with the same id and body (the
// documented contract), and the re-issue enqueues it (a recovery). What
// matters: every 2xx came once the command was enqueued or marked (here:
// 503 first, then 2xx), the command completes (invariant accepted-final),
// and the case needed exactly the faults it armed. With the Issuer of
// before ff43ff2 (202 without a marker) the first answer is 202 and the
// command is stranded.
func TestAcceptedNeverStranded(t *testing.T) {
	t.Parallel() // its own world (see TestChaos)
	w := startWorld(t, Scenario{Name: "stranded", Store: StoreAzure, Seed: 1, Settle: time.Minute})
	defer w.close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	c := oneCommand(rng, "demo.echo", `{"case":"stranded"}`)
	// The issue's enqueue is sent once (no transport retries), and it is
	// the first enqueue of the run: only it is answered 503 (the retry's
	// recovery enqueue comes after that answer). It is visible, or, handed
	// off to serve's own processor, invisible for the demo lease: its
	// visibility does not tell it from a recovery's. The marker upsert is
	// tried as often as an API request's storage calls are.
	const enqueueTries, markerTries = 1, 1 + api.DefaultStorageMaxRetries
	w.net.failNext(svcQueue, enqueueTries, false, func(r *http.Request) bool {
		return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages")
	})
	w.net.failNext(svcTable, markerTries, false, func(r *http.Request) bool {
		return r.Method != http.MethodGet && strings.Contains(r.URL.Path, "~unqueued")
	})
	w.tl.logf("armed: the issue's enqueue and %d marker writes answered 503", markerTries)
	cl := newClients("http://"+w.addr, w.tl)
	cl.issue(ctx, c, time.Now().Add(time.Minute), rng)
	if !c.isAccepted() {
		t.Fatalf("the command was not accepted: %s %s", c.refused, c.lastErr)
	}
	w.tl.logf("answers %v", c.codes)
	rep := w.finish(ctx, cl, []*command{c})
	t.Log("\n" + rep.Figures())
	reportViolations(t, rep)
	if len(c.codes) != 2 || c.codes[0] != http.StatusServiceUnavailable || c.codes[1]/100 != 2 {
		t.Errorf("answers %v: want 503 (neither enqueued nor marked), then a 2xx for the retry that enqueued it", c.codes)
	}
	if rep.Injected503 != enqueueTries+markerTries {
		t.Errorf("503 answers injected: %d, want %d (the enqueue's one try and the marker's %d)", rep.Injected503, enqueueTries+markerTries, markerTries)
	}
}

// TestDeleteRetryIsNotALostLease: three commands complete, and the delete
// of each message is applied but answered 503, so the driver retries it and
// Azure answers 404 (the message is gone). Nobody else held those messages:
// no lease was lost, so the demo lease must not grow (it grows after 3 lost
// leases of one type).
func TestDeleteRetryIsNotALostLease(t *testing.T) {
	t.Parallel() // its own world (see TestChaos)
	w := startWorld(t, Scenario{Name: "delete-retry", Store: StoreAzure, Seed: 1, Settle: time.Minute})
	defer w.close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 10))
	const n = 3 // model.DefaultLostLeaseThreshold
	w.net.failNext(svcQueue, n, true, func(r *http.Request) bool {
		return r.Method == http.MethodDelete && strings.Contains(r.URL.Path, "/messages/")
	})
	cl := newClients("http://"+w.addr, w.tl)
	var cmds []*command
	for i := range n {
		c := oneCommand(rng, "demo.echo", `{"i":`+strconv.Itoa(i)+`}`)
		cl.issue(ctx, c, time.Now().Add(time.Minute), rng)
		if !c.isAccepted() {
			t.Fatalf("command %d was not accepted: %s %s", i, c.refused, c.lastErr)
		}
		cmds = append(cmds, c)
	}
	// finish stops serve with SIGTERM, which lets it finish the retried
	// deletes before it exits; its log then says whether the lease grew.
	rep := w.finish(ctx, cl, cmds)
	t.Log("\n" + rep.Figures())
	if rep.Injected503 != n {
		t.Fatalf("the faults were not all injected (503 answers: %d, want %d)", rep.Injected503, n)
	}
	reportViolations(t, rep)
	if grown := w.ps.grepLogs("growing the lease", 5); len(grown) > 0 {
		t.Errorf("the lease grew though no lease was lost (every delete's first try landed):\n%s", strings.Join(grown, "\n"))
	}
}

// waitQueueEmpty waits (at most d) until the commands queue holds no
// message, visible or delayed, reading Azurite directly.
func waitQueueEmpty(t *testing.T, w *world, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	st, err := azure.Open(ctx, azure.Config{ConnectionString: w.az.connString()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q, err := st.Queue(ctx, "cmdq-"+commandsQueue)
	if err != nil {
		t.Fatal(err)
	}
	for {
		n, err := q.ApproximateCount(ctx)
		if err == nil && n == 0 {
			w.tl.logf("the queue is empty")
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the queue still holds %d messages after %s (%v); timeline:\n%s", n, d, err, tail(w.tlf.Name(), 40))
		}
		waitCtx(ctx, 200*time.Millisecond)
	}
}

// TestDuplicateMessagesRunOnce: a command gets a second queue message
// while its first one is being handled, in the two ways the suite met,
// with two idle workers (one handler at a time each) ready to take it:
//
//   - lost-answer: the issue's enqueue lands but its answer is lost (503
//     after landing);
//   - re-issue: the client sends the command again while its handler
//     runs, before its lazy `started` is written, so it still reads
//     pending and never started.
//
// Each command's handler must run once, and every second message must
// have been handled (the queue empty) before the checks. Before the fix
// the driver's transport retry (lost-answer) or the re-issue put the second
// message on the queue at once; the idle worker took it and ran the handler
// at the same time as the first (invariant duplicate-explained: two
// executions with the same attempt, nothing in the history explaining
// them).
func TestDuplicateMessagesRunOnce(t *testing.T) {
	t.Parallel() // its own world (see TestChaos)
	w := startWorld(t, Scenario{Name: "duplicates", Store: StoreAzure, Seed: 1, Workers: 2, Concurrency: 1, ServeNoDemo: true,
		ServeArgs: []string{"--recovery-delay", "6s"}, Settle: time.Minute}, "w1", "w2")
	defer w.close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	cl := newClients("http://"+w.addr, w.tl)

	lost := oneCommand(rng, "demo.sleep", `{"ms":3000}`)
	w.net.failNext(svcQueue, 1, true, func(r *http.Request) bool {
		return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages")
	})
	w.tl.logf("armed: the next enqueue is applied and answered 503")
	cl.issue(ctx, lost, time.Now().Add(time.Minute), rng)
	if !lost.isAccepted() {
		t.Fatalf("lost-answer: the command was not accepted: %s %s", lost.refused, lost.lastErr)
	}
	w.tl.logf("lost-answer: accepted with HTTP %d after %d tries", lost.code, lost.tries)
	waitJournal(t, w, lost.ID, time.Minute, "lost-answer: an execution ended", func(xs []*execution) bool {
		return len(xs) > 0 && xs[0].End >= 0
	})

	again := oneCommand(rng, "demo.sleep", `{"ms":3001}`)
	cl.issue(ctx, again, time.Now().Add(time.Minute), rng)
	if !again.isAccepted() {
		t.Fatalf("re-issue: the command was not accepted: %s %s", again.refused, again.lastErr)
	}
	waitJournal(t, w, again.ID, time.Minute, "re-issue: the handler began", func(xs []*execution) bool { return len(xs) > 0 })
	code, err := cl.post(ctx, again)
	if err != nil || code != http.StatusOK {
		t.Fatalf("re-issue while the handler runs: HTTP %d %v, want 200", code, err)
	}
	w.tl.logf("re-issue: sent again while the handler runs (HTTP %d)", code)

	waitQueueEmpty(t, w, time.Minute)
	rep := w.finish(ctx, cl, []*command{lost, again})
	t.Log("\n" + rep.Figures())
	if rep.Injected503 != 1 {
		t.Fatalf("the lost answer was not injected (503 answers: %d)", rep.Injected503)
	}
	reportViolations(t, rep)
	if rep.Executions != 2 {
		t.Errorf("%d handler executions for two commands, want one each", rep.Executions)
	}
}

// TestAccountDown is the case of one storage account down, each in turn:
// serve and a worker on two accounts (two Azurite instances; the commands
// queue in 2 shards), commands issued all along, the second account's
// Azurite stopped 6 s in for 10 s, then the first account's (the one that
// held the shared rows: queue control rows, markers, day registrations,
// heartbeats) 22 s in for 10 s (each longer if the checks need it on a
// slow machine). While an account is down, commands on the other are
// accepted and completed (12 issued then must all complete before it
// returns) and /healthz names the failing account; afterwards every
// accepted command is final, none lost or run twice (the invariants).
func TestAccountDown(t *testing.T) {
	t.Parallel() // its own world (see TestChaos)
	requireAzurite(t)
	rep := Scenario{Name: "account-down", Store: StoreAzure, Seed: seed(t), Chaos: 36 * time.Second, Commands: 288, Workers: 1,
		Accounts: 2, Shards: 2, AccountDown: [2]time.Duration{6 * time.Second, 10 * time.Second},
		FirstAccountDown: [2]time.Duration{22 * time.Second, 10 * time.Second}, Settle: 90 * time.Second}.Run(t)
	t.Log("\n" + rep.Figures())
	reportViolations(t, rep)
}

// TestServeStartsAgainWhenItsPortIsTaken: freePort releases the port it
// picks, and another world's process can take it before serve binds it.
// Here an HTTP server that answers every request (200 on /healthz, 404 on
// the rest) holds serve's port: its answers must not pass for serve's.
// Serve cannot listen and exits; waitServe starts it on another port, and
// the world's address is then that serve's.
func TestServeStartsAgainWhenItsPortIsTaken(t *testing.T) {
	t.Parallel()
	w := newWorld(t, Scenario{Name: "port-taken", Store: StoreEmbedded, Seed: 1})
	w.keep = false // no report to keep the directory for: kept only if the test fails
	defer w.close()
	// The foreign server takes a port of its own (another world may have
	// taken the one the world picked since), and serve is given that port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.addr = ln.Addr().String()
	foreign := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return // 200
		}
		http.NotFound(rw, r)
	})}
	go func() { _ = foreign.Serve(ln) }()
	defer foreign.Close()
	taken := w.addr
	if err := w.startRole("serve"); err != nil {
		t.Fatal(err)
	}
	if err := w.waitServe(); err != nil {
		t.Fatal(err)
	}
	if w.addr == taken {
		t.Fatalf("waitServe accepted the answer of the process holding %s", taken)
	}
	resp, err := http.Get("http://" + w.addr + "/v1/commands/0b9e1c52-5a0f-4c8e-9d61-3f2a7c4b8e10")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Type string `json:"type"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != http.StatusNotFound || p.Type == "" {
		t.Fatalf("GET of an unknown command on %s: %d, problem type %q (%v): want cmdq's 404 problem", w.addr, resp.StatusCode, p.Type, err)
	}
}
