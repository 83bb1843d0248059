package api_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// request sends method url with body (content type ct unless "") and
// extra header pairs.
func request(t *testing.T, method, url, ct, body string, headers ...string) resp {
	t.Helper()
	var req *http.Request
	var err error
	if body != "" {
		req, err = http.NewRequest(method, url, strings.NewReader(body))
	} else {
		req, err = http.NewRequest(method, url, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	r, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp{code: r.StatusCode, header: r.Header, body: []byte(b.String())}
}

// TestCrossSiteRequestsRefused: without tokens, a page on another site must
// not be able to issue, requeue or discard through a browser: cross-site
// state changes are refused (Origin / Sec-Fetch-Site), and a body needs
// Content-Type: application/json. Same-origin pages and non-browser clients
// (no Origin) still work.
func TestCrossSiteRequestsRefused(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	evil := []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}

	// The report's request: a "simple" cross-site POST with no Content-Type.
	problem(t, request(t, http.MethodPost, s.URL+"/v1/commands", "", `{"type":"demo.echo"}`, evil...), http.StatusForbidden, client.ProblemCrossSite)
	// With a JSON type (after a preflight a browser would not get past).
	problem(t, request(t, http.MethodPost, s.URL+"/v1/commands", "application/json", `{"type":"demo.echo"}`, evil...), http.StatusForbidden, client.ProblemCrossSite)
	// An older browser without Sec-Fetch-Site: the Origin decides.
	problem(t, request(t, http.MethodPost, s.URL+"/v1/commands", "text/plain", `{"type":"demo.echo"}`, "Origin", "https://evil.example"), http.StatusForbidden, client.ProblemCrossSite)
	// same-site is not same-origin.
	problem(t, request(t, http.MethodPost, s.URL+"/v1/commands", "application/json", `{"type":"demo.echo"}`, "Sec-Fetch-Site", "same-site"), http.StatusForbidden, client.ProblemCrossSite)
	if n := s.QueueCount(t, ""); n != 0 {
		t.Fatalf("cross-site requests enqueued %d commands", n)
	}

	// Missing Content-Type is refused even without an Origin.
	problem(t, request(t, http.MethodPost, s.URL+"/v1/commands", "", `{"type":"demo.echo"}`), http.StatusUnsupportedMediaType, client.ProblemUnsupportedMediaType)

	// Same-origin pages and non-browser clients may.
	id := decode[client.IssueResponse](t, request(t, http.MethodPost, s.URL+"/v1/commands", "application/json", `{"type":"demo.echo"}`, "Origin", s.URL, "Sec-Fetch-Site", "same-origin"), http.StatusAccepted).ID
	decode[client.IssueResponse](t, request(t, http.MethodPost, s.URL+"/v1/commands", "application/json", `{"type":"demo.echo"}`, "Origin", s.URL), http.StatusAccepted)
	decode[client.IssueResponse](t, request(t, http.MethodPost, s.URL+"/v1/commands", "application/json", `{"type":"demo.echo"}`), http.StatusAccepted)

	// Poison actions: cross-site refused, the entry stays.
	s.Poison(t, id, "test", "boom")
	problem(t, request(t, http.MethodPost, s.URL+"/v1/poison/"+id+"/requeue", "", "", evil...), http.StatusForbidden, client.ProblemCrossSite)
	problem(t, request(t, http.MethodDelete, s.URL+"/v1/poison/"+id, "", "", evil...), http.StatusForbidden, client.ProblemCrossSite)
	// A form body on the no-body requeue route is refused too.
	problem(t, request(t, http.MethodPost, s.URL+"/v1/poison/"+id+"/requeue", "text/plain", "x"), http.StatusUnsupportedMediaType, client.ProblemUnsupportedMediaType)
	if _, err := s.Client.GetPoison(t.Context(), id); err != nil {
		t.Fatalf("poison entry after refused actions: %v", err)
	}
	// Reads are not state changes: answered, but without CORS headers a
	// browser does not hand them to the other site.
	r := request(t, http.MethodGet, s.URL+"/v1/commands/"+id, "", "", evil...)
	if r.code != http.StatusOK || r.header.Get("Access-Control-Allow-Origin") != "" || !strings.Contains(strings.Join(r.header.Values("Vary"), ","), "Origin") {
		t.Fatalf("cross-site GET: %d ACAO %q Vary %q", r.code, r.header.Get("Access-Control-Allow-Origin"), r.header.Values("Vary"))
	}
	// Same-origin requeue works.
	if r := request(t, http.MethodPost, s.URL+"/v1/poison/"+id+"/requeue", "", "", "Origin", s.URL, "Sec-Fetch-Site", "same-origin"); r.code != http.StatusAccepted {
		t.Fatalf("same-origin requeue: %d %s", r.code, r.body)
	}
	if _, err := s.Client.GetPoison(t.Context(), id); !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("poison entry after requeue: %v", err)
	}
}

// TestCORSAllowList: origins in Config.CORSOrigins get proper preflight
// answers and may issue from a browser; others get no CORS headers and a 403
// preflight. Credentials are never allowed.
func TestCORSAllowList(t *testing.T) {
	t.Parallel()
	const app = "https://app.example"
	s := apitest.Start(t, apitest.Options{CORSOrigins: []string{"HTTPS://App.Example"}})
	pre := request(t, http.MethodOptions, s.URL+"/v1/commands", "", "",
		"Origin", app, "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type")
	if pre.code != http.StatusNoContent {
		t.Fatalf("preflight from %s: %d %s", app, pre.code, pre.body)
	}
	want := map[string]string{
		"Access-Control-Allow-Origin":  app,
		"Access-Control-Allow-Methods": "GET, POST, DELETE",
		"Access-Control-Allow-Headers": "Authorization, Content-Type, If-None-Match, Prefer, Last-Event-ID",
		"Access-Control-Max-Age":       "600",
	}
	for k, v := range want {
		if got := pre.header.Get(k); got != v {
			t.Errorf("preflight %s = %q, want %q", k, got, v)
		}
	}
	vary := strings.Join(pre.header.Values("Vary"), ",")
	for _, v := range []string{"Origin", "Access-Control-Request-Method", "Access-Control-Request-Headers"} {
		if !strings.Contains(vary, v) {
			t.Errorf("preflight Vary %q lacks %s", vary, v)
		}
	}
	if pre.header.Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("preflight allows credentials")
	}

	r := request(t, http.MethodPost, s.URL+"/v1/commands", "application/json", `{"type":"demo.echo"}`, "Origin", app, "Sec-Fetch-Site", "cross-site")
	decode[client.IssueResponse](t, r, http.StatusAccepted)
	if r.header.Get("Access-Control-Allow-Origin") != app || !strings.Contains(r.header.Get("Access-Control-Expose-Headers"), "Location") || !strings.Contains(r.header.Get("Access-Control-Expose-Headers"), "ETag") ||
		r.header.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("allowed origin's POST: headers %v", r.header)
	}

	// Another origin: preflight refused, nothing allowed.
	other := request(t, http.MethodOptions, s.URL+"/v1/commands", "", "", "Origin", "https://evil.example", "Access-Control-Request-Method", "POST")
	problem(t, other, http.StatusForbidden, client.ProblemCrossSite)
	if other.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("refused preflight has Access-Control-Allow-Origin %q", other.header.Get("Access-Control-Allow-Origin"))
	}
	problem(t, request(t, http.MethodPost, s.URL+"/v1/commands", "application/json", `{"type":"demo.echo"}`, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"), http.StatusForbidden, client.ProblemCrossSite)

	// Wildcards and non-origins are configuration errors.
	for _, bad := range []string{"*", "https://*.example", "https://app.example/path", "app.example", "ftp://app.example"} {
		cfg := api.Config{Client: s.Client, CORSOrigins: []string{bad}}
		if err := cfg.Validate(); !errors.Is(err, api.ErrInvalidConfig) {
			t.Errorf("CORSOrigins %q: Validate = %v, want ErrInvalidConfig", bad, err)
		}
	}
}
