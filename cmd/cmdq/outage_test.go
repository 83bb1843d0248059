package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
	"github.com/cmdq-dev/cmdq/internal/openapitest"
)

// TestServeAnswers503WhenStorageHangs runs `cmdq serve --store azure` through
// a fault proxy (faultproxy.Net) that black-holes Azurite (connections
// accepted, nothing answered). Every API call that needs storage answers 503 problem+json with
// Retry-After (as api/openapi.json documents it) within the request
// deadline plus a little, instead of hanging
// for minutes past the server's write timeout (a dropped connection). When
// storage answers again, so does the API.
func TestServeAnswers503WhenStorageHangs(t *testing.T) {
	t.Parallel()
	nw := faultproxy.NewNet(t, azurite.ConnectionString(t))
	const deadline = 3 * time.Second
	p := startServe(t, serveOpts{
		args: []string{"--store", "azure", "--prefix", randomPrefix(), "--request-timeout", deadline.String()},
		env:  []string{"CMDQ_AZURE_CONNECTION_STRING=" + nw.ConnectionString},
	})
	// Load before the issue: nothing may stand between the issue and the
	// black hole, or demo.echo completes first and its status is then
	// served from the final-status cache (200, not 503). Load compiles
	// every schema (some 30 ms); between the two it failed 3 runs of 3.
	spec, err := openapitest.Load(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	id := newUUID()
	body := `{"id":"` + id + `","type":"demo.echo"}`
	if r := do(t, http.MethodPost, p.URL+"/v1/commands", "", body); r.code != http.StatusAccepted {
		t.Fatalf("issue before the outage: %d %s", r.code, r.body)
	}

	nw.BlackHole(t)
	// Without the deadline the first answer came after about 4 minutes (4
	// tries of 60 s), after the 60 s write timeout: the client got nothing.
	hc := &http.Client{Timeout: 45 * time.Second}
	routes := []struct{ method, path, body string }{
		{http.MethodPost, "/v1/commands", `{"type":"demo.echo"}`},
		{http.MethodGet, "/v1/commands/" + id, ""},
		{http.MethodGet, "/v1/commands/" + id + "/events", ""},
		{http.MethodGet, "/v1/poison", ""},
		{http.MethodGet, "/v1/poison/" + id, ""},
		{http.MethodPost, "/v1/poison/" + id + "/requeue", ""},
		{http.MethodDelete, "/v1/poison/" + id, ""},
	}
	// Every route is asked at once, each on its own connection: each
	// waits out its own deadline (one after another they took 7 × 3 s).
	var wg sync.WaitGroup
	for _, c := range routes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rd io.Reader
			if c.body != "" {
				rd = strings.NewReader(c.body)
			}
			req, err := http.NewRequest(c.method, p.URL+c.path, rd)
			if err != nil {
				t.Error(err)
				return
			}
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			start := time.Now()
			resp, err := hc.Do(req)
			took := time.Since(start)
			if err != nil {
				t.Errorf("%s %s during the outage: no answer after %s: %v", c.method, c.path, took.Round(time.Millisecond), err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s %s during the outage: %d %s %s, want 503 problem+json", c.method, c.path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
				return
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
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	nw.Restore(t)
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
