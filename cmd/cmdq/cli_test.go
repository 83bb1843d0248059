package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/azurite"
)

var (
	uuidLine    = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	summaryLine = regexp.MustCompile(`^cmdq worker: processed (\d+) \(completed (\d+), failed (\d+), poisoned (\d+), released (\d+), interrupted (\d+)\) in [0-9.]+m?s; stopped: (deadline|idle|cancelled)\n$`)
)

// sendID runs `cmdq send` and returns the ID it printed.
func sendID(t *testing.T, env []string, args ...string) string {
	t.Helper()
	r := mustRun(t, env, append([]string{"send"}, args...)...)
	id := strings.SplitN(r.stdout, "\n", 2)[0]
	if !uuidLine.MatchString(id) {
		t.Fatalf("cmdq send printed %q, want an ID first", r.stdout)
	}
	return id
}

// TestWorkerRunFor: `cmdq worker --run-for 5s` exits 0 before 5 s with its
// summary line, with work on the queue and without, every time.
func TestWorkerRunFor(t *testing.T) {
	t.Parallel()
	type run struct {
		name  string
		seed  int // commands to issue before the run
		azure bool
	}
	runs := []run{{"empty-1", 0, false}, {"empty-2", 0, false}, {"empty-3", 0, false},
		{"work-1", 3, false}, {"work-2", 3, false}, {"work-3", 3, false}, {"azure-work", 3, true}, {"azure-empty", 0, true}}
	for _, rn := range runs {
		t.Run(rn.name, func(t *testing.T) {
			t.Parallel()
			store := []string{"--store", "embedded", "--data", t.TempDir()}
			if rn.azure {
				store = []string{"--store", "azure", "--prefix", randomPrefix(), "--azure-connection-string", azurite.ConnectionString(t)}
			}
			var ids []string
			if rn.seed > 0 {
				ids = append(ids,
					sendID(t, nil, append([]string{"demo.sleep", "--params", `{"ms":300}`}, store...)...),
					sendID(t, nil, append([]string{"demo.echo"}, store...)...),
					sendID(t, nil, append([]string{"demo.steps", "--params", `{"steps":2}`}, store...)...))
			}
			r := runCmdq(t, 20*time.Second, nil, append([]string{"worker", "--run-for", "5s", "--log-format", "json"}, store...)...)
			if r.code != 0 || r.elapsed >= 5*time.Second {
				t.Fatalf("worker --run-for 5s: exit %d after %s\nstdout:\n%s\nstderr:\n%s", r.code, r.elapsed, r.stdout, r.stderr)
			}
			m := summaryLine.FindStringSubmatch(r.stdout)
			if m == nil {
				t.Fatalf("worker output %q is not the one-line summary", r.stdout)
			}
			processed, _ := strconv.Atoi(m[1])
			completed, _ := strconv.Atoi(m[2])
			if rn.seed == 0 && (processed != 0 || m[7] != "idle") {
				t.Errorf("empty queue: summary %q", r.stdout)
			}
			if rn.seed > 0 && (processed != rn.seed || completed != rn.seed) {
				t.Errorf("queue with %d commands: summary %q", rn.seed, r.stdout)
			}
			for _, id := range ids {
				st := mustRun(t, nil, append([]string{"status", id, "--json"}, store...)...)
				var s cmdq.Status
				if err := json.Unmarshal([]byte(st.stdout), &s); err != nil || s.State != cmdq.StateCompleted {
					t.Errorf("after the worker, %s: %s (%v)", id, st.stdout, err)
				}
			}
		})
	}
}

// TestCLIAgainstServer runs send, status and poison against a real server.
func TestCLIAgainstServer(t *testing.T) {
	t.Parallel()
	srv := startServe(t, serveOpts{args: []string{"--poison-ceiling", "2"}})
	env := []string{"CMDQ_SERVER=" + srv.URL}
	// serve says where the operator page is.
	if !strings.Contains(srv.stderr.String(), `"ui":"`+srv.URL+`/ui/"`) {
		t.Errorf("serve's listening line does not give the /ui/ URL:\n%s", srv.stderr.String())
	}

	// send --wait: the ID, then the final status and the output.
	r := mustRun(t, env, "send", "demo.echo", "--params", `{"hello":"cli"}`, "--wait")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !uuidLine.MatchString(lines[0]) || lines[1] != lines[0]+" completed (attempts 1, step 1)" || lines[2] != `output {"hello":"cli"}` {
		t.Fatalf("send --wait output %q", r.stdout)
	}
	echoID := lines[0]
	// status: header and timeline.
	r = mustRun(t, env, "status", echoID)
	for _, want := range []string{"command  " + echoID, "type     demo.echo", "status   completed (attempts 1, step 1)", "created", "started", `step_completed  attempt 1  step 1  "echo {\"hello\":\"cli\"}"`, "completed       attempt 1",
		// demo.echo records its params as its output (Run.SetOutput).
		`output   {"hello":"cli"}`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, r.stdout)
		}
	}
	// send with a fixed ID twice: the same ID, and a note that it existed.
	fixed := newUUID()
	if id := sendID(t, env, "demo.echo", "--id", fixed); id != fixed {
		t.Errorf("send --id printed %s", id)
	}
	r = mustRun(t, env, "send", "demo.echo", "--id", fixed)
	if strings.TrimSpace(r.stdout) != fixed || !strings.Contains(r.stderr, "already existed") {
		t.Errorf("re-send: stdout %q stderr %q", r.stdout, r.stderr)
	}
	// Bad input: clear messages, exit 1.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "demo.echo", "--params", "{oops"}, "not valid JSON"},
		{[]string{"send", "demo.nope"}, "unknown command type"},
		{[]string{"send", "demo.sleep", "--params", `{"ms":"x"}`}, "Params do not match"},
		{[]string{"status", "not-an-id"}, "not a command ID"},
		{[]string{"status", newUUID()}, "no command with this ID"},
		{[]string{"poison", "rm", newUUID()}, "no command with this ID"},
		{[]string{"poison", "requeue", echoID}, "not poisoned"},
	} {
		r := runCmdq(t, 20*time.Second, env, c.args...)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("cmdq %s: exit %d, stderr %q, want 1 and %q", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}

	// status --watch follows demo.steps through its failure to the end.
	sid := sendID(t, env, "demo.steps", "--params", `{"steps":3,"failAt":2}`)
	r = mustRun(t, env, "status", sid, "--watch")
	for _, want := range []string{"step_completed  attempt 1  step 1", "failed          attempt 1", "planned failure at step 2",
		"step_completed  attempt 2  step 2", "step_completed  attempt 2  step 3", sid + " completed (attempts 2, step 3)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status --watch output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Count(r.stdout, "  created") != 1 {
		t.Errorf("status --watch printed an event twice:\n%s", r.stdout)
	}

	// poison: send --wait on a command that keeps failing exits 1.
	r = runCmdq(t, 30*time.Second, env, "send", "demo.fail", "--params", `{"times":9}`, "--wait")
	fid := strings.SplitN(r.stdout, "\n", 2)[0]
	if r.code != 1 || !uuidLine.MatchString(fid) || !strings.Contains(r.stderr, "ended poisoned") || !strings.Contains(r.stderr, "cmdq status "+fid) {
		t.Fatalf("send --wait of a poisoned command: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = mustRun(t, env, "poison", "ls", "--wide")
	if !strings.Contains(r.stdout, "COMMAND") || !regexp.MustCompile(fid+`\s+demo\.fail\s+2\s+.*attempts exhausted`).MatchString(r.stdout) {
		t.Errorf("poison ls:\n%s", r.stdout)
	}
	r = mustRun(t, env, "poison", "ls", "--type", "demo.echo")
	if strings.TrimSpace(r.stdout) != "no poisoned commands" {
		t.Errorf("poison ls --type demo.echo: %q", r.stdout)
	}
	r = mustRun(t, env, "poison", "show", fid, "--json")
	var pe cmdq.PoisonEntry
	if err := json.Unmarshal([]byte(r.stdout), &pe); err != nil || pe.CommandID != fid || pe.Reason != "attempts exhausted" {
		t.Errorf("poison show --json: %s (%v)", r.stdout, err)
	}
	// Without --json, labelled lines a person reads, and what to do next.
	r = mustRun(t, env, "poison", "show", fid)
	for _, want := range []string{"command      " + fid, "type         demo.fail", "status       poisoned (dequeued 2 times)", "reason       attempts exhausted",
		"last error   attempt 2 of at most 2 failed: demo.fail: planned failure 2 of 9", "queue        commands", "next: cmdq status " + fid} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("poison show lacks %q:\n%s", want, r.stdout)
		}
	}
	if !regexp.MustCompile(`(?m)^poisoned at  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(r.stdout) {
		t.Errorf("poison show: the time is not UTC with a Z:\n%s", r.stdout)
	}
	r = mustRun(t, env, "poison", "requeue", fid)
	if strings.TrimSpace(r.stdout) != fid+" requeued" {
		t.Errorf("poison requeue: %q", r.stdout)
	}
	waitState(t, srv.URL, "", fid, "poisoned", 30*time.Second)
	r = mustRun(t, env, "poison", "rm", fid)
	if strings.TrimSpace(r.stdout) != fid+" discarded" {
		t.Errorf("poison rm: %q", r.stdout)
	}
	r = mustRun(t, env, "poison", "ls", "--json")
	var page cmdq.PoisonPage
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Entries) != 0 {
		t.Errorf("poison ls --json after rm: %s (%v)", r.stdout, err)
	}
	r = mustRun(t, env, "status", fid)
	for _, want := range []string{"discarded (attempts 2)", "requeued", "by api:", "reason: discarded by operator"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status of the discarded command lacks %q:\n%s", want, r.stdout)
		}
	}

	// Direct access to the embedded store that serve holds fails and says to use --server.
	r = runCmdq(t, 20*time.Second, nil, "status", echoID, "--store", "embedded", "--data", srv.Data)
	if r.code != 1 || !strings.Contains(r.stderr, "in use") || !strings.Contains(r.stderr, "--server") {
		t.Errorf("direct status on a held store: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCmdq(t, 20*time.Second, nil, "worker", "--run-for", "2s", "--data", srv.Data)
	if r.code != 1 || !strings.Contains(r.stderr, "--server") {
		t.Errorf("worker on a held store: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestCLITokens: the CLI sends --token, and a role the route lacks is an error.
func TestCLITokens(t *testing.T) {
	t.Parallel()
	srv := startServe(t, serveOpts{env: []string{"CMDQ_TOKENS=" + testTokens}})
	id := sendID(t, nil, "demo.echo", "--server", srv.URL, "--token", apitest.IssuerToken)
	r := runCmdq(t, 20*time.Second, nil, "status", id, "--server", srv.URL, "--token", apitest.IssuerToken)
	if r.code != 1 || !strings.Contains(r.stderr, `needs the "reader" role`) {
		t.Errorf("status with the issuer token: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCmdq(t, 20*time.Second, nil, "poison", "ls", "--server", srv.URL)
	if r.code != 1 || !strings.Contains(r.stderr, "--token") {
		t.Errorf("poison ls without token: exit %d, stderr %q", r.code, r.stderr)
	}
	mustRun(t, []string{"CMDQ_TOKEN=" + apitest.OperatorToken, "CMDQ_SERVER=" + srv.URL}, "poison", "ls")
	mustRun(t, nil, "status", id, "--server", srv.URL, "--token", apitest.ReaderToken)
}

// TestServeSIGTERMDrains: SIGTERM while a handler runs lets it finish, and
// serve exits 0; the store then opens directly and shows it completed.
func TestServeSIGTERMDrains(t *testing.T) {
	t.Parallel()
	srv := startServe(t, serveOpts{})
	id := newUUID()
	if r := do(t, http.MethodPost, srv.URL+"/v1/commands", "", `{"id":"`+id+`","type":"demo.sleep","params":{"ms":8000}}`); r.code != 202 {
		t.Fatalf("POST: %d %s", r.code, r.body)
	}
	// The running state is written once a handler has run for 1 s (the
	// 8 s handler leaves a loaded machine's poll a wide window to see it).
	waitState(t, srv.URL, "", id, "running", 10*time.Second)
	start := time.Now()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.done:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not exit within 20s of SIGTERM")
	}
	if code := exitCode(srv.err); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM:\n%s", code, srv.stderr.String())
	}
	if !strings.Contains(srv.stderr.String(), "draining") || !strings.Contains(srv.stderr.String(), "cmdq serve: stopped") {
		t.Errorf("serve's log does not show the drain:\n%s", srv.stderr.String())
	}
	t.Logf("serve exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	r := mustRun(t, nil, "status", id, "--json", "--store", "embedded", "--data", srv.Data)
	var s cmdq.Status
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.State != cmdq.StateCompleted || s.Attempts != 1 {
		t.Errorf("after the drain the command is %s (%v), want completed on attempt 1", r.stdout, err)
	}
}

// TestEnvOverridesDefaultsAndFlagsWin checks the CMDQ_<FLAG> binding: a
// variable replaces a default, a flag beats a variable, a bad value names the
// variable.
func TestEnvOverridesDefaultsAndFlagsWin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// CMDQ_STORE and CMDQ_DATA make send go to the store directly.
	env := []string{"CMDQ_STORE=embedded", "CMDQ_DATA=" + dir}
	id := sendID(t, env, "demo.echo")
	r := mustRun(t, env, "status", id, "--json")
	if !strings.Contains(r.stdout, `"status": "pending"`) {
		t.Errorf("status via env-selected store: %s", r.stdout)
	}
	// --data on the command line wins over CMDQ_DATA: another (empty)
	// directory, which status reads without making a store of it.
	other := t.TempDir()
	r = runCmdq(t, 20*time.Second, env, "status", id, "--data", other)
	if r.code != 1 || !strings.Contains(r.stderr, "no cmdq store in "+other+": nothing issued yet?") {
		t.Errorf("--data over CMDQ_DATA: exit %d stderr %q", r.code, r.stderr)
	}
	r = runCmdq(t, 20*time.Second, []string{"CMDQ_RUN_FOR=soon"}, "worker", "--data", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "CMDQ_RUN_FOR") {
		t.Errorf("bad CMDQ_RUN_FOR: exit %d stderr %q", r.code, r.stderr)
	}
	r = mustRun(t, nil, "serve", "--help")
	for _, want := range []string{"[env CMDQ_ADDR]", `(default "127.0.0.1:8080")`, "[env CMDQ_TOKENS]", `(default "./cmdq-data")`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
}

// TestWorkerSharesAzureQueue: two workers on one Azurite queue process every
// command exactly once between them.
func TestWorkerSharesAzureQueue(t *testing.T) {
	t.Parallel()
	store := []string{"--store", "azure", "--prefix", randomPrefix(), "--azure-connection-string", azurite.ConnectionString(t)}
	const n = 6
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, sendID(t, nil, append([]string{"demo.sleep", "--params", fmt.Sprintf(`{"ms":%d}`, 100+50*i)}, store...)...))
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		total   int
		results []result
	)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := runCmdq(t, 20*time.Second, nil, append([]string{"worker", "--run-for", "4s", "--worker-id", fmt.Sprintf("w%d", w)}, store...)...)
			mu.Lock()
			defer mu.Unlock()
			results = append(results, r)
			if m := summaryLine.FindStringSubmatch(r.stdout); m != nil {
				c, _ := strconv.Atoi(m[2])
				total += c
			}
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r.code != 0 || !summaryLine.MatchString(r.stdout) || r.elapsed >= 4*time.Second {
			t.Errorf("worker: exit %d after %s, stdout %q stderr %q", r.code, r.elapsed, r.stdout, r.stderr)
		}
	}
	if total != n {
		t.Errorf("the two workers completed %d commands, want %d", total, n)
	}
	for _, id := range ids {
		r := mustRun(t, nil, append([]string{"status", id, "--json"}, store...)...)
		var s cmdq.Status
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.State != cmdq.StateCompleted || s.Attempts != 1 {
			t.Errorf("%s: %s (%v)", id, r.stdout, err)
		}
	}
}

// TestWorkerRecoveryDelayFlag: worker takes --recovery-delay like serve
// (a worker recovers commands of types it does not know with it) and
// refuses a value out of range with a message that names the limits,
// before it opens the store.
func TestWorkerRecoveryDelayFlag(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"0s", "-1s", "200h"} {
		var out, errb bytes.Buffer
		data := filepath.Join(t.TempDir(), "never")
		err := runInProcess(t, safeWriter{w: &out}, safeWriter{w: &errb}, "worker", "--recovery-delay", bad, "--data", data)
		if err == nil || !strings.Contains(err.Error(), "--recovery-delay "+bad) || !strings.Contains(err.Error(), "at most") {
			t.Errorf("worker --recovery-delay %s: got %v, want the flag's range error", bad, err)
		}
		if _, err := os.Stat(data); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("worker --recovery-delay %s opened the store (%s: %v)", bad, data, err)
		}
	}
	c, _, err := newRootCmd().Find([]string{"worker"})
	if err != nil {
		t.Fatal(err)
	}
	f := c.Flags().Lookup("recovery-delay")
	if f == nil || f.DefValue != "30s" {
		t.Fatalf("worker --recovery-delay: %+v, want a flag defaulting to 30s", f)
	}
}

// TestQueueWeightsFlag: a malformed --queue-weights, a weight outside
// 1..1000 and a weight for a queue no command type of the process routes
// to stop worker and serve before they start (exit 1, a message naming
// the problem); a good one (the demo types' queue) runs.
func TestQueueWeightsFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cmd, value, want string
	}{
		{"worker", "critical", "give queue=WEIGHT pairs"},
		{"worker", "commands=x", "give queue=WEIGHT pairs"},
		{"worker", "commands=1,commands=2", "given twice"},
		{"worker", "commands=0", `QueueWeights["commands"] = 0 is outside 1..1000`},
		{"serve", "commands=-3", `QueueWeights["commands"] = -3 is outside 1..1000`},
		{"worker", "Bad=2", `queue "Bad"`},
		{"worker", "commands=6,critical=3", "weights for unknown queues critical"},
		{"serve", "critical=3", "weights for unknown queues critical"},
	} {
		data := t.TempDir()
		args := []string{c.cmd, "--data", data, "--queue-weights", c.value}
		if c.cmd == "serve" {
			args = append(args, "--addr", "127.0.0.1:0")
		} else {
			args = append(args, "--run-for", "5s")
		}
		r := runCmdq(t, 20*time.Second, nil, args...)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("cmdq %s --queue-weights %s: exit %d, stderr %q, want 1 and %q", c.cmd, c.value, r.code, r.stderr, c.want)
		}
	}
	r := runCmdq(t, 20*time.Second, nil, "worker", "--data", t.TempDir(), "--queue-weights", "commands=3", "--run-for", "2s")
	if r.code != 0 || !summaryLine.MatchString(r.stdout) {
		t.Fatalf("worker --queue-weights commands=3: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
