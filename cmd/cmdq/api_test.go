package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// problemOf checks that r is an RFC 9457 problem with code and type and
// returns it.
func problemOf(t *testing.T, what string, r response, code int, typ string) client.Problem {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: got %d %s, want %d", what, r.code, r.body, code)
	}
	if ct := r.header.Get("Content-Type"); ct != client.ProblemContentType {
		t.Errorf("%s: Content-Type %q, want %q", what, ct, client.ProblemContentType)
	}
	var p client.Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("%s: body is not a problem: %v: %s", what, err, r.body)
	}
	if p.Status != code || (typ != "" && p.Type != typ) || p.Detail == "" {
		t.Errorf("%s: problem %+v, want status %d type %s and a detail", what, p, code, typ)
	}
	return p
}

func eventKinds(t *testing.T, base, token, id string) []cmdq.EventKind {
	t.Helper()
	r := do(t, http.MethodGet, base+"/v1/commands/"+id+"/events", token, "")
	if r.code != http.StatusOK {
		t.Fatalf("GET events %s: %d %s", id, r.code, r.body)
	}
	var er client.EventsResponse
	if err := json.Unmarshal([]byte(r.body), &er); err != nil || er.ID != id {
		t.Fatalf("GET events %s: %v %s", id, err, r.body)
	}
	var kinds []cmdq.EventKind
	for _, e := range er.Events {
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

func poisonList(t *testing.T, base, token, query string) cmdq.PoisonPage {
	t.Helper()
	r := do(t, http.MethodGet, base+"/v1/poison"+query, token, "")
	if r.code != http.StatusOK {
		t.Fatalf("GET /v1/poison%s: %d %s", query, r.code, r.body)
	}
	var p cmdq.PoisonPage
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("GET /v1/poison%s: %v %s", query, err, r.body)
	}
	return p
}

func hasEntry(p cmdq.PoisonPage, id string) (cmdq.PoisonEntry, bool) {
	for _, e := range p.Entries {
		if e.CommandID == id {
			return e, true
		}
	}
	return cmdq.PoisonEntry{}, false
}

// TestServeAPI exercises every route and error case of a real `cmdq serve`
// process, on the embedded store and on Azurite.
func TestServeAPI(t *testing.T) {
	t.Parallel()
	testenv.EachDriver(t, func(t *testing.T, driver string) {
		srv := startServe(t, serveOpts{azure: driver == "azure", args: []string{"--poison-ceiling", "2"}})
		testAPI(t, srv.URL)
	})
}

func testAPI(t *testing.T, base string) {
	// Issue, poll, events.
	id := newUUID()
	body := `{"id":"` + id + `","type":"demo.echo","params":{"n":1}}`
	r := do(t, http.MethodPost, base+"/v1/commands", "", body)
	if r.code != http.StatusAccepted || r.header.Get("Location") != "/v1/commands/"+id {
		t.Fatalf("POST: %d Location %q %s", r.code, r.header.Get("Location"), r.body)
	}
	var ir client.IssueResponse
	if err := json.Unmarshal([]byte(r.body), &ir); err != nil || ir.ID != id || ir.Status != "pending" {
		t.Fatalf("POST body %s (%v)", r.body, err)
	}
	waitState(t, base, "", id, "completed", 20*time.Second)
	if got, want := eventKinds(t, base, "", id), []cmdq.EventKind{cmdq.EventCreated, cmdq.EventStarted, cmdq.EventStepCompleted, cmdq.EventCompleted}; !slices.Equal(got, want) {
		t.Errorf("events of demo.echo: %v, want %v", got, want)
	}
	var st cmdq.Status
	r = do(t, http.MethodGet, base+"/v1/commands/"+id, "", "")
	if err := json.Unmarshal([]byte(r.body), &st); err != nil || st.Type != "demo.echo" || st.Attempts != 1 || st.Step != 1 || st.CreatedAt.IsZero() {
		t.Errorf("GET command: %s (%v)", r.body, err)
	}

	// Idempotent re-POST (same body, other spacing): the same command, its current state.
	r = do(t, http.MethodPost, base+"/v1/commands", "", `{ "type":"demo.echo", "id":"`+id+`", "params":{ "n" : 1 } }`)
	if err := json.Unmarshal([]byte(r.body), &ir); err != nil || r.code != http.StatusOK || ir.ID != id || ir.Status != "completed" ||
		r.header.Get("Location") != "/v1/commands/"+id {
		t.Errorf("idempotent re-POST: %d %s", r.code, r.body)
	}
	// Conflicting re-POST.
	problemOf(t, "conflicting re-POST", do(t, http.MethodPost, base+"/v1/commands", "", `{"id":"`+id+`","type":"demo.echo","params":{"n":2}}`),
		http.StatusConflict, client.ProblemConflict)

	unknown := newUUID()
	big := `{"type":"demo.echo","params":{"x":"` + strings.Repeat("a", api.DefaultMaxBodyBytes+1) + `"}}`
	cases := []struct {
		name, method, path, body string
		headers                  []string
		code                     int
		typ                      string
		detail                   string
	}{
		{"malformed JSON", "POST", "/v1/commands", `{"type":`, nil, 400, client.ProblemInvalidRequest, ""},
		{"unknown field", "POST", "/v1/commands", `{"type":"demo.echo","bogus":1}`, nil, 400, client.ProblemInvalidRequest, "bogus"},
		{"missing type", "POST", "/v1/commands", `{"params":{}}`, nil, 400, client.ProblemInvalidRequest, ""},
		{"unknown type", "POST", "/v1/commands", `{"type":"nope.never"}`, nil, 400, client.ProblemInvalidRequest, "demo.echo"},
		{"params not decoding", "POST", "/v1/commands", `{"type":"demo.sleep","params":{"ms":"soon"}}`, nil, 400, client.ProblemInvalidRequest, ""},
		{"params unknown field", "POST", "/v1/commands", `{"type":"demo.fail","params":{"tims":3}}`, nil, 400, client.ProblemInvalidRequest, ""},
		{"params not an object", "POST", "/v1/commands", `{"type":"demo.echo","params":[1]}`, nil, 400, client.ProblemInvalidRequest, ""},
		{"id not a UUID", "POST", "/v1/commands", `{"type":"demo.echo","id":"order-17"}`, nil, 400, client.ProblemInvalidRequest, ""},
		{"not JSON content type", "POST", "/v1/commands", `{"type":"demo.echo"}`, []string{"Content-Type", "text/plain"}, 415, client.ProblemUnsupportedMediaType, ""},
		{"body over the limit", "POST", "/v1/commands", big, nil, 413, client.ProblemTooLarge, ""},
		{"GET malformed id", "GET", "/v1/commands/not-a-uuid", "", nil, 400, client.ProblemInvalidID, ""},
		{"GET uppercase id", "GET", "/v1/commands/" + strings.ToUpper(unknown), "", nil, 404, client.ProblemNotFound, ""},
		{"GET unknown", "GET", "/v1/commands/" + unknown, "", nil, 404, client.ProblemNotFound, ""},
		{"events malformed id", "GET", "/v1/commands/x/events", "", nil, 400, client.ProblemInvalidID, ""},
		{"events unknown", "GET", "/v1/commands/" + unknown + "/events", "", nil, 404, client.ProblemNotFound, ""},
		{"poison entry malformed id", "GET", "/v1/poison/x", "", nil, 400, client.ProblemInvalidID, ""},
		{"poison entry unknown", "GET", "/v1/poison/" + unknown, "", nil, 404, client.ProblemNotFound, ""},
		{"poison bad limit", "GET", "/v1/poison?limit=many", "", nil, 400, client.ProblemInvalidRequest, ""},
		{"requeue unknown", "POST", "/v1/poison/" + unknown + "/requeue", "", nil, 404, client.ProblemNotFound, ""},
		{"requeue not poisoned", "POST", "/v1/poison/" + id + "/requeue", "", nil, 409, client.ProblemConflict, ""},
		{"discard unknown", "DELETE", "/v1/poison/" + unknown, "", nil, 404, client.ProblemNotFound, ""},
		{"discard not poisoned", "DELETE", "/v1/poison/" + id, "", nil, 409, client.ProblemConflict, ""},
		{"method not allowed", "PUT", "/v1/commands", `{}`, nil, 405, client.ProblemMethodNotAllowed, ""},
		{"no route", "GET", "/v2/things", "", nil, 404, client.ProblemNotFound, ""},
	}
	for _, c := range cases {
		r := do(t, c.method, base+c.path, "", c.body, c.headers...)
		p := problemOf(t, c.name, r, c.code, c.typ)
		if c.detail != "" && !strings.Contains(p.Detail+r.body, c.detail) {
			t.Errorf("%s: problem %s does not mention %q", c.name, r.body, c.detail)
		}
		if c.code == 405 && r.header.Get("Allow") == "" {
			t.Errorf("%s: no Allow header", c.name)
		}
	}

	// Poison: demo.fail that keeps failing is poisoned after the ceiling (2 here).
	fid := newUUID()
	r = do(t, http.MethodPost, base+"/v1/commands", "", `{"id":"`+fid+`","type":"demo.fail","params":{"times":99}}`)
	if r.code != http.StatusAccepted {
		t.Fatalf("POST demo.fail: %d %s", r.code, r.body)
	}
	waitState(t, base, "", fid, "poisoned", 30*time.Second)
	e, ok := hasEntry(poisonList(t, base, "", ""), fid)
	if !ok || e.Type != "demo.fail" || e.DequeueCount != 2 || e.Reason != "attempts exhausted" || !strings.Contains(e.LastError, "planned failure 2 of 99") {
		t.Errorf("poison entry %+v (found %v)", e, ok)
	}
	if p := poisonList(t, base, "", "?type=demo.fail&limit=1"); len(p.Entries) != 1 || p.Entries[0].CommandID != fid {
		t.Errorf("GET /v1/poison?type=demo.fail&limit=1: %+v", p)
	}
	if _, ok := hasEntry(poisonList(t, base, "", "?type=demo.echo"), fid); ok {
		t.Errorf("?type=demo.echo lists the demo.fail entry")
	}
	r = do(t, http.MethodGet, base+"/v1/poison/"+fid, "", "")
	if r.code != http.StatusOK || !strings.Contains(r.body, `"commandId":"`+fid+`"`) {
		t.Errorf("GET /v1/poison/{id}: %d %s", r.code, r.body)
	}
	r = do(t, http.MethodPost, base+"/v1/poison/"+fid+"/requeue", "", "")
	if r.code != http.StatusAccepted {
		t.Fatalf("requeue: %d %s", r.code, r.body)
	}
	if kinds := eventKinds(t, base, "", fid); !slices.Contains(kinds, cmdq.EventRequeued) {
		t.Errorf("events after requeue: %v", kinds)
	}
	// It runs again (attempt 1 and 2 of the new message) and is poisoned again.
	waitState(t, base, "", fid, "poisoned", 30*time.Second)
	if r = do(t, http.MethodDelete, base+"/v1/poison/"+fid, "", ""); r.code != http.StatusNoContent {
		t.Fatalf("DELETE /v1/poison/{id}: %d %s", r.code, r.body)
	}
	problemOf(t, "GET discarded poison entry", do(t, http.MethodGet, base+"/v1/poison/"+fid, "", ""), 404, client.ProblemNotFound)
	if s := commandState(t, base, "", fid); s != "discarded" {
		t.Errorf("after DELETE the command is %s, want discarded", s)
	}
	kinds := eventKinds(t, base, "", fid)
	if n := strings.Count(strings.Join(toStrings(kinds), " "), string(cmdq.EventPoisoned)); n != 2 || kinds[len(kinds)-1] != cmdq.EventDiscarded {
		t.Errorf("events of the requeued and discarded command: %v", kinds)
	}

	// demo.steps resumes from the failed step.
	sid := newUUID()
	if r = do(t, http.MethodPost, base+"/v1/commands", "", `{"id":"`+sid+`","type":"demo.steps","params":{"steps":3,"failAt":2}}`); r.code != 202 {
		t.Fatalf("POST demo.steps: %d %s", r.code, r.body)
	}
	waitState(t, base, "", sid, "completed", 30*time.Second)
	r = do(t, http.MethodGet, base+"/v1/commands/"+sid+"/events", "", "")
	var er client.EventsResponse
	_ = json.Unmarshal([]byte(r.body), &er)
	var steps []int
	for _, e := range er.Events {
		if e.Kind == cmdq.EventStepCompleted {
			steps = append(steps, e.Step*10+e.Attempt) // step and the attempt that did it
		}
	}
	if !slices.Equal(steps, []int{11, 22, 32}) {
		t.Errorf("demo.steps step events (step*10+attempt) %v, want [11 22 32]: %s", steps, r.body)
	}

	// Health, readiness, metrics.
	for _, path := range []string{"/healthz", "/readyz"} {
		r = do(t, http.MethodGet, base+path, "", "")
		var h client.HealthResponse
		if err := json.Unmarshal([]byte(r.body), &h); err != nil || r.code != 200 || !h.Healthy || h.State == "" {
			t.Errorf("GET %s: %d %s", path, r.code, r.body)
		}
	}
	r = do(t, http.MethodGet, base+"/metrics", "", "")
	for _, want := range []string{`cmdq_commands_issued_total{type="demo.echo"} 1`, `cmdq_commands_poisoned_total{type="demo.fail"} 2`,
		`cmdq_storage_operations_total{op="table_batch",result="ok"}`, `cmdq_queue_depth{queue="`, "go_goroutines"} {
		if r.code != 200 || !strings.Contains(r.body, want) {
			t.Errorf("GET /metrics: %d, no %q", r.code, want)
		}
	}
}

func toStrings(kinds []cmdq.EventKind) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = string(k)
	}
	return out
}

// testTokens is apitest's token set in --tokens form.
const testTokens = apitest.IssuerToken + ":issuer," + apitest.ReaderToken + ":reader," +
	apitest.OperatorToken + ":operator," + apitest.AllToken + ":issuer+reader+operator"

// TestServeAuth checks every route against every role on a server started
// with tokens (from CMDQ_TOKENS) on a non-loopback address, which tokens allow.
func TestServeAuth(t *testing.T) {
	t.Parallel()
	srv := startServe(t, serveOpts{env: []string{"CMDQ_TOKENS=" + testTokens}, args: []string{"--addr", "0.0.0.0:0"}})
	base := srv.URL
	id := newUUID()
	issue := `{"id":"` + id + `","type":"demo.echo"}`
	if r := do(t, http.MethodPost, base+"/v1/commands", apitest.IssuerToken, issue); r.code != 202 {
		t.Fatalf("POST with issuer token: %d %s", r.code, r.body)
	}
	waitState(t, base, apitest.ReaderToken, id, "completed", 20*time.Second)

	const (
		none = ""
		bad  = "not-a-configured-token-0000"
	)
	roles := []struct{ name, token string }{{"none", none}, {"unknown", bad}, {"issuer", apitest.IssuerToken},
		{"reader", apitest.ReaderToken}, {"operator", apitest.OperatorToken}, {"all", apitest.AllToken}}
	routes := []struct {
		method, path, body string
		// allowed is the answer for a role that may use the route; roles
		// lists them.
		allowed int
		roles   []string
	}{
		{"POST", "/v1/commands", issue, 200, []string{"issuer", "all"}},
		{"GET", "/v1/commands/" + id, "", 200, []string{"reader", "operator", "all"}},
		{"GET", "/v1/commands/" + id + "/events", "", 200, []string{"reader", "operator", "all"}},
		{"GET", "/v1/poison", "", 200, []string{"operator", "all"}},
		{"GET", "/v1/poison/" + id, "", 404, []string{"operator", "all"}},
		{"POST", "/v1/poison/" + id + "/requeue", "", 409, []string{"operator", "all"}},
		{"DELETE", "/v1/poison/" + id, "", 409, []string{"operator", "all"}},
		{"GET", "/metrics", "", 200, []string{"reader", "operator", "all"}},
		{"GET", "/healthz", "", 200, []string{"none", "unknown", "issuer", "reader", "operator", "all"}},
		{"GET", "/readyz", "", 200, []string{"none", "unknown", "issuer", "reader", "operator", "all"}},
	}
	for _, rt := range routes {
		for _, role := range roles {
			r := do(t, rt.method, base+rt.path, role.token, rt.body)
			want := rt.allowed
			switch {
			case slices.Contains(rt.roles, role.name):
			case role.token == none || role.token == bad:
				want = http.StatusUnauthorized
			default:
				want = http.StatusForbidden
			}
			if r.code != want {
				t.Errorf("%s %s as %s: %d %s, want %d", rt.method, rt.path, role.name, r.code, r.body, want)
				continue
			}
			if want == http.StatusUnauthorized && r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s as %s: 401 without WWW-Authenticate", rt.method, rt.path, role.name)
			}
			if want == http.StatusForbidden {
				problemOf(t, rt.method+" "+rt.path+" as "+role.name, r, 403, client.ProblemForbidden)
			}
		}
	}
}

// TestServeRefusesNonLoopbackWithoutTokens: a non-loopback --addr without
// tokens fails at once with a message naming the fixes; --insecure starts.
func TestServeRefusesNonLoopbackWithoutTokens(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		r := runCmdq(t, 20*time.Second, nil, "serve", "--addr", addr, "--data", t.TempDir())
		if r.code != 1 || !strings.Contains(r.stderr, "refusing to listen") || !strings.Contains(r.stderr, "--tokens") || !strings.Contains(r.stderr, "--insecure") {
			t.Errorf("serve --addr %s without tokens: exit %d, stderr %q", addr, r.code, r.stderr)
		}
	}
	// A malformed token list is refused too, without echoing the token.
	r := runCmdq(t, 20*time.Second, []string{"CMDQ_TOKENS=short:issuer"}, "serve", "--addr", "127.0.0.1:0", "--data", t.TempDir())
	if r.code != 1 || !strings.Contains(r.stderr, "--tokens") || strings.Contains(r.stderr, "short:") {
		t.Errorf("serve with a bad token list: exit %d, stderr %q", r.code, r.stderr)
	}
	srv := startServe(t, serveOpts{args: []string{"--addr", "0.0.0.0:0", "--insecure"}})
	if r := do(t, http.MethodGet, srv.URL+"/v1/poison", "", ""); r.code != 200 {
		t.Errorf("--insecure server: GET /v1/poison: %d %s", r.code, r.body)
	}
}
