package api_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// withHost sends method path to s with the Host header host and extra
// header pairs.
func withHost(t *testing.T, s *apitest.Server, method, path, host, body string, headers ...string) resp {
	t.Helper()
	u, err := url.Parse(s.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, u.String(), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
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

// TestHostCheckWithoutTokens: without tokens, a request naming a Host that
// is not loopback (DNS rebinding: the attacker's name resolving to this
// server, with a matching Origin) gets 421 on every route, the /ui pages
// included; loopback names and AllowedHosts are answered. With tokens the
// Host is not checked.
func TestHostCheckWithoutTokens(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{AllowedHosts: []string{"cmdq.internal", "10.1.2.3"}})
	id := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"demo.echo"}`), http.StatusAccepted).ID
	s.Poison(t, id, "test", "boom")
	port := s.URL[strings.LastIndex(s.URL, ":"):]
	const evil = "rebind.evil.example"

	// The report's attack: read the poison page (CSRF token included), then
	// post the discard form, with Host and Origin both the attacker's name.
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/ui/poison", ""},
		{http.MethodPost, "/ui/poison/" + id + "/discard", ""},
		{http.MethodGet, "/ui/", ""},
		{http.MethodGet, "/v1/poison", ""},
		{http.MethodGet, "/v1/commands/" + id, ""},
		{http.MethodPost, "/v1/commands", `{"type":"demo.echo"}`},
		{http.MethodDelete, "/v1/poison/" + id, ""},
		{http.MethodGet, "/healthz", ""},
		{http.MethodGet, "/metrics", ""},
	} {
		r := withHost(t, s, c.method, c.path, evil+port, c.body, "Origin", "http://"+evil+port)
		p := problem(t, r, http.StatusMisdirectedRequest, client.ProblemMisdirected)
		if !strings.Contains(p.Detail, "allowed hosts") {
			t.Errorf("%s %s: detail %q does not say what to do", c.method, c.path, p.Detail)
		}
	}
	if _, err := s.Client.GetPoison(t.Context(), id); err != nil {
		t.Fatalf("poison entry after the rebinding attempt: %v", err)
	}

	for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "LOCALHOST", "[::1]" + port, "app.localhost" + port,
		"127.8.9.10", "cmdq.internal" + port, "CMDQ.internal.", "10.1.2.3:80"} {
		if r := withHost(t, s, http.MethodGet, "/v1/commands/"+id, host, ""); r.code != http.StatusOK {
			t.Errorf("Host %q: %d %s, want 200", host, r.code, r.body)
		}
	}
	for _, host := range []string{"localhost.evil.example", "127.0.0.1.nip.io", "10.1.2.4", "cmdq.internal.evil.example"} {
		problem(t, withHost(t, s, http.MethodGet, "/v1/commands/"+id, host, ""), http.StatusMisdirectedRequest, client.ProblemMisdirected)
	}

	// "*" allows any host.
	anyHost := apitest.Start(t, apitest.Options{AllowedHosts: []string{"*"}})
	if r := withHost(t, anyHost, http.MethodGet, "/healthz", evil, ""); r.code != http.StatusOK {
		t.Errorf("AllowedHosts *: %d", r.code)
	}
	// With tokens, the token is the protection.
	auth := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	problem(t, withHost(t, auth, http.MethodGet, "/v1/poison", evil, ""), http.StatusUnauthorized, client.ProblemUnauthorized)

	for _, bad := range []string{"https://cmdq.internal", "cmdq.internal/x", "*.example", ""} {
		cfg := api.Config{Client: s.Client, AllowedHosts: []string{bad}}
		if err := cfg.Validate(); !errors.Is(err, api.ErrInvalidConfig) {
			t.Errorf("AllowedHosts %q: Validate = %v, want ErrInvalidConfig", bad, err)
		}
	}
}
