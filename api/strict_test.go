package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// TestStrictDecoding: what a lenient decoder resolves silently (the last of
// two keys wins, "TYPE" means "type", the last of two limits wins, a pair
// with ';' is dropped) is a 400 that names the problem, and nothing is
// stored.
func TestStrictDecoding(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	for _, c := range []struct{ name, body, want, pointer string }{
		{"duplicate type", `{"type":"demo.fail","type":"demo.echo"}`, `"type" appears twice`, "#/type"},
		{"case variant duplicate", `{"type":"demo.fail","TYPE":"demo.echo"}`, `differ only in case`, "#/TYPE"},
		{"case variant alone", `{"TYPE":"demo.echo"}`, `write "type", not "TYPE"`, "#/TYPE"},
		{"case variant correlationId", `{"type":"A","correlationid":"x"}`, `write "correlationId"`, "#/correlationid"},
		{"duplicate in params", `{"type":"A","params":{"ms":1,"ms":2}}`, `"ms" appears twice`, "#/params/ms"},
		{"case duplicate in params", `{"type":"A","params":{"ms":1,"MS":2}}`, `differ only in case`, "#/params/MS"},
		{"duplicate deep in an array", `{"type":"A","params":{"a":[0,{"b/c":1,"b/c":2}]}}`, `appears twice`, "#/params/a/1/b~1c"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := problem(t, post(t, s.URL+"/v1/commands", c.body), http.StatusBadRequest, client.ProblemInvalidRequest)
			if !strings.Contains(p.Detail, c.want) || len(p.Errors) != 1 || p.Errors[0].Pointer != c.pointer {
				t.Fatalf("problem %+v, want detail with %q and pointer %s", p, c.want, c.pointer)
			}
		})
	}
	// Same keys in different objects are fine.
	decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"A","params":{"a":{"x":1},"b":{"x":1},"type":1}}`), http.StatusAccepted)

	for _, q := range []string{"limit=5&limit=2000", "limit=5;x=1", "type=A&type=B", "limit=5&%zz=1"} {
		p := problem(t, send(t, http.MethodGet, s.URL+"/v1/poison?"+q, "", "", ""), http.StatusBadRequest, client.ProblemInvalidRequest)
		if len(p.Errors) == 0 {
			t.Errorf("?%s: %+v names no parameter", q, p)
		}
		if strings.Contains(q, ";") && !strings.Contains(p.Detail, "';'") {
			t.Errorf("?%s: detail %q does not explain ';'", q, p.Detail)
		}
	}
	decode[map[string]any](t, send(t, http.MethodGet, s.URL+"/v1/poison?limit=5&type=A", "", "", ""), http.StatusOK)
	// Other /v1 routes too.
	problem(t, send(t, http.MethodGet, s.URL+"/v1/commands/"+apitestID+"?a=1&a=2", "", "", ""), http.StatusBadRequest, client.ProblemInvalidRequest)

	// A different correlationId under an existing id is a conflict, not the
	// old command.
	const id = "0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10"
	decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"id":"`+id+`","type":"A","correlationId":"order-1"}`), http.StatusAccepted)
	decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"id":"`+id+`","type":"A","correlationId":"order-1"}`), http.StatusOK)
	for _, body := range []string{`{"id":"` + id + `","type":"A","correlationId":"order-2"}`, `{"id":"` + id + `","type":"A"}`} {
		p := problem(t, post(t, s.URL+"/v1/commands", body), http.StatusConflict, client.ProblemConflict)
		if !strings.Contains(p.Detail, "correlationId") {
			t.Errorf("409 detail %q does not name correlationId", p.Detail)
		}
	}
	// Only the accepted ones were stored: A with params, and id.
	if n := s.QueueCount(t, ""); n != 2 {
		t.Fatalf("queue has %d messages, want 2", n)
	}
}

const apitestID = "7d3c2b1a-0f9e-4d8c-b7a6-5e4d3c2b1a09"
