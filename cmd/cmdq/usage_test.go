package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// TestCLIUsageMistakes: every usage mistake exits 2 with one sentence that
// says what to type and the usage; none prints the help and exits 0, and
// none needs a server or a store.
func TestCLIUsageMistakes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"poison", "frob"}, []string{"unknown command \"frob\" for cmdq poison; run 'cmdq poison --help'"}},
		{[]string{"poison", "lss"}, []string{"did you mean cmdq poison ls?"}},
		{[]string{"stauts"}, []string{"unknown command \"stauts\" for cmdq (did you mean cmdq status?)"}},
		{[]string{"poison"}, []string{"cmdq poison needs a subcommand: ls, requeue, rm, show", "Available Commands:"}},
		{[]string{"periodic"}, []string{"cmdq periodic needs a subcommand: ls", "Usage:"}},
		{[]string{"queue"}, []string{"cmdq queue needs a subcommand"}},
		{[]string{"status"}, []string{"cmdq status needs the command ID: cmdq status ID", "usage: cmdq status ID [flags]"}},
		{[]string{"status", "a", "b"}, []string{"cmdq status takes 1 argument(s), not 2"}},
		{[]string{"send"}, []string{"cmdq send needs the command type (such as demo.echo): cmdq send TYPE"}},
		{[]string{"poison", "show"}, []string{"cmdq poison show needs the command ID: cmdq poison show ID"}},
		{[]string{"poison", "rm"}, []string{"cmdq poison rm needs one or more command IDs"}},
		{[]string{"cancel"}, []string{"cmdq cancel needs one or more command IDs"}},
		{[]string{"run-now"}, []string{"cmdq run-now needs one or more command IDs"}},
		{[]string{"queue", "pause"}, []string{"cmdq queue pause needs one or more queue names"}},
		{[]string{"poison", "ls", "extra"}, []string{`cmdq poison ls takes no arguments ("extra" is one`}},
		{[]string{"ls", "--bogus"}, []string{"unknown flag: --bogus", "usage: cmdq ls [flags]"}},
		{[]string{"ls", "--state", "pendng"}, []string{`--state "pendng" is not a state (did you mean pending?)`}},
		{[]string{"ls", "--since", "yesterday"}, []string{`--since "yesterday": give an RFC 3339 time`}},
		{[]string{"ls", "--since", "1h", "--until", "2h"}, []string{"--until", "must be after --since"}},
		{[]string{"ls", "--limit", "0"}, []string{"--limit 0: give 1 to 1000"}},
		{[]string{"status", newUUID(), "--server", "http://127.0.0.1:8080/ui/"}, []string{"is the console's address; give the server's base URL, such as http://127.0.0.1:8080"}},
		{[]string{"ls", "--server", "http://10.0.0.7:8080/cmdq/ui/commands"}, []string{"is the console's address; give the server's base URL, such as http://10.0.0.7:8080/cmdq"}},
		{[]string{"ls", "--server", "ftp://x"}, []string{`--server "ftp://x": give the server's base URL`}},
		{[]string{"ls", "--server", "http://127.0.0.1:1", "--data", "x"}, []string{"give --server (talk to a server) or --store/--data"}},
	} {
		r := runCmdq(t, 30*time.Second, nil, c.args...)
		if r.code != 2 || r.stdout != "" {
			t.Errorf("cmdq %s: exit %d, stdout %q; want exit 2 and nothing on stdout\nstderr:\n%s", strings.Join(c.args, " "), r.code, r.stdout, r.stderr)
			continue
		}
		for _, w := range c.wants {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("cmdq %s: stderr lacks %q:\n%s", strings.Join(c.args, " "), w, r.stderr)
			}
		}
		if !strings.HasPrefix(r.stderr, "cmdq: ") {
			t.Errorf("cmdq %s: stderr does not start with the sentence:\n%s", strings.Join(c.args, " "), r.stderr)
		}
	}
	// Help is still help.
	for _, args := range [][]string{{"--help"}, {"poison", "--help"}, {"ls", "--help"}, {}} {
		if r := runCmdq(t, 30*time.Second, nil, args...); r.code != 0 || !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("cmdq %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stdout)
		}
	}
	// worker --run-for says it stops when idle.
	if r := mustRun(t, nil, "worker", "--help"); !strings.Contains(r.stdout, "stops sooner when its queues are empty") || !strings.Contains(r.stdout, "early when idle") {
		t.Errorf("worker --help does not say --run-for stops when idle:\n%s", r.stdout)
	}
}

// TestCLIServerAddress: --server takes a bare host:port; a web server that
// is not the cmdq API (an HTML page) is said in one line, without its body;
// an unknown type is one line with a did-you-mean.
func TestCLIServerAddress(t *testing.T) {
	t.Parallel()
	p := startServe(t, serveOpts{})
	hostPort := strings.TrimPrefix(p.URL, "http://")
	id := sendID(t, nil, "demo.echo", "--server", hostPort)
	if st := statusOf(t, nil, id, "--server", hostPort+"/"); st.ID != id {
		t.Fatalf("status through --server %s: %+v", hostPort, st)
	}
	// An unknown type: one line, said once, with the nearest type.
	r := runCmdq(t, 30*time.Second, nil, "send", "demo.ecko", "--server", hostPort)
	if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || strings.Count(r.stderr, "unknown command type") != 1 || strings.Contains(r.stderr, "no handler is registered") ||
		!strings.Contains(r.stderr, `unknown command type "demo.ecko" (did you mean demo.echo?); this server's types: demo.echo, demo.fail, demo.sleep, demo.steps`) {
		t.Errorf("send of an unknown type: exit %d\n%s", r.code, r.stderr)
	}
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		code := http.StatusNotFound
		if strings.HasSuffix(r.URL.Path, "/commands") {
			code = http.StatusOK // a page that answers 200 to anything
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte("<!doctype html><html><head><title>Console</title></head><body>" + strings.Repeat("<p>page</p>", 100) + "</body></html>"))
	}))
	t.Cleanup(html.Close)
	for _, args := range [][]string{{"status", newUUID()}, {"ls"}, {"poison", "ls"}} {
		r := runCmdq(t, 30*time.Second, nil, append(args, "--server", html.URL)...)
		if r.code != 1 || strings.Contains(r.stderr, "<") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 ||
			!strings.Contains(r.stderr, "not as the cmdq API does") || !strings.Contains(r.stderr, "base URL") {
			t.Errorf("cmdq %s against an HTML server: exit %d\nstderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}

// TestCLIDataImpliesEmbedded: --data alone opens the embedded store (it
// does not go to the default server, where nothing listens).
func TestCLIDataImpliesEmbedded(t *testing.T) {
	t.Parallel()
	data := []string{"--data", t.TempDir()}
	id := sendID(t, nil, append([]string{"demo.echo"}, data...)...)
	if st := statusOf(t, nil, id, data...); st.State != cmdq.StatePending {
		t.Fatalf("status --data: %+v", st)
	}
	got, _ := lsIDs(t, data)
	if len(got) != 1 || got[0] != id {
		t.Fatalf("ls --data: %v", got)
	}
}

// TestCLISendWaitPrintsOutput: send --wait prints the output after the
// final state; --json prints the ID (without --wait) or the final status
// with its output.
func TestCLISendWaitPrintsOutput(t *testing.T) {
	t.Parallel()
	p := startServe(t, serveOpts{args: []string{"--poison-ceiling", "2"}})
	srv := []string{"--server", p.URL}
	r := mustRun(t, nil, append([]string{"send", "demo.echo", "--params", `{"hello":"out"}`, "--wait"}, srv...)...)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || lines[1] != lines[0]+" completed (attempts 1, step 1)" || lines[2] != `output {"hello":"out"}` {
		t.Fatalf("send --wait:\n%s", r.stdout)
	}
	r = mustRun(t, nil, append([]string{"send", "demo.echo", "--params", `{"n":1}`, "--wait", "--json"}, srv...)...)
	var st cmdq.Status
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.State != cmdq.StateCompleted || string(st.Output) != `{"n":1}` {
		t.Fatalf("send --wait --json: %v\n%s", err, r.stdout)
	}
	r = mustRun(t, nil, append([]string{"send", "demo.echo", "--json"}, srv...)...)
	var issued struct {
		ID       string `json:"id"`
		Existing bool   `json:"existing"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &issued); err != nil || !uuidLine.MatchString(issued.ID) || issued.Existing {
		t.Fatalf("send --json: %v\n%s", err, r.stdout)
	}
	// A failed command: its final status as JSON, exit 1.
	r = runCmdq(t, 60*time.Second, nil, append([]string{"send", "demo.fail", "--params", `{"times":9}`, "--wait", "--json"}, srv...)...)
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 1 || st.State == cmdq.StateCompleted {
		t.Fatalf("send demo.fail --wait --json: exit %d %v\n%s\nstderr %s", r.code, err, r.stdout, r.stderr)
	}
}
