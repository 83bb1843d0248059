package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/openapitest"
)

// faultyAzurite puts an in-process toxiproxy in front of Azurite's queue and
// table endpoints and returns a connection string through it, and a function
// that black-holes both (every byte dropped, connections kept open: storage
// that accepts connections but never answers) until the returned restore is
// called.
func faultyAzurite(t *testing.T) (conn string, blackHole func() (restore func())) {
	t.Helper()
	direct := azurite.ConnectionString(t)
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	var proxies []*toxiproxy.Proxy
	var parts []string
	for _, kv := range strings.Split(direct, ";") {
		k, v, _ := strings.Cut(kv, "=")
		if k == "QueueEndpoint" || k == "TableEndpoint" {
			u, err := url.Parse(v)
			if err != nil {
				t.Fatalf("%s %q: %v", k, v, err)
			}
			p := toxiproxy.NewProxy(srv, k, "127.0.0.1:0", u.Host)
			if err := p.Start(); err != nil {
				t.Fatalf("toxiproxy for %s: %v", k, err)
			}
			t.Cleanup(p.Stop)
			proxies = append(proxies, p)
			u.Host = p.Listen
			v = u.String()
		}
		parts = append(parts, k+"="+v)
	}
	if len(proxies) != 2 {
		t.Fatalf("connection string %q lacks QueueEndpoint or TableEndpoint", direct)
	}
	blackHole = func() func() {
		for _, p := range proxies {
			for _, dir := range []string{"upstream", "downstream"} {
				js := fmt.Sprintf(`{"name":"blackhole_%s","type":"timeout","stream":%q,"attributes":{"timeout":0}}`, dir, dir)
				if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
					t.Fatalf("add toxic: %v", err)
				}
			}
		}
		return func() {
			for _, p := range proxies {
				for _, dir := range []string{"upstream", "downstream"} {
					if err := p.Toxics.RemoveToxic(context.Background(), "blackhole_"+dir); err != nil {
						t.Errorf("remove toxic: %v", err)
					}
				}
			}
		}
	}
	return strings.Join(parts, ";"), blackHole
}

// TestServeAnswers503WhenStorageHangs runs `cmdq serve --store azure` through
// a toxiproxy that black-holes Azurite (connections accepted, nothing
// answered). Every API call that needs storage answers 503 problem+json with
// Retry-After (as api/openapi.json documents it) within the request
// deadline plus a little, instead of hanging
// for minutes past the server's write timeout (a dropped connection). When
// storage answers again, so does the API.
func TestServeAnswers503WhenStorageHangs(t *testing.T) {
	conn, blackHole := faultyAzurite(t)
	const deadline = 3 * time.Second
	p := startServe(t, serveOpts{
		args: []string{"--store", "azure", "--prefix", randomPrefix(), "--request-timeout", deadline.String()},
		env:  []string{"CMDQ_AZURE_CONNECTION_STRING=" + conn},
	})
	id := newUUID()
	body := `{"id":"` + id + `","type":"demo.echo"}`
	if r := do(t, http.MethodPost, p.URL+"/v1/commands", "", body); r.code != http.StatusAccepted {
		t.Fatalf("issue before the outage: %d %s", r.code, r.body)
	}

	spec, err := openapitest.Load(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	restore := blackHole()
	// Without the deadline the first answer came after about 4 minutes (4
	// tries of 60 s), after the 60 s write timeout: the client got nothing.
	hc := &http.Client{Timeout: 45 * time.Second}
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/commands", `{"type":"demo.echo"}`},
		{http.MethodGet, "/v1/commands/" + id, ""},
		{http.MethodGet, "/v1/commands/" + id + "/events", ""},
		{http.MethodGet, "/v1/poison", ""},
		{http.MethodGet, "/v1/poison/" + id, ""},
		{http.MethodPost, "/v1/poison/" + id + "/requeue", ""},
		{http.MethodDelete, "/v1/poison/" + id, ""},
	} {
		var rd io.Reader
		if c.body != "" {
			rd = strings.NewReader(c.body)
		}
		req, err := http.NewRequest(c.method, p.URL+c.path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		start := time.Now()
		resp, err := hc.Do(req)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s %s during the outage: no answer after %s: %v", c.method, c.path, took.Round(time.Millisecond), err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s %s during the outage: %d %s %s, want 503 problem+json", c.method, c.path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		if ra := resp.Header.Get("Retry-After"); ra == "" {
			t.Errorf("%s %s: 503 without Retry-After", c.method, c.path)
		}
		// The answer is the one the OpenAPI description documents.
		if err := spec.Check(c.method, c.path, resp.StatusCode, resp.Header, b); err != nil {
			t.Error(err)
		}
		var prob struct {
			Type, Detail string
		}
		if err := json.Unmarshal(b, &prob); err != nil || !strings.HasSuffix(prob.Type, "#unavailable") || !strings.Contains(prob.Detail, "retry") {
			t.Errorf("%s %s: problem %s (%v), want type …#unavailable and a detail that says to retry", c.method, c.path, b, err)
		}
		// The deadline plus a little: generous for a loaded machine, far
		// below the minutes it took before.
		if took > deadline+5*time.Second {
			t.Errorf("%s %s answered after %s; the request deadline is %s", c.method, c.path, took.Round(time.Millisecond), deadline)
		}
		t.Logf("%s %s: 503 after %s", c.method, c.path, took.Round(time.Millisecond))
	}

	restore()
	waitFor(t, 30*time.Second, "the API answers again after the outage", func() bool {
		req, _ := http.NewRequest(http.MethodGet, p.URL+"/v1/commands/"+id, nil)
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
