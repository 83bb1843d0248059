package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/doorbell"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

// The production shape (docs/operations.md): a web tier (serve
// --no-processor) and workers in other processes, on Azurite. Wake-ups go
// over real loopback UDP between real processes.

// workerProc is a running `cmdq worker`.
type workerProc struct {
	name    string
	metrics string // its /metrics URL
	cmd     *exec.Cmd
	logs    *syncBuffer
	done    chan error
}

// startWorker starts `cmdq worker` on Azurite with prefix, demo handlers,
// /metrics on a free port and the extra flags, and waits until it runs.
func startShapeWorker(t *testing.T, prefix, name string, extra ...string) *workerProc {
	t.Helper()
	args := append([]string{"worker", "--store", "azure", "--prefix", prefix, "--worker-id", name,
		"--metrics-addr", "127.0.0.1:0", "--log-format", "json"}, extra...)
	w := &workerProc{name: name, logs: &syncBuffer{}, done: make(chan error, 1)}
	w.cmd = exec.Command(binPath, args...)
	w.cmd.Env = cleanEnv("CMDQ_AZURE_CONNECTION_STRING=" + azurite.ConnectionString(t))
	pr, pw := io.Pipe()
	w.cmd.Stderr = pw
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.done <- w.cmd.Wait(); _ = pw.Close() }()
	urlc, running := make(chan string, 1), make(chan struct{})
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			_, _ = w.logs.Write([]byte(sc.Text() + "\n"))
			var rec struct {
				Message string `json:"message"`
				URL     string `json:"url"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				continue
			}
			switch {
			case rec.Message == "cmdq worker: serving metrics":
				urlc <- rec.URL
			case strings.HasPrefix(rec.Message, "cmdq worker: running"):
				once.Do(func() { close(running) })
			}
		}
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.done:
		case <-time.After(40 * time.Second):
			_ = w.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, w.logs.String())
		}
	})
	deadline := time.After(60 * time.Second)
	for w.metrics == "" || running != nil {
		select {
		case w.metrics = <-urlc:
		case <-running:
			running = nil
		case err := <-w.done:
			t.Fatalf("%s exited (%v):\n%s", name, err, w.logs.String())
		case <-deadline:
			t.Fatalf("%s did not start within a minute:\n%s", name, w.logs.String())
		}
	}
	return w
}

// metric returns the sum of the series of metric name whose labels
// contain every label given (`queue="commands"`), from the worker's
// /metrics.
func (w *workerProc) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(w.metrics)
	if err != nil {
		t.Fatalf("GET %s: %v", w.metrics, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? (\S+)$`)
	for _, line := range strings.Split(string(b), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(m[1], l)
		}
		if v, err := strconv.ParseFloat(m[2], 64); ok && err == nil {
			sum += v
		}
	}
	return sum
}

// processorsOf returns what serve's GET /v1/processors lists.
func processorsOf(t *testing.T, base string) []cmdq.ProcessorInfo {
	t.Helper()
	r := do(t, http.MethodGet, base+"/v1/processors", "", "")
	if r.code != http.StatusOK {
		t.Fatalf("GET /v1/processors: %d %s", r.code, r.body)
	}
	var out struct {
		Processors []cmdq.ProcessorInfo `json:"processors"`
	}
	if err := json.Unmarshal([]byte(r.body), &out); err != nil {
		t.Fatal(err)
	}
	return out.Processors
}

// issueVia issues a command through serve's API and returns its ID.
func issueVia(t *testing.T, base, typ, params string) string {
	t.Helper()
	r := do(t, http.MethodPost, base+"/v1/commands", "", fmt.Sprintf(`{"type":%q,"params":%s}`, typ, params), "Content-Type", "application/json")
	if r.code != http.StatusAccepted {
		t.Fatalf("POST /v1/commands: %d %s", r.code, r.body)
	}
	var res struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(r.body), &res); err != nil {
		t.Fatal(err)
	}
	return res.ID
}

// startedEvent returns command id's started event (after waiting for it
// to complete).
func startedEvent(t *testing.T, base, id string) cmdq.Event {
	t.Helper()
	waitState(t, base, "", id, "completed", 2*time.Minute)
	r := do(t, http.MethodGet, base+"/v1/commands/"+id+"/events", "", "")
	var evs struct {
		Events []cmdq.Event `json:"events"`
	}
	if err := json.Unmarshal([]byte(r.body), &evs); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Events {
		if e.Kind == cmdq.EventStarted {
			return e
		}
	}
	t.Fatalf("command %s has no started event: %s", id, r.body)
	return cmdq.Event{}
}

// wakeBound is how soon after its issue a woken worker must start a
// command in these tests: wide (on a quiet machine it is tens of
// milliseconds; beside CPU hogs Azurite's calls take up to seconds), and
// far below the workers' poll bound of a minute, which a command issued
// right after their first poll waits for without a wake.
const wakeBound = 10 * time.Second

// TestProductionShape: a web tier (serve --no-processor) and two workers
// whose poll waits a full minute between empty polls. A command issued
// through the web tier starts within wakeBound (the doorbell; without it,
// about a minute), a burst is shared by both workers, the web tier runs no
// handler and is not listed as a processor, and a forged and a replayed
// wake are dropped and counted.
func TestProductionShape(t *testing.T) {
	t.Parallel()
	prefix := randomPrefix()
	slow := []string{"--concurrency", "4", "--min-poll-interval", "1m", "--max-poll-interval", "1m"}
	web := startServe(t, serveOpts{azure: true, args: []string{"--no-processor", "--prefix", prefix}})
	w1 := startShapeWorker(t, prefix, "shape-w1", slow...)
	w2 := startShapeWorker(t, prefix, "shape-w2", slow...)
	// Both workers listed with their doorbells, and past their first poll:
	// from here their pollers wait a minute.
	waitFor(t, 30*time.Second, "both workers listed with a doorbell and polled once", func() bool {
		ps := processorsOf(t, web.URL)
		n := 0
		for _, p := range ps {
			if p.Wake != "" && !p.Gone {
				n++
			}
		}
		return n == 2 && w1.metric(t, "cmdq_polls_total") >= 1 && w2.metric(t, "cmdq_polls_total") >= 1
	})
	if ps := processorsOf(t, web.URL); len(ps) != 2 {
		t.Fatalf("processors %+v, want the two workers only (serve --no-processor is none)", ps)
	}

	for i := range 3 {
		t0 := time.Now()
		id := issueVia(t, web.URL, "demo.echo", fmt.Sprintf(`{"n":%d}`, i))
		ev := startedEvent(t, web.URL, id)
		if d := ev.Time.Sub(t0); d > wakeBound {
			t.Errorf("command %d started %s after its issue, want within %s (the poll bound is a minute)", i, d, wakeBound)
		}
		if ev.Worker != "shape-w1" && ev.Worker != "shape-w2" {
			t.Errorf("command %d ran on %q, not a worker", i, ev.Worker)
		}
	}

	// A short-lived issuer (cmdq send on the store) rings too: its one
	// wake goes before it exits.
	t0 := time.Now()
	sent := mustRun(t, []string{"CMDQ_AZURE_CONNECTION_STRING=" + azurite.ConnectionString(t)},
		"send", "demo.echo", "--store", "azure", "--prefix", prefix)
	if ev := startedEvent(t, web.URL, strings.TrimSpace(sent.stdout)); ev.Time.Sub(t0) > wakeBound {
		t.Errorf("a command sent by cmdq send started %s after the process began, want within %s", ev.Time.Sub(t0), wakeBound)
	}

	// A burst of 40 half-second sleeps on 2 × 4 slots: both take part.
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = issueVia(t, web.URL, "demo.sleep", `{"ms":500}`)
	}
	by := map[string]int{}
	for _, id := range ids {
		by[startedEvent(t, web.URL, id).Worker]++
	}
	if by["shape-w1"] < 8 || by["shape-w2"] < 8 {
		t.Errorf("the burst ran %v, want both workers taking part (8 or more each)", by)
	}

	// A forged datagram and a replay of a real wake reach w1's doorbell.
	var addr string
	for _, p := range processorsOf(t, web.URL) {
		if p.Name == "shape-w1" {
			addr = p.Wake
		}
	}
	st, err := azure.Open(context.Background(), azure.Config{ConnectionString: azurite.ConnectionString(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	wake := captureWake(t, doorbell.Key(storage.SharedSecret(st), prefix), "commands")
	before := w1.metric(t, "cmdq_doorbell_wakes_total", `result="accepted"`)
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialUDP("udp", nil, to)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, d := range [][]byte{wake, wake, []byte("not a wake, not sealed")} {
		if _, err := conn.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "w1 counts the wake once, the replay and the forgery", func() bool {
		return w1.metric(t, "cmdq_doorbell_wakes_total", `result="accepted"`) == before+1 &&
			w1.metric(t, "cmdq_doorbell_wakes_total", `result="replayed"`) >= 1 &&
			w1.metric(t, "cmdq_doorbell_wakes_total", `result="forged"`) >= 1
	})
}

// captureWake returns the bytes of a real wake of queue, sealed with key,
// as a Ringer sends it (caught on a socket of the test's own).
func captureWake(t *testing.T, key []byte, queue string) []byte {
	t.Helper()
	catch, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer catch.Close()
	r, err := doorbell.NewRinger(key, func(context.Context) ([]doorbell.Peer, error) {
		return []doorbell.Peer{{Addr: catch.LocalAddr().String(), Queues: []string{queue}}}, nil
	}, doorbell.RingerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Ring(context.Background(), queue, doorbell.Wake{Name: queue})
	_ = catch.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 512)
	n, _, err := catch.ReadFromUDP(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// TestDoorbellUnreachable: a worker whose advertised doorbell address
// reaches nothing (a firewall) still gets its command at its poll
// (every 2 s here), and the web tier lists it as unreachable.
func TestDoorbellUnreachable(t *testing.T) {
	t.Parallel()
	prefix := randomPrefix()
	dead, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	blackhole := dead.LocalAddr().String()
	_ = dead.Close()
	web := startServe(t, serveOpts{azure: true, args: []string{"--no-processor", "--prefix", prefix}})
	startShapeWorker(t, prefix, "blocked", "--min-poll-interval", "2s", "--max-poll-interval", "2s", "--doorbell-advertise", blackhole)
	waitFor(t, 30*time.Second, "the worker listed", func() bool { return len(processorsOf(t, web.URL)) == 1 })
	var last time.Duration
	for i := range 3 {
		t0 := time.Now()
		id := issueVia(t, web.URL, "demo.echo", fmt.Sprintf(`{"n":%d}`, i))
		last = startedEvent(t, web.URL, id).Time.Sub(t0)
		if last > 20*time.Second {
			t.Errorf("command %d started %s after its issue, want within the 2 s poll bound (plus margin)", i, last)
		}
	}
	waitFor(t, 10*time.Second, "the web tier lists the worker's doorbell as unreachable", func() bool {
		ps := processorsOf(t, web.URL)
		return len(ps) == 1 && ps[0].WakeUnreachable
	})
	t.Logf("with the doorbell unreachable, the last command started %s after its issue", last)
}
