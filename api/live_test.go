package api_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// other is "another process" writing to the server's store: a log of its
// own, whose changes nothing pushes to the server's client.
func other(t *testing.T) (*testenv.Log, apitest.Options) {
	t.Helper()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return testenv.OpenLog(t, st, cmdq.DefaultPrefix), apitest.Options{Store: st}
}

// appendEvent records ev on command id through log (one point read, one
// batch). Call it from the test's goroutine.
func appendEvent(t *testing.T, log *testenv.Log, id string, ev cmdq.Event) {
	t.Helper()
	log.Append(t, id, apitest.ModelEvents([]cmdq.Event{ev})...)
}

// getStatus is one GET of a command's status with extra headers and query.
func getStatus(t *testing.T, hc *http.Client, url string, headers ...string) (int, http.Header, cmdq.Status) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Error(err)
		return 0, nil, cmdq.Status{}
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	r, err := hc.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil, cmdq.Status{}
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	var st cmdq.Status
	if r.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &st); err != nil {
			t.Errorf("status body %s: %v", b, err)
		}
	}
	return r.StatusCode, r.Header, st
}

// TestLongPollSharesReads: 1,000 HTTP clients long-polling 100 running
// commands that another process changes cost at most one storage read per
// command per second, for all of them together; each client gets every
// change as a 200 and 304 while nothing changed; once completed, the
// commands cost no storage read however often they are read.
func TestLongPollSharesReads(t *testing.T) {
	t.Parallel()
	log, opts := other(t)
	srv := apitest.Start(t, opts)
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = issue(t, srv, "Alpha")
		appendEvent(t, log, ids[i], cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1, Worker: "elsewhere"})
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1100}}
	t.Cleanup(hc.CloseIdleConnections)
	reads := func() int { return int(apitest.StorageOps(t, srv.Prom, "table_get")) }

	const perCmd = 10
	var (
		wg                        sync.WaitGroup
		notModified, sawStep, end atomic.Int64
		stop                      = make(chan struct{})
	)
	start, before := time.Now(), reads()
	for i := range perCmd * len(ids) {
		id := ids[i%len(ids)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag, step := "", false
			for {
				select {
				case <-stop:
					return
				default:
				}
				h := []string{}
				if tag != "" {
					h = append(h, "If-None-Match", tag)
				}
				code, hdr, st := getStatus(t, hc, srv.URL+"/v1/commands/"+id+"?wait=1s", h...)
				switch code {
				case http.StatusNotModified:
					notModified.Add(1)
					if hdr.Get("ETag") != tag {
						t.Errorf("304 with ETag %q, the client has %q", hdr.Get("ETag"), tag)
						return
					}
					continue
				case http.StatusOK:
				default:
					t.Errorf("long-poll: %d", code)
					return
				}
				if hdr.Get("ETag") == "" || hdr.Get("ETag") == tag {
					t.Errorf("200 with ETag %q after %q", hdr.Get("ETag"), tag)
					return
				}
				tag = hdr.Get("ETag")
				if st.Step == 1 && !step {
					step = true
					sawStep.Add(1)
				}
				if st.State == cmdq.StateCompleted {
					end.Add(1)
					return
				}
			}
		}()
	}
	defer close(stop)
	clients := int64(perCmd * len(ids))
	waitFor(t, time.Minute, "every client renewed its long-poll 3 times", func() bool { return notModified.Load() >= 3*clients })
	for _, id := range ids {
		appendEvent(t, log, id, cmdq.Event{Kind: cmdq.EventStepCompleted, Attempt: 1, Worker: "elsewhere", Step: 1})
	}
	waitFor(t, time.Minute, "every client saw step 1", func() bool { return sawStep.Load() == clients })
	for _, id := range ids {
		appendEvent(t, log, id, cmdq.Event{Kind: cmdq.EventCompleted, Attempt: 1, Worker: "elsewhere"})
	}
	waitFor(t, time.Minute, "every client saw its command completed", func() bool { return end.Load() == clients })
	wg.Wait()
	elapsed := time.Since(start)
	got := reads() - before
	limit := len(ids) * (1 + int(elapsed/time.Second))
	t.Logf("%d clients long-polling %d commands for %s: %d storage reads (limit %d), %d answers 304", clients, len(ids), elapsed.Round(time.Millisecond), got, limit, notModified.Load())
	if got > limit {
		t.Fatalf("%d storage reads in %s for %d commands: more than one per command per second (%d)", got, elapsed, len(ids), limit)
	}

	// Completed: 1,000 more reads (plain, conditional, long-polls) cost
	// nothing.
	before = reads()
	for i := range 1000 {
		id := ids[i%len(ids)]
		var code int
		switch i % 3 {
		case 0:
			code, _, _ = getStatus(t, hc, srv.URL+"/v1/commands/"+id)
		case 1:
			_, hdr, _ := getStatus(t, hc, srv.URL+"/v1/commands/"+id)
			if code, _, _ = getStatus(t, hc, srv.URL+"/v1/commands/"+id, "If-None-Match", hdr.Get("ETag")); code == http.StatusNotModified {
				code = http.StatusOK
			}
		case 2:
			code, _, _ = getStatus(t, hc, srv.URL+"/v1/commands/"+id+"?wait=5s", "If-None-Match", `"old"`)
		}
		if code != http.StatusOK {
			t.Fatalf("read %d of a completed command: %d", i, code)
		}
	}
	if got := reads() - before; got != 0 {
		t.Fatalf("reading completed commands 1000 times cost %d storage reads, want 0", got)
	}
}

// TestFinishedCommandReadOnce: a finished command read 1,000 times through
// the API costs one storage read.
func TestFinishedCommandReadOnce(t *testing.T) {
	t.Parallel()
	log, opts := other(t)
	srv := apitest.Start(t, opts)
	id := issue(t, srv, "Alpha")
	appendEvent(t, log, id, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1, Worker: "w"})
	appendEvent(t, log, id, cmdq.Event{Kind: cmdq.EventCompleted, Attempt: 1, Worker: "w"})
	before := apitest.StorageOps(t, srv.Prom, "table_get")
	for i := range 1000 {
		if code, _, st := getStatus(t, http.DefaultClient, srv.URL+"/v1/commands/"+id); code != http.StatusOK || st.State != cmdq.StateCompleted {
			t.Fatalf("read %d: %d %s", i, code, st.State)
		}
	}
	if got := apitest.StorageOps(t, srv.Prom, "table_get") - before; got != 1 {
		t.Fatalf("a finished command read 1000 times cost %v storage reads, want 1", got)
	}
}

// TestLongPoll: the answers of GET /v1/commands/{id} with a wait and
// conditions.
func TestLongPoll(t *testing.T) {
	t.Parallel()
	log, opts := other(t)
	opts.API = func(c *api.Config) {
		c.RequestTimeout = 300 * time.Millisecond // a long-poll is exempt
		c.MaxWait = 8 * time.Second               // more than WaitMaxPollInterval (5 s): a change elsewhere is found within a wait
	}
	srv := apitest.Start(t, opts)
	id := issue(t, srv, "Alpha")
	url := srv.URL + "/v1/commands/" + id
	hc := http.DefaultClient

	code, hdr, st := getStatus(t, hc, url)
	tag := hdr.Get("ETag")
	if code != http.StatusOK || st.State != cmdq.StatePending || !strings.HasPrefix(tag, `"`) || hdr.Get("Cache-Control") != "private, no-cache" {
		t.Fatalf("GET: %d %s ETag %q Cache-Control %q", code, st.State, tag, hdr.Get("Cache-Control"))
	}
	if tag != cmdq.ETag(st) {
		t.Fatalf("ETag %q is not cmdq.ETag of the status (%q)", tag, cmdq.ETag(st))
	}
	// Unchanged conditional GET: 304 with the ETag, no body.
	r := request(t, http.MethodGet, url, "", "", "If-None-Match", tag)
	if r.code != http.StatusNotModified || r.header.Get("ETag") != tag || len(r.body) != 0 {
		t.Fatalf("conditional GET: %d ETag %q body %q", r.code, r.header.Get("ETag"), r.body)
	}
	if r := request(t, http.MethodGet, url, "", "", "If-None-Match", `"other", W/`+tag); r.code != http.StatusNotModified {
		t.Fatalf("If-None-Match with a list and a weak tag: %d", r.code)
	}
	if r := request(t, http.MethodGet, url, "", "", "If-None-Match", `"other"`); r.code != http.StatusOK {
		t.Fatalf("If-None-Match of another status: %d", r.code)
	}
	// A wait that ends unchanged (longer than the request deadline): 304
	// with the condition, the status without.
	if r := request(t, http.MethodGet, url+"?wait=1s", "", "", "If-None-Match", tag); r.code != http.StatusNotModified {
		t.Fatalf("long-poll that timed out: %d %s", r.code, r.body)
	}
	if code, hdr, _ := getStatus(t, hc, url+"?wait=1s"); code != http.StatusOK || hdr.Get("ETag") != tag {
		t.Fatalf("long-poll without a condition that timed out: %d ETag %q", code, hdr.Get("ETag"))
	}
	// A change made elsewhere ends the wait, with and without a condition.
	for _, cond := range []bool{true, false} {
		type answer struct {
			code int
			hdr  http.Header
			st   cmdq.Status
		}
		got := make(chan answer, 1)
		go func() {
			h := []string{}
			if cond {
				h = []string{"If-None-Match", tag}
			}
			c, hd, s := getStatus(t, hc, url+"?wait=8s", h...)
			got <- answer{c, hd, s}
		}()
		appendEvent(t, log, id, cmdq.Event{Kind: cmdq.EventStepCompleted, Attempt: 1, Step: 1})
		a := <-got
		if a.code != http.StatusOK || a.hdr.Get("ETag") == tag || a.st.Step == 0 {
			t.Fatalf("long-poll (condition %v) after a change: %d ETag %q step %d", cond, a.code, a.hdr.Get("ETag"), a.st.Step)
		}
		tag = a.hdr.Get("ETag")
	}
	// Prefer: wait (seconds) works like ?wait=, cut to MaxWait.
	r = request(t, http.MethodGet, url, "", "", "If-None-Match", tag, "Prefer", "respond-async, wait=1")
	if r.code != http.StatusNotModified || r.header.Get("Preference-Applied") != "wait=1" {
		t.Fatalf("Prefer: wait=1: %d Preference-Applied %q", r.code, r.header.Get("Preference-Applied"))
	}
	appendEvent(t, log, id, cmdq.Event{Kind: cmdq.EventCompleted, Attempt: 1})
	if r := request(t, http.MethodGet, url, "", "", "If-None-Match", tag, "Prefer", "wait=600"); r.code != http.StatusOK || r.header.Get("Preference-Applied") != "wait=8" {
		t.Fatalf("Prefer: wait=600: %d Preference-Applied %q", r.code, r.header.Get("Preference-Applied"))
	}
	// Bad waits.
	for _, w := range []string{"9s", "-1s", "soon", "1h"} {
		p := problem(t, request(t, http.MethodGet, url+"?wait="+w, "", ""), http.StatusBadRequest, client.ProblemInvalidRequest)
		if len(p.Errors) != 1 || p.Errors[0].Pointer != "query:wait" || !strings.Contains(p.Detail, "8s") {
			t.Errorf("wait=%s: %+v", w, p)
		}
	}
	// Unknown command.
	problem(t, request(t, http.MethodGet, srv.URL+"/v1/commands/"+cmdq.NewID()+"?wait=1s", "", ""), http.StatusNotFound, client.ProblemNotFound)
}

// TestStreamsShareReads: 100 event streams of 10 commands that another
// process changes cost at most one storage read per command per second,
// and one events query per command per change, for all the streams of
// the command together; every stream gets every event once.
func TestStreamsShareReads(t *testing.T) {
	t.Parallel()
	log, opts := other(t)
	srv := apitest.Start(t, opts)
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = issue(t, srv, "Alpha")
	}
	ops := func() (int, int) {
		return int(apitest.StorageOps(t, srv.Prom, "table_get")), int(apitest.StorageOps(t, srv.Prom, "table_query"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	gets0, queries0 := ops()
	type result struct {
		kinds []cmdq.EventKind
		err   error
	}
	results := make(chan result, 100)
	var opened sync.WaitGroup
	for i := range 100 {
		id := ids[i%len(ids)]
		opened.Add(1)
		go func() {
			isOpen := sync.OnceFunc(opened.Done)
			defer isOpen() // also when the stream fails before its status
			r, ms := apitest.SSE(t, ctx, srv.URL+"/v1/commands/"+id+"/events", "")
			var kinds []cmdq.EventKind
			for m := range ms {
				if m.Event == "status" {
					isOpen()
				}
				if m.ID != "" {
					var e cmdq.Event
					if err := json.Unmarshal([]byte(m.Data), &e); err != nil {
						results <- result{err: err}
						return
					}
					kinds = append(kinds, e.Kind)
				}
			}
			if r.StatusCode != http.StatusOK {
				results <- result{err: fmt.Errorf("stream: %d", r.StatusCode)}
				return
			}
			results <- result{kinds: kinds}
		}()
	}
	opened.Wait() // every stream has sent its events and status
	for _, ev := range []cmdq.Event{
		{Kind: cmdq.EventStarted, Attempt: 1, Worker: "elsewhere"},
		{Kind: cmdq.EventStepCompleted, Attempt: 1, Worker: "elsewhere", Step: 1},
		{Kind: cmdq.EventCompleted, Attempt: 1, Worker: "elsewhere"},
	} {
		for _, id := range ids {
			appendEvent(t, log, id, ev)
		}
	}
	for range 100 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		if got := fmt.Sprint(r.kinds); got != "[created started step_completed completed]" {
			t.Fatalf("a stream got %s", got)
		}
	}
	elapsed := time.Since(start)
	gets, queries := ops()
	gets, queries = gets-gets0, queries-queries0
	getLimit := len(ids) * (1 + int(elapsed/time.Second))
	queryLimit := len(ids) * (1 + 3) // the first read, then at most one per change
	t.Logf("100 streams of %d commands for %s: %d point reads (limit %d), %d events queries (limit %d)", len(ids), elapsed.Round(time.Millisecond), gets, getLimit, queries, queryLimit)
	if gets > getLimit || queries > queryLimit {
		t.Fatalf("%d point reads (limit %d) and %d queries (limit %d) for 100 streams of %d commands", gets, getLimit, queries, queryLimit, len(ids))
	}
}

// TestEventStream: GET /v1/commands/{id}/events as text/event-stream sends
// the events as they happen (pushed by the server's own processor), each
// with its seq as id, then the status, until the command is final;
// Last-Event-ID resumes; a reconnect with nothing left is 204; heartbeats
// keep it open past the server's read and write timeouts and the request
// deadline.
func TestEventStream(t *testing.T) {
	t.Parallel()
	steps := make(chan struct{})
	srv := apitest.Start(t, apitest.Options{
		// Only pushes can reach the stream in time; the started event is
		// written with the first step.
		Config: cmdq.Config{WaitPollInterval: time.Hour, StartedWriteDelay: time.Hour},
		Setup: func(c *cmdq.Client) error {
			return cmdq.Register(c, func(ctx context.Context, _ alpha, run *cmdq.Attempt) error {
				for i := 1; i <= 2; i++ {
					select {
					case <-steps:
					case <-ctx.Done():
						return ctx.Err()
					}
					if err := run.CompleteStep(ctx, i, fmt.Sprint("step ", i)); err != nil {
						return err
					}
				}
				return nil
			})
		},
		API: func(c *api.Config) {
			c.StreamHeartbeat = 100 * time.Millisecond
			c.RequestTimeout = 300 * time.Millisecond
		},
		// Short read and write timeouts: the stream outlives them.
		HTTP: func(s *http.Server) { s.ReadTimeout, s.WriteTimeout = time.Second, time.Second },
	})
	id := issue(t, srv, "Alpha")
	url := srv.URL + "/v1/commands/" + id + "/events"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, ms := apitest.SSE(t, ctx, url, "")
	if r.StatusCode != http.StatusOK || r.Header.Get("Content-Type") != "text/event-stream" || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("stream: %d %q %q", r.StatusCode, r.Header.Get("Content-Type"), r.Header.Get("Cache-Control"))
	}
	event := func(want cmdq.EventKind) cmdq.Event {
		t.Helper()
		m := apitest.NextSSE(t, ms)
		var e cmdq.Event
		if m.Event != "" || json.Unmarshal([]byte(m.Data), &e) != nil || e.Kind != want || m.ID != fmt.Sprint(e.Seq) {
			t.Fatalf("want a %s event, got %+v", want, m)
		}
		return e
	}
	state := func(want cmdq.State) {
		t.Helper()
		m := apitest.NextSSE(t, ms)
		var st cmdq.Status
		if m.Event != "status" || json.Unmarshal([]byte(m.Data), &st) != nil || st.State != want {
			t.Fatalf("want status %s, got %+v", want, m)
		}
	}
	var done cmdq.Event
	event(cmdq.EventCreated)
	state(cmdq.StatePending)
	// Outlive the server's 1 s timeouts: heartbeats for more than 2 s.
	beats := 0
	since := time.Now()
	for m := range ms {
		if m.Comment {
			beats++
		}
		if beats >= 3 && time.Since(since) > 2*time.Second {
			break
		}
		if !m.Comment && m.Event != "" {
			t.Fatalf("unexpected message while idle: %+v", m)
		}
	}
	steps <- struct{}{}
	event(cmdq.EventStarted)
	step := event(cmdq.EventStepCompleted)
	state(cmdq.StateRunning)
	// Resume from the step in a second stream: only what follows.
	r2, ms2 := apitest.SSE(t, ctx, url, fmt.Sprint(step.Seq))
	if r2.StatusCode != http.StatusOK {
		t.Fatalf("resumed stream: %d", r2.StatusCode)
	}
	if m := apitest.NextSSE(t, ms2); m.Event != "status" {
		t.Fatalf("resumed stream starts with %+v, want the status (no event after seq %d yet)", m, step.Seq)
	}
	steps <- struct{}{}
	// The second step and the completion may reach a stream as one change
	// or two: each ends with the status.
	rest := func(ms <-chan apitest.SSEMessage) (kinds []cmdq.EventKind, last cmdq.Event, states []cmdq.State) {
		t.Helper()
		for m := range ms {
			switch {
			case m.Comment:
			case m.Event == "status":
				var st cmdq.Status
				if err := json.Unmarshal([]byte(m.Data), &st); err != nil {
					t.Fatalf("status %q: %v", m.Data, err)
				}
				states = append(states, st.State)
			default:
				if err := json.Unmarshal([]byte(m.Data), &last); err != nil || m.ID != fmt.Sprint(last.Seq) {
					t.Fatalf("event %+v: %v", m, err)
				}
				kinds = append(kinds, last.Kind)
			}
		}
		return kinds, last, states
	}
	for i, s := range []<-chan apitest.SSEMessage{ms, ms2} {
		kinds, last, states := rest(s)
		if fmt.Sprint(kinds) != "[step_completed completed]" || len(states) == 0 || states[len(states)-1] != cmdq.StateCompleted ||
			len(states) > 2 || len(states) == 2 && states[0] != cmdq.StateRunning {
			t.Fatalf("stream %d after step 1: events %v, statuses %v", i+1, kinds, states)
		}
		done = last
	}
	// Everything was sent: a reconnect is told to stop.
	if r3, _ := apitest.SSE(t, ctx, url, fmt.Sprint(done.Seq)); r3.StatusCode != http.StatusNoContent {
		t.Fatalf("reconnect after the end: %d, want 204", r3.StatusCode)
	}
	// A final command's stream from the start: all events, the status, the end.
	_, ms4 := apitest.SSE(t, ctx, url, "")
	var kinds []string
	for m := range ms4 {
		if !m.Comment && m.Data != "" {
			kinds = append(kinds, cmp.Or(m.Event, "event"))
		}
	}
	if got := strings.Join(kinds, ","); got != "event,event,event,event,event,status" {
		t.Fatalf("stream of a completed command: %s", got)
	}
	// Bad Last-Event-ID.
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", "x")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("Last-Event-ID x: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
}

// alpha is the command type of the streaming tests.
type alpha struct {
	N int `json:"n"`
}

func (alpha) CommandType() string { return "Alpha" }

// waitFor polls cond every 10 ms until it holds, failing after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
