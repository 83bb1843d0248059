package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/openapitest"
)

// notExercised are the documented responses this test cannot provoke
// through a healthy embedded store, with where they are checked instead.
var notExercised = map[string]string{
	"500": "an unexpected failure (a bug, or storage answering nonsense): not provoked",
	"503": "a storage outage: TestServeAnswers503WhenStorageHangs (cmd/cmdq) checks these answers against the description",
}

// specClient sends requests and checks every answer against the description.
type specClient struct {
	t    *testing.T
	spec *openapitest.Spec
	base string
}

func (c specClient) do(method, path, ct, body string, headers ...string) resp {
	c.t.Helper()
	r := request(c.t, method, c.base+path, ct, body, headers...)
	u, _ := url.Parse(path)
	if err := c.spec.Check(method, u.Path, r.code, r.header, r.body); err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// expect sends a request, checks it against the description and that the
// status is code.
func (c specClient) expect(code int, method, path, ct, body string, headers ...string) resp {
	c.t.Helper()
	r := c.do(method, path, ct, body, headers...)
	if r.code != code {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, r.code, r.body, code)
	}
	return r
}

func loadSpec(t *testing.T) *openapitest.Spec {
	t.Helper()
	spec, err := openapitest.Load(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestOpenAPIMatchesServer sends requests to real servers for every
// documented operation and nearly every documented status code (the rest
// are listed in notExercised with where they are checked), and validates
// each answer (status, content type, required headers, body schema)
// against api/openapi.json with internal/openapitest.
func TestOpenAPIMatchesServer(t *testing.T) {
	t.Parallel()
	spec := loadSpec(t)
	ops := spec.Operations()
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	const jsonCT = "application/json"

	// The served document is the file.
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), MaxBodyBytes: 4096, Idle: true, Setup: func(c *cmdq.Client) error {
		// A schedule this process registers, not yet stored (Idle: no
		// Start), for GET /v1/periodic.
		return c.Periodic("demo.hourly", "@hourly", tickCmd{})
	}})
	c := specClient{t, spec, srv.URL}
	served := c.expect(http.StatusOK, http.MethodGet, "/v1/openapi.json", "", "")
	file, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(served.body) != string(file) || string(api.OpenAPI()) != string(file) {
		t.Fatal("GET /v1/openapi.json is not api/openapi.json")
	}

	// Issue.
	id := uuid.NewString()
	body := `{"id":"` + id + `","type":"demo.echo","params":{"a":1},"correlationId":"c-1"}`
	r := c.expect(http.StatusAccepted, http.MethodPost, "/v1/commands", jsonCT, body, bearer(apitest.IssuerToken)...)
	if r.header.Get("Location") != "/v1/commands/"+id {
		t.Fatalf("Location %q", r.header.Get("Location"))
	}
	c.expect(http.StatusOK, http.MethodPost, "/v1/commands", jsonCT, body, bearer(apitest.IssuerToken)...)
	c.expect(http.StatusConflict, http.MethodPost, "/v1/commands", jsonCT, strings.Replace(body, `"a":1`, `"a":2`, 1), bearer(apitest.IssuerToken)...)
	c.expect(http.StatusBadRequest, http.MethodPost, "/v1/commands", jsonCT, `{"type":"","params":[],"id":"42","extra":1}`, bearer(apitest.IssuerToken)...)
	c.expect(http.StatusRequestEntityTooLarge, http.MethodPost, "/v1/commands", jsonCT, `{"type":"x","params":{"p":"`+strings.Repeat("x", 5000)+`"}}`, bearer(apitest.IssuerToken)...)
	c.expect(http.StatusUnsupportedMediaType, http.MethodPost, "/v1/commands", "", body, bearer(apitest.IssuerToken)...)
	c.expect(http.StatusAccepted, http.MethodPost, "/v1/commands", jsonCT, `{"type":"demo.echo"}`, bearer(apitest.IssuerToken)...)
	// Unique: the same type and key within the window, other params → 200
	// with the first command and "duplicate":true; a bad window → 400.
	uniq := c.expect(http.StatusAccepted, http.MethodPost, "/v1/commands", jsonCT, `{"type":"demo.echo","params":{"n":1},"uniqueKey":"order-42","uniqueWindow":"1h"}`, bearer(apitest.IssuerToken)...)
	dup := c.expect(http.StatusOK, http.MethodPost, "/v1/commands", jsonCT, `{"type":"demo.echo","params":{"n":2},"uniqueKey":"order-42","uniqueWindow":"1h"}`, bearer(apitest.IssuerToken)...)
	var u1, u2 client.IssueResponse
	if json.Unmarshal(uniq.body, &u1) != nil || json.Unmarshal(dup.body, &u2) != nil || u1.ID != u2.ID || !u2.Duplicate || u1.Duplicate {
		t.Fatalf("unique: first %s, duplicate %s: want the same id, duplicate true on the second", uniq.body, dup.body)
	}
	c.expect(http.StatusBadRequest, http.MethodPost, "/v1/commands", jsonCT, `{"type":"demo.echo","uniqueKey":"order-42","uniqueWindow":"0s"}`, bearer(apitest.IssuerToken)...)
	// Order keys: one given is shown in the status; an empty one is a 400.
	ordered := c.expect(http.StatusAccepted, http.MethodPost, "/v1/commands", jsonCT, `{"type":"demo.echo","orderKey":"account-7"}`, bearer(apitest.IssuerToken)...)
	var oi client.IssueResponse
	if err := json.Unmarshal(ordered.body, &oi); err != nil {
		t.Fatal(err)
	}
	if st := c.expect(http.StatusOK, http.MethodGet, "/v1/commands/"+oi.ID, "", "", bearer(apitest.ReaderToken)...); !strings.Contains(string(st.body), `"orderKey":"account-7"`) {
		t.Fatalf("status of an ordered command: %s", st.body)
	}
	c.expect(http.StatusBadRequest, http.MethodPost, "/v1/commands", jsonCT, `{"type":"demo.echo","orderKey":""}`, bearer(apitest.IssuerToken)...)

	// Read: the status with its ETag, 304 for it, a long-poll that
	// answers at once (the client has another status).
	got := c.expect(http.StatusOK, http.MethodGet, "/v1/commands/"+id, "", "", bearer(apitest.ReaderToken)...)
	c.expect(http.StatusNotModified, http.MethodGet, "/v1/commands/"+id, "", "", append(bearer(apitest.ReaderToken), "If-None-Match", got.header.Get("ETag"))...)
	c.expect(http.StatusOK, http.MethodGet, "/v1/commands/"+id+"?wait=5s", "", "", append(bearer(apitest.ReaderToken), "If-None-Match", `"older"`)...)
	c.expect(http.StatusOK, http.MethodGet, "/v1/commands/"+id, "", "", append(bearer(apitest.ReaderToken), "If-None-Match", `"older"`, "Prefer", "wait=5")...)
	c.expect(http.StatusBadRequest, http.MethodGet, "/v1/commands/"+id+"?wait=forever", "", "", bearer(apitest.ReaderToken)...)
	c.expect(http.StatusOK, http.MethodGet, "/v1/commands/"+id+"/events", "", "", bearer(apitest.ReaderToken)...)
	unknown := uuid.NewString()
	for _, p := range []string{"/v1/commands/" + unknown, "/v1/commands/" + unknown + "/events", "/v1/poison/" + unknown} {
		c.expect(http.StatusNotFound, http.MethodGet, p, "", "", bearer(apitest.OperatorToken)...)
		c.expect(http.StatusBadRequest, http.MethodGet, strings.Replace(p, unknown, "not-a-uuid", 1), "", "", bearer(apitest.OperatorToken)...)
	}

	// 410: a command removed after its retention.
	expired := expiredCommand(t, srv)
	c.expect(http.StatusGone, http.MethodGet, "/v1/commands/"+expired, "", "", bearer(apitest.ReaderToken)...)
	c.expect(http.StatusGone, http.MethodGet, "/v1/commands/"+expired+"/events", "", "", bearer(apitest.ReaderToken)...)

	// Deferred: a command whose handler deferred (RetryAfter): retrying,
	// with its deferrals, waiting for the reason "deferred"; its events.
	deferredCmd := c.expect(http.StatusAccepted, http.MethodPost, "/v1/commands", jsonCT, `{"type":"demo.echo"}`, bearer(apitest.IssuerToken)...)
	var di client.IssueResponse
	if err := json.Unmarshal(deferredCmd.body, &di); err != nil {
		t.Fatal(err)
	}
	srv.Log.Append(t, di.ID, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1, Worker: "w"},
		cmdq.Event{Kind: cmdq.EventDeferred, Attempt: 1, Worker: "w", Error: "retry after 1h0m0s: 429", Detail: "deferral 1 of at most 20", RunAt: time.Now().Add(time.Hour)})
	ds := c.expect(http.StatusOK, http.MethodGet, "/v1/commands/"+di.ID, "", "", bearer(apitest.ReaderToken)...)
	if !strings.Contains(string(ds.body), `"deferrals":1`) || !strings.Contains(string(ds.body), `"reason":"deferred"`) {
		t.Fatalf("status of a deferred command: %s", ds.body)
	}
	c.expect(http.StatusOK, http.MethodGet, "/v1/commands/"+di.ID+"/events", "", "", bearer(apitest.ReaderToken)...)

	// Poison: a poisoned command with a step, an error and a stack.
	srv.Log.Append(t, id, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1, Worker: "w"},
		cmdq.Event{Kind: cmdq.EventStepCompleted, Attempt: 1, Worker: "w", Step: 1, Note: "n"},
		cmdq.Event{Kind: cmdq.EventFailed, Attempt: 1, Worker: "w", Error: "boom", Detail: "stack"})
	srv.Poison(t, id, "attempts exhausted", "boom")
	c.expect(http.StatusOK, http.MethodGet, "/v1/commands/"+id, "", "", bearer(apitest.ReaderToken)...)
	c.expect(http.StatusOK, http.MethodGet, "/v1/commands/"+id+"/events", "", "", bearer(apitest.ReaderToken)...)
	page := c.expect(http.StatusOK, http.MethodGet, "/v1/poison?limit=1", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusOK, http.MethodGet, "/v1/poison?type=demo.echo", "", "", bearer(apitest.OperatorToken)...)
	var pp cmdq.PoisonPage
	if err := json.Unmarshal(page.body, &pp); err != nil || len(pp.Entries) != 1 {
		t.Fatalf("poison page %s: %v", page.body, err)
	}
	c.expect(http.StatusBadRequest, http.MethodGet, "/v1/poison?limit=0", "", "", bearer(apitest.OperatorToken)...)
	// The command listing: a page with a continuation, filtered, and a bad state.
	list := c.expect(http.StatusOK, http.MethodGet, "/v1/commands?limit=1", "", "", bearer(apitest.ReaderToken)...)
	var lp cmdq.CommandPage
	if err := json.Unmarshal(list.body, &lp); err != nil || len(lp.Commands) != 1 || lp.Continuation == "" {
		t.Fatalf("command page %s: %v", list.body, err)
	}
	c.expect(http.StatusOK, http.MethodGet, "/v1/commands?type=demo.echo&state=completed&queue=commands&correlationId=c-1&since=2020-01-01T00:00:00Z&until=2999-01-01T00:00:00Z&continuation="+url.QueryEscape(lp.Continuation), "", "", bearer(apitest.ReaderToken)...)
	c.expect(http.StatusBadRequest, http.MethodGet, "/v1/commands?state=done&since=yesterday", "", "", bearer(apitest.ReaderToken)...)
	c.expect(http.StatusOK, http.MethodGet, "/v1/poison/"+id, "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusUnsupportedMediaType, http.MethodPost, "/v1/poison/"+id+"/requeue", "text/plain", "x", bearer(apitest.OperatorToken)...)
	r = c.expect(http.StatusAccepted, http.MethodPost, "/v1/poison/"+id+"/requeue", "", "", bearer(apitest.OperatorToken)...)
	if r.header.Get("Location") != "/v1/commands/"+id {
		t.Fatalf("requeue Location %q", r.header.Get("Location"))
	}
	c.expect(http.StatusConflict, http.MethodPost, "/v1/poison/"+id+"/requeue", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusConflict, http.MethodDelete, "/v1/poison/"+id, "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusNotFound, http.MethodPost, "/v1/poison/"+unknown+"/requeue", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusNotFound, http.MethodDelete, "/v1/poison/"+unknown, "", "", bearer(apitest.OperatorToken)...)
	srv.Poison(t, id, "again", "boom")
	c.expect(http.StatusNoContent, http.MethodDelete, "/v1/poison/"+id, "", "", bearer(apitest.OperatorToken)...)
	// The event stream of the (now final) command: every event and the
	// status, then the end; resumed after its last event: 204.
	stream := c.expect(http.StatusOK, http.MethodGet, "/v1/commands/"+id+"/events", "", "", append(bearer(apitest.ReaderToken), "Accept", "text/event-stream")...)
	if !strings.Contains(string(stream.body), "event: status\ndata: {") || !strings.Contains(string(stream.body), `"kind":"discarded"`) {
		t.Fatalf("stream of a discarded command:\n%s", stream.body)
	}
	last := regexp.MustCompile(`id: (\d+)\n`).FindAllStringSubmatch(string(stream.body), -1)
	c.expect(http.StatusNoContent, http.MethodGet, "/v1/commands/"+id+"/events", "", "", append(bearer(apitest.ReaderToken), "Accept", "text/event-stream", "Last-Event-ID", last[len(last)-1][1])...)
	c.expect(http.StatusBadRequest, http.MethodPost, "/v1/poison/nope/requeue", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusBadRequest, http.MethodDelete, "/v1/poison/nope", "", "", bearer(apitest.OperatorToken)...)

	// Cancel: a pending command (nothing processes on this server), again,
	// an ended one (the discarded command above), unknown, expired, a bad
	// ID, a body that is not JSON.
	pending := c.expect(http.StatusAccepted, http.MethodPost, "/v1/commands", jsonCT, `{"type":"demo.echo"}`, bearer(apitest.IssuerToken)...)
	var issued client.IssueResponse
	if err := json.Unmarshal(pending.body, &issued); err != nil {
		t.Fatal(err)
	}
	r = c.expect(http.StatusAccepted, http.MethodPost, "/v1/commands/"+issued.ID+"/cancel", "", "", bearer(apitest.IssuerToken)...)
	if r.header.Get("Location") != "/v1/commands/"+issued.ID || !strings.Contains(string(r.body), `"status":"cancelled"`) {
		t.Fatalf("cancel: Location %q, body %s", r.header.Get("Location"), r.body)
	}
	c.expect(http.StatusOK, http.MethodPost, "/v1/commands/"+issued.ID+"/cancel", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusConflict, http.MethodPost, "/v1/commands/"+id+"/cancel", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusNotFound, http.MethodPost, "/v1/commands/"+unknown+"/cancel", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusGone, http.MethodPost, "/v1/commands/"+expired+"/cancel", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusBadRequest, http.MethodPost, "/v1/commands/nope/cancel", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusUnsupportedMediaType, http.MethodPost, "/v1/commands/"+issued.ID+"/cancel", "text/plain", "x", bearer(apitest.OperatorToken)...)

	// Scheduled commands: issued with a delay and with a run-at time
	// (202, scheduled, runAt), both at once (400); run-now of a scheduled
	// one (202, pending), of one not waiting (409: the same again, the
	// pending one above), unknown, expired, a bad ID, a body that is not
	// JSON.
	r = c.expect(http.StatusAccepted, http.MethodPost, "/v1/commands", jsonCT, `{"type":"demo.echo","delay":"1h"}`, bearer(apitest.IssuerToken)...)
	var later client.IssueResponse
	if err := json.Unmarshal(r.body, &later); err != nil || later.Status != cmdq.StateScheduled || time.Until(later.RunAt) < 59*time.Minute {
		t.Fatalf("issue with a delay: %s (%v)", r.body, err)
	}
	at := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	r = c.expect(http.StatusAccepted, http.MethodPost, "/v1/commands", jsonCT, `{"type":"demo.echo","runAt":"`+at+`"}`, bearer(apitest.IssuerToken)...)
	if !strings.Contains(string(r.body), `"status":"scheduled"`) || !strings.Contains(string(r.body), `"runAt":"`+strings.TrimSuffix(at, "Z")) {
		t.Fatalf("issue with runAt %s: %s", at, r.body)
	}
	c.expect(http.StatusBadRequest, http.MethodPost, "/v1/commands", jsonCT, `{"type":"demo.echo","runAt":"`+at+`","delay":"1h"}`, bearer(apitest.IssuerToken)...)
	r = c.expect(http.StatusAccepted, http.MethodPost, "/v1/commands/"+later.ID+"/run-now", "", "", bearer(apitest.OperatorToken)...)
	if r.header.Get("Location") != "/v1/commands/"+later.ID || !strings.Contains(string(r.body), `"status":"pending"`) {
		t.Fatalf("run-now: Location %q, body %s", r.header.Get("Location"), r.body)
	}
	c.expect(http.StatusConflict, http.MethodPost, "/v1/commands/"+later.ID+"/run-now", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusNotFound, http.MethodPost, "/v1/commands/"+unknown+"/run-now", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusGone, http.MethodPost, "/v1/commands/"+expired+"/run-now", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusBadRequest, http.MethodPost, "/v1/commands/nope/run-now", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusUnsupportedMediaType, http.MethodPost, "/v1/commands/"+later.ID+"/run-now", "text/plain", "x", bearer(apitest.OperatorToken)...)

	// Queues: listed, paused, resumed; an unknown one, a bad name, a body
	// that is not JSON.
	c.expect(http.StatusOK, http.MethodGet, "/v1/queues", "", "", bearer(apitest.ReaderToken)...)
	r = c.expect(http.StatusOK, http.MethodGet, "/v1/periodic", "", "", bearer(apitest.ReaderToken)...)
	if !strings.Contains(string(r.body), `"name":"demo.hourly"`) || !strings.Contains(string(r.body), `"missed":true`) {
		t.Fatalf("GET /v1/periodic: %s, want demo.hourly with its last tick missed", r.body)
	}
	exerciseTrigger(t, c, srv)
	r = c.expect(http.StatusOK, http.MethodPost, "/v1/queues/commands/pause", "", "", bearer(apitest.OperatorToken)...)
	if !strings.Contains(string(r.body), `"paused":true`) {
		t.Fatalf("pause: %s", r.body)
	}
	c.expect(http.StatusOK, http.MethodPost, "/v1/queues/commands/resume", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusNotFound, http.MethodPost, "/v1/queues/nobody-knows/pause", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusNotFound, http.MethodPost, "/v1/queues/nobody-knows/resume", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusBadRequest, http.MethodPost, "/v1/queues/Bad_Name/pause", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusBadRequest, http.MethodPost, "/v1/queues/Bad_Name/resume", "", "", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusUnsupportedMediaType, http.MethodPost, "/v1/queues/commands/pause", "text/plain", "x", bearer(apitest.OperatorToken)...)
	c.expect(http.StatusUnsupportedMediaType, http.MethodPost, "/v1/queues/commands/resume", "text/plain", "x", bearer(apitest.OperatorToken)...)

	// Processors: none on this server (nothing processes); one on a
	// server whose client runs handlers (its heartbeat row, live).
	c.expect(http.StatusOK, http.MethodGet, "/v1/processors", "", "", bearer(apitest.ReaderToken)...)
	working := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), Setup: func(c *cmdq.Client) error {
		return cmdq.RegisterWith(c, func(context.Context, alpha, *cmdq.Attempt) error { return nil },
			cmdq.HandlerOptions{GlobalConcurrency: 3, Rate: cmdq.Rate{Limit: 5, Per: time.Second}})
	}})
	wc := specClient{t, spec, working.URL}
	// The processor's first heartbeat is written once it runs, which on a
	// loaded machine may be after Start returned: the list is read until
	// it holds the processor.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var procs client.ProcessorsResponse
		err := json.Unmarshal(wc.expect(http.StatusOK, http.MethodGet, "/v1/processors", "", "", bearer(apitest.ReaderToken)...).body, &procs)
		if err == nil && len(procs.Processors) == 1 && procs.Processors[0].Local && len(procs.Processors[0].Queues) > 0 {
			break
		}
		if err != nil || len(procs.Processors) > 1 || time.Now().After(deadline) {
			t.Fatalf("GET /v1/processors on a working server: %+v, %v", procs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Limits: the working server's limited and rated type, no permit held.
	var limits client.LimitsResponse
	if err := json.Unmarshal(wc.expect(http.StatusOK, http.MethodGet, "/v1/limits", "", "", bearer(apitest.ReaderToken)...).body, &limits); err != nil ||
		len(limits.Limits) != 1 || limits.Limits[0].Limit != 3 || limits.Limits[0].Permits == nil ||
		limits.Limits[0].Rate == nil || limits.Limits[0].Rate.Limit != 5 || limits.Limits[0].Rate.PerMS != 1000 {
		t.Fatalf("GET /v1/limits on a server with a limited type: %+v, %v", limits, err)
	}
	c.expect(http.StatusOK, http.MethodGet, "/v1/limits", "", "", bearer(apitest.ReaderToken)...)

	// Health and metrics.
	c.expect(http.StatusOK, http.MethodGet, "/healthz", "", "")
	c.expect(http.StatusOK, http.MethodGet, "/readyz", "", "", bearer(apitest.ReaderToken)...)
	c.expect(http.StatusOK, http.MethodGet, "/metrics", "", "", bearer(apitest.ReaderToken)...)

	// Every operation with a role: 401 without a token, 403 with a token
	// that lacks the role, 403 for a cross-site state change.
	concrete := func(op string) (method, path string) {
		method, path, _ = strings.Cut(op, " ")
		return method, strings.ReplaceAll(strings.ReplaceAll(path, "{id}", unknown), "{name}", "commands")
	}
	lacking := map[string]string{"issuer": apitest.ReaderToken, "reader": apitest.IssuerToken, "operator": apitest.ReaderToken,
		"issuer or operator": apitest.ReaderToken}
	for _, op := range ops {
		method, path := concrete(op)
		ct, b := "", ""
		if method == http.MethodPost && path == "/v1/commands" {
			ct, b = jsonCT, `{"type":"demo.echo"}`
		}
		if spec.Seen(op+" 401") || !spec.Documents(op, 401) {
			continue
		}
		c.expect(http.StatusUnauthorized, method, path, ct, b)
		c.expect(http.StatusForbidden, method, path, ct, b, bearer(lacking[spec.Role(op)])...)
		if method != http.MethodGet {
			c.expect(http.StatusForbidden, method, path, ct, b, append(bearer(apitest.AllToken), "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site")...)
		}
	}

	// 405 on a documented path with another method.
	r = request(t, http.MethodPut, srv.URL+"/v1/commands", jsonCT, `{}`)
	if r.code != http.StatusMethodNotAllowed {
		t.Fatalf("PUT /v1/commands: %d", r.code)
	}
	if err := spec.CheckSchema("Problem", r.body); err != nil || r.header.Get("Allow") != "GET, HEAD, POST" || r.header.Get("Content-Type") != client.ProblemContentType {
		t.Fatalf("405: %v, Allow %q, Content-Type %q", err, r.header.Get("Allow"), r.header.Get("Content-Type"))
	}

	// 429: an address after too many failed authentications, on every
	// operation that authenticates.
	limited := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), AuthFailureBurst: 1})
	lc := specClient{t, spec, limited.URL}
	for range 2 {
		request(t, http.MethodGet, limited.URL+"/v1/commands/"+unknown, "", "", bearer("wrong-token-0123456789")...)
	}
	for _, op := range ops {
		if spec.Documents(op, 429) {
			method, path := concrete(op)
			lc.expect(http.StatusTooManyRequests, method, path, "", "", bearer(apitest.OperatorToken)...)
		}
	}

	// 421: without tokens, a Host that is not loopback, on every operation.
	open := apitest.Start(t, apitest.Options{})
	oc := specClient{t, spec, open.URL}
	for _, op := range ops {
		method, path := concrete(op)
		oc.expect(http.StatusMisdirectedRequest, method, path, "", "", "Host", "rebind.evil.example")
	}

	// 503 from /readyz while unhealthy.
	sick := apitest.Start(t, apitest.Options{Health: func() (string, bool, any) {
		return "unhealthy", false, map[string]any{"lastError": "x", "since": time.Now()}
	}})
	sc := specClient{t, spec, sick.URL}
	sc.expect(http.StatusServiceUnavailable, http.MethodGet, "/readyz", "", "")
	sc.expect(http.StatusOK, http.MethodGet, "/healthz", "", "")

	// 507 on every write route while the embedded store's disk is full.
	exerciseStorageFull(t, spec)

	// Every documented response was seen, or is listed in notExercised.
	for _, resp := range spec.Responses() {
		code := resp[strings.LastIndex(resp, " ")+1:]
		if !spec.Seen(resp) && notExercised[code] == "" && resp != "GET /readyz 503" {
			t.Errorf("documented but never exercised: %s", resp)
		}
	}
	for _, op := range ops {
		ok := false
		for _, code := range []string{"200", "202", "204"} {
			ok = ok || spec.Seen(op+" "+code)
		}
		if !ok {
			t.Errorf("%s: no success answer was exercised", op)
		}
	}
}

// TestOpenAPIServersFollowBasePath: mounted under a prefix, the served
// description's servers name it, so generated clients call the right URLs.
func TestOpenAPIServersFollowBasePath(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{})
	h, err := api.New(api.Config{Client: srv.Client, BasePath: "/cmdq"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/cmdq/", http.StripPrefix("/cmdq", h))
	hs := httptest.NewServer(mux)
	defer hs.Close()
	r := request(t, http.MethodGet, hs.URL+"/cmdq/v1/openapi.json", "", "")
	var doc struct {
		Servers []struct{ URL string } `json:"servers"`
		Paths   map[string]any         `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil || len(doc.Servers) != 1 || doc.Servers[0].URL != "/cmdq" || len(doc.Paths) < 9 {
		t.Fatalf("description under /cmdq: %v %s", err, r.body)
	}
}

// TestOpenAPICoversDocumentedRoutes: the routes docs/api.md has a section
// for and the operations of the description are the same.
func TestOpenAPICoversDocumentedRoutes(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	heading := regexp.MustCompile(`(?m)^## (.*)$`)
	route := regexp.MustCompile(`\b(GET|POST|DELETE) (/[^\s` + "`" + `]+)`)
	for _, h := range heading.FindAllStringSubmatch(string(doc), -1) {
		for _, m := range route.FindAllStringSubmatch(h[1], -1) {
			documented = append(documented, m[1]+" "+m[2])
		}
	}
	slices.Sort(documented)
	if ops := loadSpec(t).Operations(); !slices.Equal(documented, ops) {
		t.Fatalf("docs/api.md sections %q\nOpenAPI operations   %q", documented, ops)
	}
}

// tickCmd is a periodic schedule's command in the API's tests.
type tickCmd struct{}

func (tickCmd) CommandType() string { return "demo.tick" }
