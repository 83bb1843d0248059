package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// runInProcess runs the CLI in this process with the given writers, so a
// test can give it a "terminal" (a safeWriter with tty and colour on).
func runInProcess(t *testing.T, stdout, stderr safeWriter, args ...string) error {
	t.Helper()
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return root.ExecuteContext(ctx)
}

// TestCLIOnTerminal: on a terminal, `send --wait` draws a progress line
// (elapsed time and state) on stderr and erases it at the end, and states
// are coloured; the text between the colours is the plain output.
func TestCLIOnTerminal(t *testing.T) {
	t.Parallel()
	srv := startServe(t, serveOpts{})
	var out, errb bytes.Buffer
	stdout := safeWriter{w: &out, tty: true, color: true}
	stderr := safeWriter{w: &errb, tty: true, color: true}
	if err := runInProcess(t, stdout, stderr, "send", "demo.sleep", "--params", `{"ms":2500}`, "--wait", "--server", srv.URL); err != nil {
		t.Fatalf("send --wait: %v\n%s", err, errb.String())
	}
	progress := errb.String()
	lines := strings.Split(progress, eraseLine)
	if len(lines) < 4 || lines[len(lines)-1] != "" {
		t.Fatalf("progress %q: want several redrawn lines, erased at the end", progress)
	}
	var sawRunning bool
	elapsed := regexp.MustCompile(`^waiting \d+\.\ds: `)
	for _, l := range lines[1 : len(lines)-1] {
		if strings.HasPrefix(l, "cmdq: waiting: ") && strings.HasSuffix(l, "\n") {
			continue // a note above the progress line, if a loaded machine left the command due for 2 s
		}
		if !elapsed.MatchString(l) {
			t.Fatalf("progress line %q: want the elapsed time", l)
		}
		if n := len([]rune(strings.NewReplacer(sgrCyan, "", sgrReset, "", sgrDim, "").Replace(l))); n >= 80 {
			t.Errorf("progress line %q is %d columns; it must stay under 80 or it wraps", l, n)
		}
		sawRunning = sawRunning || strings.Contains(l, sgrCyan+"running"+sgrReset+" "+sgrDim+"(attempt 1)")
	}
	if !sawRunning {
		t.Errorf("the progress never showed the running state in colour:\n%q", progress)
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != 2 || !uuidLine.MatchString(got[0]) || got[1] != got[0]+" "+sgrGreen+"completed"+sgrReset+" (attempts 1)" {
		t.Fatalf("send --wait output %q", out.String())
	}

	// status: the state and the event kinds are coloured.
	out.Reset()
	if err := runInProcess(t, stdout, stderr, "status", got[0], "--server", srv.URL); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"status   " + sgrGreen + "completed" + sgrReset + " (attempts 1)", sgrGreen + "completed     " + sgrReset, sgrCyan + "started       " + sgrReset} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status output lacks %q:\n%q", want, out.String())
		}
	}

	// Without colours (NO_COLOR), the same text, plain; no progress
	// without a terminal.
	out.Reset()
	errb.Reset()
	plain := safeWriter{w: &out}
	if err := runInProcess(t, plain, safeWriter{w: &errb}, "send", "demo.echo", "--wait", "--server", srv.URL); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "\x1b") || errb.Len() != 0 {
		t.Fatalf("not a terminal: stdout %q stderr %q", out.String(), errb.String())
	}
}

// TestColorOn: colours need a terminal, and NO_COLOR (any non-empty value)
// or TERM=dumb turn them off.
func TestColorOn(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, c := range []struct {
		tty  bool
		env  []string
		want bool
	}{
		{true, nil, true},
		{false, nil, false},
		{true, []string{"NO_COLOR", "1"}, false},
		{true, []string{"NO_COLOR", ""}, true},
		{true, []string{"TERM", "dumb"}, false},
		{true, []string{"TERM", "xterm-256color"}, true},
	} {
		if got := colorOn(c.tty, env(c.env...)); got != c.want {
			t.Errorf("colorOn(tty %v, %v) = %v, want %v", c.tty, c.env, got, c.want)
		}
	}
	// safeWriter passes the palette's sequences only with colours on, and
	// never anything else.
	var b bytes.Buffer
	_, _ = safeWriter{w: &b, color: true}.Write([]byte(sgrRed + "x" + sgrReset + "\x1b[2J\x1b]0;t\a"))
	if got := b.String(); got != sgrRed+"x"+sgrReset+`\x1b[2J\x1b]0;t\x07` {
		t.Errorf("colour writer wrote %q", got)
	}
	b.Reset()
	_, _ = safeWriter{w: &b}.Write([]byte(sgrRed + "x" + sgrReset))
	if got := b.String(); got != `\x1b[31mx\x1b[0m` {
		t.Errorf("plain writer wrote %q", got)
	}
}

// TestCLIPlainWhenPiped: through pipes (the binary as scripts run it),
// `send --wait` prints no progress and no escape sequences, and times are
// UTC with a Z whatever TZ says.
func TestCLIPlainWhenPiped(t *testing.T) {
	t.Parallel()
	srv := startServe(t, serveOpts{})
	env := []string{"CMDQ_SERVER=" + srv.URL, "TZ=America/New_York"}
	r := mustRun(t, env, "send", "demo.sleep", "--params", `{"ms":600}`, "--wait")
	if r.stderr != "" || strings.ContainsAny(r.stdout, "\x1b\r") {
		t.Fatalf("piped send --wait: stdout %q stderr %q", r.stdout, r.stderr)
	}
	// A command without steps: no "step 0".
	id := strings.SplitN(r.stdout, "\n", 2)[0]
	if !strings.HasSuffix(strings.TrimSpace(r.stdout), id+" completed (attempts 1)") {
		t.Errorf("send --wait of a stepless command: %q", r.stdout)
	}
	st := mustRun(t, env, "status", id)
	if strings.Contains(st.stdout, "step 0") || !strings.Contains(st.stdout, "status   completed (attempts 1)\n") {
		t.Errorf("status of a stepless command:\n%s", st.stdout)
	}
	// The times are the API's, in UTC.
	var api struct {
		CreatedAt time.Time `json:"createdAt"`
	}
	if err := json.Unmarshal([]byte(do(t, http.MethodGet, srv.URL+"/v1/commands/"+id, "", "").body), &api); err != nil {
		t.Fatal(err)
	}
	if want := "created  " + api.CreatedAt.UTC().Format("2006-01-02 15:04:05.000Z") + "\n"; !strings.Contains(st.stdout, want) {
		t.Errorf("status lacks %q (UTC, like the API):\n%s", want, st.stdout)
	}
	for _, l := range strings.Split(strings.TrimSpace(st.stdout), "\n") {
		if m := regexp.MustCompile(`^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z)  `).FindStringSubmatch(l); m == nil && regexp.MustCompile(`^\d{4}-`).MatchString(l) {
			t.Errorf("timeline line without a UTC time: %q", l)
		}
	}
}

// TestCLIExplainsWaitingCommand: a pending command that has not started
// says why, through the store directly (no server, so no processor: the
// CLI's own Client reads the heartbeats and finds none).
func TestCLIExplainsWaitingCommand(t *testing.T) {
	t.Parallel()
	store := []string{"--store", "embedded", "--data", t.TempDir()}
	id := sendID(t, nil, append([]string{"demo.echo"}, store...)...)
	r := mustRun(t, nil, append([]string{"status", id}, store...)...)
	if !strings.Contains(r.stdout, "status   pending (attempts 0)\nwaiting  no processor polls queue \"commands\" (no live heartbeat names it); it starts when one does (start one: cmdq worker, or cmdq serve)\n") {
		t.Errorf("status of a waiting command:\n%s", r.stdout)
	}
}

// TestCLIErrorsReadOnce: a refused connection says to check that the server
// runs and how to name another; other errors carry one "cmdq:" prefix and
// say the server's problem once, without the request line.
func TestCLIErrorsReadOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	_ = ln.Close()
	for _, args := range [][]string{{"send", "demo.echo"}, {"status", newUUID()}, {"poison", "ls"}} {
		r := runCmdq(t, 20*time.Second, []string{"CMDQ_SERVER=" + closed}, args...)
		want := "cannot reach " + closed + " (connection refused): is `cmdq serve` running there? Start it, or point to another server with --server URL or CMDQ_SERVER"
		if r.code != 1 || !strings.HasPrefix(r.stderr, "cmdq: ") || !strings.Contains(r.stderr, want) || strings.Count(r.stderr, "cmdq:") != 1 || strings.Contains(r.stderr, "cmdq client") {
			t.Errorf("cmdq %s against a closed port: exit %d\n%s\nwant one line with %q", strings.Join(args, " "), r.code, r.stderr, want)
		}
	}
	srv := startServe(t, serveOpts{})
	r := runCmdq(t, 20*time.Second, []string{"CMDQ_SERVER=" + srv.URL}, "send", "demo.nope")
	if want := "cmdq: send demo.nope: unknown command type \"demo.nope\""; r.code != 1 || !strings.HasPrefix(r.stderr, want) || strings.Count(r.stderr, "cmdq:") != 1 {
		t.Errorf("send of an unknown type: exit %d %q\nwant it to start with %q", r.code, r.stderr, want)
	}
}
