package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
)

// TestReadyzFollowsStorage: a real `cmdq serve --store azure`, idle (its
// pollers back off to a minute), reaches Azurite through an in-process
// fault proxy (faultproxy.Net). When storage refuses connections, and when it accepts them and
// never answers (a black hole), /readyz turns 503 within seconds; when
// storage is back it turns 200 again. The delays are logged; the targets
// (503 within 10 s, 200 within 5 s) are argued in docs/operations.md.
func TestReadyzFollowsStorage(t *testing.T) {
	t.Parallel()
	nw := faultproxy.NewNet(t, azurite.ConnectionString(t))
	p := startServe(t, serveOpts{
		args: []string{"--store", "azure", "--prefix", randomPrefix()},
		env:  []string{"CMDQ_AZURE_CONNECTION_STRING=" + nw.ConnectionString},
	})
	client := &http.Client{Timeout: 20 * time.Second}
	readyz := func() int {
		resp, err := client.Get(p.URL + "/readyz")
		if err != nil {
			t.Fatalf("GET /readyz: %v (it must answer, storage or not)", err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name  string
		fault func(testing.TB)
	}{{"refused", nw.Refuse}, {"black hole", nw.BlackHole}} {
		if code := readyz(); code != http.StatusOK {
			t.Fatalf("%s: /readyz %d before the fault", c.name, code)
		}
		began := time.Now()
		c.fault(t)
		waitFor(t, 20*time.Second, c.name+": /readyz answers 503", func() bool { return readyz() == http.StatusServiceUnavailable })
		down := time.Since(began)
		nw.Restore(t)
		began = time.Now()
		waitFor(t, 15*time.Second, c.name+": /readyz answers 200 again", func() bool { return readyz() == http.StatusOK })
		t.Logf("%s: /readyz 503 after %s, 200 again %s after storage came back", c.name, down.Round(10*time.Millisecond), time.Since(began).Round(10*time.Millisecond))
	}
}
