package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

type resp struct {
	code   int
	header http.Header
	body   []byte
}

func send(t *testing.T, method, url, token, contentType, body string) resp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{code: r.StatusCode, header: r.Header, body: b}
}

func post(t *testing.T, url, body string) resp {
	t.Helper()
	return send(t, http.MethodPost, url, "", "application/json", body)
}

// problem decodes a problem response and checks its shape.
func problem(t *testing.T, r resp, wantStatus int, wantType string) client.Problem {
	t.Helper()
	if r.code != wantStatus {
		t.Fatalf("status %d, want %d; body %s", r.code, wantStatus, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != client.ProblemContentType {
		t.Fatalf("Content-Type %q, want %q; body %s", ct, client.ProblemContentType, r.body)
	}
	var p client.Problem
	dec := json.NewDecoder(strings.NewReader(string(r.body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Status != wantStatus || p.Type != wantType || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want status %d type %s with title and detail", p, wantStatus, wantType)
	}
	return p
}

func decode[T any](t *testing.T, r resp, wantStatus int) T {
	t.Helper()
	if r.code != wantStatus {
		t.Fatalf("status %d, want %d; body %s", r.code, wantStatus, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
	return v
}

func TestIssueGetEvents(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	r := post(t, s.URL+"/v1/commands", `{"type":"SendEmail","params":{"to":"a@example.com"},"correlationId":"req-1"}`)
	got := decode[client.IssueResponse](t, r, http.StatusAccepted)
	if err := cmdq.ValidateID(got.ID); err != nil || got.Status != "pending" {
		t.Fatalf("response %+v: id %v", got, err)
	}
	if loc := r.header.Get("Location"); loc != "/v1/commands/"+got.ID {
		t.Fatalf("Location %q", loc)
	}
	if n := s.QueueCount(t, ""); n != 1 {
		t.Fatalf("queue has %d messages, want 1", n)
	}

	st := decode[cmdq.Status](t, send(t, http.MethodGet, s.URL+"/v1/commands/"+got.ID, "", "", ""), http.StatusOK)
	if st.ID != got.ID || st.Type != "SendEmail" || st.State != cmdq.StatePending || st.Attempts != 0 || st.Step != 0 ||
		st.CorrelationID != "req-1" || st.CreatedAt.IsZero() || st.UpdatedAt.IsZero() {
		t.Fatalf("status %+v", st)
	}
	// The body has the contract's field names.
	var raw map[string]any
	if err := json.Unmarshal(send(t, http.MethodGet, s.URL+"/v1/commands/"+got.ID, "", "", "").body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "type", "status", "attempts", "step", "createdAt", "updatedAt"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("status body lacks %q: %v", k, raw)
		}
	}

	ev := decode[client.EventsResponse](t, send(t, http.MethodGet, s.URL+"/v1/commands/"+got.ID+"/events", "", "", ""), http.StatusOK)
	if ev.ID != got.ID || len(ev.Events) != 1 || ev.Events[0].Kind != cmdq.EventCreated || ev.Events[0].Seq != 1 {
		t.Fatalf("events %+v", ev)
	}
}

func TestIssueIdempotent(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	id := uuid.NewString()
	body := fmt.Sprintf(`{"type":"SendEmail","id":%q,"params":{"to":"a@example.com","n":1}}`, id)
	first := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", body), http.StatusAccepted)
	if first.ID != id {
		t.Fatalf("id %q, want %q", first.ID, id)
	}
	// Same body: the same command, 200, not issued twice.
	again := post(t, s.URL+"/v1/commands", body)
	if got := decode[client.IssueResponse](t, again, http.StatusOK); got.ID != id || got.Status != "pending" {
		t.Fatalf("repeat %+v", got)
	}
	if loc := again.header.Get("Location"); loc != "/v1/commands/"+id {
		t.Fatalf("Location %q", loc)
	}
	// Different spacing of the same params is the same request.
	spaced := fmt.Sprintf("{\"type\":\"SendEmail\",\"id\":%q,\"params\":{ \"to\" : \"a@example.com\",\n \"n\": 1 }}", id)
	decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", spaced), http.StatusOK)
	if n := s.QueueCount(t, ""); n != 1 {
		t.Fatalf("queue has %d messages, want 1 (no re-enqueue for a repeat)", n)
	}
	// Different params or type: 409.
	p := problem(t, post(t, s.URL+"/v1/commands", fmt.Sprintf(`{"type":"SendEmail","id":%q,"params":{"to":"b@example.com"}}`, id)), http.StatusConflict, client.ProblemConflict)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "#/id" {
		t.Fatalf("conflict errors %+v", p.Errors)
	}
	problem(t, post(t, s.URL+"/v1/commands", fmt.Sprintf(`{"type":"Other","id":%q,"params":{"to":"a@example.com","n":1}}`, id)), http.StatusConflict, client.ProblemConflict)
	// The repeat reports the current state.
	s.Poison(t, id, "test", "boom")
	if got := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", body), http.StatusOK); got.Status != "poisoned" {
		t.Fatalf("repeat after poisoning: %+v", got)
	}
}

func TestIssueInvalid(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{MaxBodyBytes: 4096})
	cases := []struct {
		name, ct, body string
		status         int
		typ, pointer   string
	}{
		{"empty body", "application/json", "", 400, client.ProblemInvalidRequest, ""},
		{"malformed JSON", "application/json", `{"type":`, 400, client.ProblemInvalidRequest, ""},
		{"syntax error", "application/json", `{"type" "x"}`, 400, client.ProblemInvalidRequest, ""},
		{"not an object", "application/json", `["SendEmail"]`, 400, client.ProblemInvalidRequest, ""},
		{"trailing data", "application/json", `{"type":"A"} {}`, 400, client.ProblemInvalidRequest, ""},
		{"unknown field", "application/json", `{"type":"A","prams":{}}`, 400, client.ProblemInvalidRequest, "#/prams"},
		{"missing type", "application/json", `{"params":{}}`, 400, client.ProblemInvalidRequest, "#/type"},
		{"bad type", "application/json", `{"type":"1bad type"}`, 400, client.ProblemInvalidRequest, "#/type"},
		{"type not string", "application/json", `{"type":42}`, 400, client.ProblemInvalidRequest, "#/type"},
		{"params array", "application/json", `{"type":"A","params":[1]}`, 400, client.ProblemInvalidRequest, "#/params"},
		{"params string", "application/json", `{"type":"A","params":"x"}`, 400, client.ProblemInvalidRequest, "#/params"},
		{"id not uuid", "application/json", `{"type":"A","id":"42"}`, 400, client.ProblemInvalidRequest, "#/id"},
		{"id not hex", "application/json", `{"type":"A","id":"0B9F7A4E-3C1D-4E2A-9F61-2D8C5B7E4A1G"}`, 400, client.ProblemInvalidRequest, "#/id"},
		{"correlation too long", "application/json", `{"type":"A","correlationId":"` + strings.Repeat("x", 257) + `"}`, 400, client.ProblemInvalidRequest, "#/correlationId"},
		{"over limit", "application/json", `{"type":"A","params":{"x":"` + strings.Repeat("x", 5000) + `"}}`, 413, client.ProblemTooLarge, ""},
		{"text/plain", "text/plain", `{"type":"A"}`, 415, client.ProblemUnsupportedMediaType, ""},
		{"no content type", "", `{"type":"A"}`, 415, client.ProblemUnsupportedMediaType, ""},
		{"form", "application/x-www-form-urlencoded", `type=A`, 415, client.ProblemUnsupportedMediaType, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := problem(t, send(t, http.MethodPost, s.URL+"/v1/commands", "", c.ct, c.body), c.status, c.typ)
			if c.pointer != "" && (len(p.Errors) == 0 || p.Errors[0].Pointer != c.pointer) {
				t.Fatalf("errors %+v, want pointer %s", p.Errors, c.pointer)
			}
			if p.Instance != "/v1/commands" {
				t.Fatalf("instance %q", p.Instance)
			}
		})
	}
	t.Run("several fields", func(t *testing.T) {
		t.Parallel()
		p := problem(t, post(t, s.URL+"/v1/commands", `{"type":"","params":[],"id":"x"}`), 400, client.ProblemInvalidRequest)
		if len(p.Errors) != 3 {
			t.Fatalf("errors %+v, want type, params and id", p.Errors)
		}
	})
	t.Run("nothing stored", func(t *testing.T) {
		t.Parallel()
		// Parallel subtests run after the parent's body, so the two
		// accepted requests below are the only messages.
		if n := s.QueueCount(t, ""); n != 2 {
			t.Fatalf("queue has %d messages, want 2 (invalid requests must enqueue nothing)", n)
		}
	})
	// A JSON media type with parameters, or a +json type, is accepted.
	for _, ct := range []string{"application/json; charset=utf-8", "application/vnd.cmdq+json"} {
		decode[client.IssueResponse](t, send(t, http.MethodPost, s.URL+"/v1/commands", "", ct, `{"type":"A"}`), http.StatusAccepted)
	}
}

func TestIssueParamsTooLarge(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	// Under the 1 MiB body limit, over the 500 KiB params limit.
	body := `{"type":"A","params":{"blob":"` + strings.Repeat("x", cmdq.MaxParamsBytes) + `"}}`
	p := problem(t, post(t, s.URL+"/v1/commands", body), http.StatusRequestEntityTooLarge, client.ProblemTooLarge)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "#/params" {
		t.Fatalf("problem %+v", p)
	}
	if n := s.QueueCount(t, ""); n != 0 {
		t.Fatalf("queue has %d messages", n)
	}
}

type sendEmail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (sendEmail) CommandType() string { return "SendEmail" }

// TestIssueKnownTypes: a client that knows its types (here declared, so
// nothing processes them) makes the API refuse other types and params that
// do not decode, before anything is stored.
func TestIssueKnownTypes(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Setup: func(c *cmdq.Client) error { return cmdq.Declare[sendEmail](c) }})
	decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"SendEmail","params":{"to":"a@example.com"}}`), http.StatusAccepted)
	p := problem(t, post(t, s.URL+"/v1/commands", `{"type":"SendMail","params":{}}`), 400, client.ProblemInvalidRequest)
	if p.Errors[0].Pointer != "#/type" || !strings.Contains(p.Detail, "SendEmail") {
		t.Fatalf("unknown type problem %+v should name the registered types", p)
	}
	if want := `unknown command type "SendMail" (did you mean SendEmail?); this server's types: SendEmail`; p.Detail != want {
		t.Fatalf("unknown type detail %q, want %q", p.Detail, want)
	}
	if p = problem(t, post(t, s.URL+"/v1/commands", `{"type":"billing.Refund","params":{}}`), 400, client.ProblemInvalidRequest); strings.Contains(p.Detail, "did you mean") {
		t.Fatalf("a type far from every registered one gets a suggestion: %q", p.Detail)
	}
	p = problem(t, post(t, s.URL+"/v1/commands", `{"type":"SendEmail","params":{"to":"a@example.com","cc":"b"}}`), 400, client.ProblemInvalidRequest)
	if p.Errors[0].Pointer != "#/params" || !strings.Contains(p.Detail, "cc") {
		t.Fatalf("unknown param problem %+v", p)
	}
	p = problem(t, post(t, s.URL+"/v1/commands", `{"type":"SendEmail","params":{"to":5}}`), 400, client.ProblemInvalidRequest)
	if p.Errors[0].Pointer != "#/params" {
		t.Fatalf("wrong param type problem %+v", p)
	}
	if n := s.QueueCount(t, ""); n != 1 {
		t.Fatalf("queue has %d messages, want only the valid command", n)
	}
}

// resizeImage is a command type the server's Client only declares: its
// handler runs in another process.
type resizeImage struct {
	URL   string `json:"url"`
	Width int    `json:"width"`
}

func (resizeImage) CommandType() string { return "images.resize" }

// TestIssueDeclaredTypeChecksParams: a server whose Client only declares a
// type (cmdq.Declare, no handler) refuses params that do not decode into
// the type's Go type (a string where it has an int): the Issuer checks
// them before anything is stored, and the API answers 400 naming #/params.
// Nothing is stored (the ID stays unknown: 404) or queued, and the same ID
// with params that decode is then accepted.
func TestIssueDeclaredTypeChecksParams(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Setup: func(c *cmdq.Client) error { return cmdq.Declare[resizeImage](c) }})
	if s.Client.Handles() {
		t.Fatal("the client runs handlers; this test needs one that only declares")
	}
	id := uuid.NewString()
	p := problem(t, post(t, s.URL+"/v1/commands", `{"id":"`+id+`","type":"images.resize","params":{"url":"a.png","width":"wide"}}`),
		http.StatusBadRequest, client.ProblemInvalidRequest)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "#/params" || !strings.Contains(p.Errors[0].Detail, "width") {
		t.Fatalf("problem %+v: want one field error at #/params naming width", p)
	}
	for _, path := range []string{"/v1/commands/" + id, "/v1/commands/" + id + "/events"} {
		problem(t, send(t, http.MethodGet, s.URL+path, "", "", ""), http.StatusNotFound, client.ProblemNotFound)
	}
	if _, err := s.Client.Get(t.Context(), id); !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("the refused command was stored: Get = %v", err)
	}
	if n := s.QueueCount(t, ""); n != 0 {
		t.Fatalf("a refused command put %d messages on the queue", n)
	}
	ok := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"id":"`+id+`","type":"images.resize","params":{"url":"a.png","width":640}}`), http.StatusAccepted)
	if ok.ID != id || ok.Status != cmdq.StatePending {
		t.Fatalf("the same ID with params that decode: %+v", ok)
	}
}

func TestGetErrors(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	for _, path := range []string{"/v1/commands/%s", "/v1/commands/%s/events", "/v1/poison/%s"} {
		problem(t, send(t, http.MethodGet, s.URL+fmt.Sprintf(path, "not-a-uuid"), "", "", ""), 400, client.ProblemInvalidID)
		problem(t, send(t, http.MethodGet, s.URL+fmt.Sprintf(path, uuid.NewString()), "", "", ""), 404, client.ProblemNotFound)
	}
	problem(t, send(t, http.MethodPost, s.URL+"/v1/poison/bad/requeue", "", "", ""), 400, client.ProblemInvalidID)
	problem(t, send(t, http.MethodPost, s.URL+"/v1/poison/"+uuid.NewString()+"/requeue", "", "", ""), 404, client.ProblemNotFound)
	problem(t, send(t, http.MethodDelete, s.URL+"/v1/poison/"+uuid.NewString(), "", "", ""), 404, client.ProblemNotFound)
	problem(t, send(t, http.MethodGet, s.URL+"/v2/whatever", "", "", ""), 404, client.ProblemNotFound)
}

func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	id := uuid.NewString()
	cases := []struct{ method, path, allow string }{
		{http.MethodPut, "/v1/commands", "GET, HEAD, POST"},
		{http.MethodDelete, "/v1/commands", "GET, HEAD, POST"},
		{http.MethodPost, "/v1/commands/" + id, "GET, HEAD"},
		{http.MethodPut, "/v1/commands/" + id + "/events", "GET, HEAD"},
		{http.MethodPost, "/v1/poison", "GET, HEAD"},
		{http.MethodPost, "/v1/poison/" + id, "GET, HEAD, DELETE"},
		{http.MethodGet, "/v1/poison/" + id + "/requeue", "POST"},
		{http.MethodPost, "/healthz", "GET, HEAD"},
		{http.MethodPost, "/readyz", "GET, HEAD"},
		{http.MethodPost, "/metrics", "GET, HEAD"},
	}
	for _, c := range cases {
		r := send(t, c.method, s.URL+c.path, "", "", "")
		problem(t, r, http.StatusMethodNotAllowed, client.ProblemMethodNotAllowed)
		if got := r.header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
}

func TestPoisonRoutes(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	issue := func(typ string) string {
		return decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"`+typ+`"}`), http.StatusAccepted).ID
	}
	a, b, c := issue("A"), issue("B"), issue("A")
	s.Poison(t, a, "ceiling exceeded", "boom a")
	s.Poison(t, b, "permanent error", "boom b")
	s.Poison(t, c, "ceiling exceeded", "boom c")

	all := decode[cmdq.PoisonPage](t, send(t, http.MethodGet, s.URL+"/v1/poison", "", "", ""), http.StatusOK)
	if len(all.Entries) != 3 || all.Continuation != "" {
		t.Fatalf("list %+v", all)
	}
	for i := 1; i < len(all.Entries); i++ {
		if all.Entries[i].PoisonedAt.After(all.Entries[i-1].PoisonedAt) {
			t.Fatalf("not newest first: %+v", all.Entries)
		}
	}
	onlyA := decode[cmdq.PoisonPage](t, send(t, http.MethodGet, s.URL+"/v1/poison?type=A", "", "", ""), http.StatusOK)
	if len(onlyA.Entries) != 2 || onlyA.Entries[0].Type != "A" || onlyA.Entries[1].Type != "A" {
		t.Fatalf("type filter %+v", onlyA)
	}
	p1 := decode[cmdq.PoisonPage](t, send(t, http.MethodGet, s.URL+"/v1/poison?limit=2", "", "", ""), http.StatusOK)
	if len(p1.Entries) != 2 || p1.Continuation == "" {
		t.Fatalf("page 1 %+v", p1)
	}
	p2 := decode[cmdq.PoisonPage](t, send(t, http.MethodGet, s.URL+"/v1/poison?limit=2&continuation="+p1.Continuation, "", "", ""), http.StatusOK)
	if len(p2.Entries) != 1 || p2.Continuation != "" || p2.Entries[0].CommandID != all.Entries[2].CommandID {
		t.Fatalf("page 2 %+v", p2)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "type=1bad", "continuation=zz", "sort=asc"} {
		problem(t, send(t, http.MethodGet, s.URL+"/v1/poison?"+q, "", "", ""), 400, client.ProblemInvalidRequest)
	}

	e := decode[cmdq.PoisonEntry](t, send(t, http.MethodGet, s.URL+"/v1/poison/"+a, "", "", ""), http.StatusOK)
	if e.CommandID != a || e.Type != "A" || e.Reason != "ceiling exceeded" || e.LastError != "boom a" || e.DequeueCount != 5 || e.PoisonedAt.IsZero() {
		t.Fatalf("entry %+v", e)
	}

	before := s.QueueCount(t, "")
	r := send(t, http.MethodPost, s.URL+"/v1/poison/"+a+"/requeue", "", "", "")
	if got := decode[client.IssueResponse](t, r, http.StatusAccepted); got.ID != a || got.Status != "pending" {
		t.Fatalf("requeue %+v", got)
	}
	if s.QueueCount(t, "") != before+1 {
		t.Fatalf("requeue did not enqueue a message")
	}
	if st, err := s.Client.Get(context.Background(), a); err != nil || st.State != cmdq.StatePending {
		t.Fatalf("after requeue: %+v %v", st, err)
	}
	problem(t, send(t, http.MethodGet, s.URL+"/v1/poison/"+a, "", "", ""), 404, client.ProblemNotFound)
	problem(t, send(t, http.MethodPost, s.URL+"/v1/poison/"+a+"/requeue", "", "", ""), 409, client.ProblemConflict)
	problem(t, send(t, http.MethodDelete, s.URL+"/v1/poison/"+a, "", "", ""), 409, client.ProblemConflict)

	r = send(t, http.MethodDelete, s.URL+"/v1/poison/"+b, "", "", "")
	if r.code != http.StatusNoContent || len(r.body) != 0 {
		t.Fatalf("discard: %d %s", r.code, r.body)
	}
	if st, err := s.Client.Get(context.Background(), b); err != nil || st.State != cmdq.StateDiscarded {
		t.Fatalf("after discard: %+v %v", st, err)
	}
	problem(t, send(t, http.MethodDelete, s.URL+"/v1/poison/"+b, "", "", ""), 409, client.ProblemConflict)
	ev := decode[client.EventsResponse](t, send(t, http.MethodGet, s.URL+"/v1/commands/"+b+"/events", "", "", ""), http.StatusOK)
	last := ev.Events[len(ev.Events)-1]
	if last.Kind != cmdq.EventDiscarded || last.By != "api:anonymous" {
		t.Fatalf("last event %+v", last)
	}
	left := decode[cmdq.PoisonPage](t, send(t, http.MethodGet, s.URL+"/v1/poison", "", "", ""), http.StatusOK)
	if len(left.Entries) != 1 || left.Entries[0].CommandID != c {
		t.Fatalf("left %+v", left)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	h := decode[client.HealthResponse](t, send(t, http.MethodGet, s.URL+"/healthz", "", "", ""), http.StatusOK)
	if h.State != "ok" || !h.Healthy {
		t.Fatalf("healthz %+v", h)
	}
	decode[client.HealthResponse](t, send(t, http.MethodGet, s.URL+"/readyz", "", "", ""), http.StatusOK)

	healthy := make(chan bool, 1)
	healthy <- true
	s2 := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), Health: func() (string, bool, any) {
		ok := <-healthy
		healthy <- ok
		if ok {
			return "idle", true, map[string]int{"inFlight": 0}
		}
		return "unhealthy", false, map[string]string{"lastError": "dequeue: connection refused"}
	}})
	decode[client.HealthResponse](t, send(t, http.MethodGet, s2.URL+"/readyz", "", "", ""), http.StatusOK)
	<-healthy
	healthy <- false
	h = decode[client.HealthResponse](t, send(t, http.MethodGet, s2.URL+"/healthz", apitest.ReaderToken, "", ""), http.StatusOK)
	if h.State != "unhealthy" || h.Healthy || h.Detail.(map[string]any)["lastError"] != "dequeue: connection refused" {
		t.Fatalf("healthz %+v", h)
	}
	p := problem(t, send(t, http.MethodGet, s2.URL+"/readyz", "", "", ""), 503, client.ProblemUnavailable)
	if !strings.Contains(p.Detail, "unhealthy") {
		t.Fatalf("readyz detail %q", p.Detail)
	}
}

// TestHealthDetailNeedsReader: /healthz and /readyz tell anyone the state,
// but the detail (a processor's last error names the storage endpoint and
// account) only to the reader role.
func TestHealthDetailNeedsReader(t *testing.T) {
	t.Parallel()
	const secret = `queue "cmdq-commands" dequeue: Get "https://acct.queue.core.windows.net/cmdq-commands/messages": dial tcp: connection refused`
	s := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), Health: func() (string, bool, any) {
		return "polling", true, map[string]string{"lastError": secret}
	}})
	for _, path := range []string{"/healthz", "/readyz"} {
		for _, tok := range []string{"", apitest.IssuerToken, "not-a-configured-token-0123"} {
			r := send(t, http.MethodGet, s.URL+path, tok, "", "")
			h := decode[client.HealthResponse](t, r, http.StatusOK)
			if h.State != "polling" || !h.Healthy || h.Detail != nil || strings.Contains(string(r.body), "windows.net") {
				t.Errorf("%s with token %q: %s, want the state without detail", path, tok, r.body)
			}
		}
		for _, tok := range []string{apitest.ReaderToken, apitest.OperatorToken} {
			r := send(t, http.MethodGet, s.URL+path, tok, "", "")
			if h := decode[client.HealthResponse](t, r, http.StatusOK); h.Detail == nil || !strings.Contains(string(r.body), "windows.net") {
				t.Errorf("%s with a reader token: %s, want the detail", path, r.body)
			}
		}
	}
	// Without tokens every request has the reader role (loopback only).
	open := apitest.Start(t, apitest.Options{Health: func() (string, bool, any) { return "polling", true, map[string]int{"inFlight": 2} }})
	if h := decode[client.HealthResponse](t, send(t, http.MethodGet, open.URL+"/healthz", "", "", ""), http.StatusOK); h.Detail == nil {
		t.Errorf("without tokens: no detail")
	}
}

func TestInternalErrorIsProblem(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	// Closing the store makes every storage call fail: the API answers 500
	// with a reference, not the storage error.
	if err := s.Store.Close(); err != nil {
		t.Fatal(err)
	}
	p := problem(t, send(t, http.MethodGet, s.URL+"/v1/commands/"+uuid.NewString(), "", "", ""), 500, client.ProblemInternal)
	if !strings.Contains(p.Detail, "Reference") {
		t.Fatalf("detail %q", p.Detail)
	}
	problem(t, post(t, s.URL+"/v1/commands", `{"type":"A"}`), 500, client.ProblemInternal)
}

// issue issues a command of type typ with params {"n":1} through the
// server's Client and returns its ID.
func issue(t *testing.T, srv *apitest.Server, typ string) string {
	t.Helper()
	res, err := srv.Client.IssueRaw(context.Background(), cmdq.Raw{Type: typ, Params: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatalf("issue %s: %v", typ, err)
	}
	return res.ID
}
