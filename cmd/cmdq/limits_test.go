package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// TestGlobalConcurrencyAcrossWorkers: three `cmdq worker` processes on one
// Azurite queue, each given --global-concurrency demo.sleep=2, and a web
// tier that issues 30 commands of 300 ms: as their events record them,
// never more than 2 ran at once across the three processes, 2 did, none
// failed an attempt, and GET /v1/limits shows the limit with no permit
// left.
func TestGlobalConcurrencyAcrossWorkers(t *testing.T) {
	t.Parallel()
	prefix := randomPrefix()
	limit := []string{"--global-concurrency", "demo.sleep=2"}
	web := startServe(t, serveOpts{azure: true, args: append([]string{"--no-processor", "--prefix", prefix}, limit...)})
	for _, name := range []string{"gc-w1", "gc-w2", "gc-w3"} {
		startShapeWorker(t, prefix, name, append([]string{"--concurrency", "4"}, limit...)...)
	}
	ids := make([]string, 30)
	for i := range ids {
		ids[i] = issueVia(t, web.URL, "demo.sleep", `{"ms":300}`)
	}
	type run struct{ from, to time.Time }
	var runs []run
	workers := map[string]bool{}
	for _, id := range ids {
		waitState(t, web.URL, "", id, "completed", 2*time.Minute)
		r := do(t, http.MethodGet, web.URL+"/v1/commands/"+id+"/events", "", "")
		var evs struct {
			Events []cmdq.Event `json:"events"`
		}
		if err := json.Unmarshal([]byte(r.body), &evs); err != nil {
			t.Fatal(err)
		}
		var x run
		for _, e := range evs.Events {
			switch e.Kind {
			case cmdq.EventStarted:
				x.from = e.Time
				workers[e.Worker] = true
			case cmdq.EventCompleted:
				x.to = e.Time
			case cmdq.EventFailed, cmdq.EventLeaseLost:
				t.Errorf("command %s: %s event %+v: a wait for a permit must not fail an attempt", id, e.Kind, e)
			}
		}
		if x.from.IsZero() || x.to.IsZero() {
			t.Fatalf("command %s: events %+v, want started and completed", id, evs.Events)
		}
		runs = append(runs, x)
	}
	// The most runs at once: [from, to) intervals, ends before starts.
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, x := range runs {
		edges = append(edges, edge{x.from, 1}, edge{x.to, -1})
	}
	sort.Slice(edges, func(i, k int) bool {
		if !edges[i].at.Equal(edges[k].at) {
			return edges[i].at.Before(edges[k].at)
		}
		return edges[i].delta < edges[k].delta
	})
	n, peak := 0, 0
	for _, e := range edges {
		n += e.delta
		peak = max(peak, n)
	}
	if peak != 2 {
		t.Errorf("at most %d of a type limited to 2 ran at once across three workers, want 2", peak)
	}
	if len(workers) < 2 {
		t.Errorf("the commands ran on %v, want more than one worker taking part", workers)
	}
	r := do(t, http.MethodGet, web.URL+"/v1/limits", "", "")
	var ls struct {
		Limits []cmdq.LimitInfo `json:"limits"`
	}
	if err := json.Unmarshal([]byte(r.body), &ls); err != nil || r.code != http.StatusOK {
		t.Fatalf("GET /v1/limits: %d %s", r.code, r.body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(ls.Limits) != 1 || ls.Limits[0].Limit != 2 || ls.Limits[0].InUse != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/limits after the run: %s, want demo.sleep limited to 2 with no permit in use", r.body)
		}
		time.Sleep(100 * time.Millisecond)
		r = do(t, http.MethodGet, web.URL+"/v1/limits", "", "")
		ls.Limits = nil
		_ = json.Unmarshal([]byte(r.body), &ls)
	}
}

// TestGlobalConcurrencyFlag: a malformed --global-concurrency stops serve
// and worker before anything is opened (the data directory is not
// created), with a message that says what to give; a good one runs.
func TestGlobalConcurrencyFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ cmd, value, want string }{
		{"worker", "demo.sleep", "give TYPE=N, such as demo.sleep=2"},
		{"worker", "demo.sleep=x", "give TYPE=N, such as demo.sleep=2"},
		{"serve", "demo.sleep=1001", "N must be 1 to 1000"},
		{"worker", "1bad=2", "--global-concurrency \"1bad=2\""},
	} {
		data := filepath.Join(t.TempDir(), "data")
		args := []string{c.cmd, "--data", data, "--global-concurrency", c.value}
		if c.cmd == "serve" {
			args = append(args, "--addr", "127.0.0.1:0")
		} else {
			args = append(args, "--run-for", "5s")
		}
		r := runCmdq(t, 20*time.Second, nil, args...)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("cmdq %s --global-concurrency %s: exit %d, stderr %q, want 1 and %q", c.cmd, c.value, r.code, r.stderr, c.want)
		}
		if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cmdq %s --global-concurrency %s created its data directory (%v)", c.cmd, c.value, err)
		}
	}
	// A type without a handler here: one clear line per flag, before the
	// worker runs.
	r := runCmdq(t, 20*time.Second, nil, "worker", "--data", t.TempDir(), "--global-concurrency", "no.such=2", "--rate", "other.type=1/1s", "--run-for", "5s")
	if r.code != 1 || !strings.Contains(r.stderr, `--global-concurrency: command type "no.such" has no handler in this process (its handled types: demo.echo, demo.fail, demo.sleep, demo.steps)`) ||
		!strings.Contains(r.stderr, `--rate: command type "other.type" has no handler`) || strings.Contains(r.stderr, "running until") || strings.Contains(r.stderr, "processor: processor") {
		t.Errorf("worker with limits for types it does not handle: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCmdq(t, 20*time.Second, nil, "worker", "--data", t.TempDir(), "--global-concurrency", "demo.sleep=2", "--run-for", "2s")
	if r.code != 0 || !summaryLine.MatchString(r.stdout) {
		t.Fatalf("worker --global-concurrency demo.sleep=2: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
