package api_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/openapitest"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// TestStorageFullAnswers507 serves an embedded store whose free-space
// probe the test sets (only a local disk fills up: this test has no
// Azure variant). Below the reserve every write route answers 507
// problem+json with Retry-After, naming the data directory and its free
// space, /readyz answers 503 saying why, reads answer as usual, and the
// Go client's error matches cmdq.ErrStorageFull. Once space returns,
// POST /v1/commands answers 202 again without a restart.
func TestStorageFullAnswers507(t *testing.T) {
	t.Parallel()
	var free atomic.Uint64
	free.Store(100 << 30)
	dir := filepath.Join(t.TempDir(), "cmdq-data")
	st, err := embedded.Open(dir, &embedded.Options{FreeSpace: func(string) (uint64, error) { return free.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	s := apitest.Start(t, apitest.Options{Store: st})
	got := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"SendEmail"}`), http.StatusAccepted)

	free.Store(embedded.DefaultReserve - 1)
	var r resp
	waitFor(t, time.Minute, "POST /v1/commands answers 507", func() bool {
		r = post(t, s.URL+"/v1/commands", `{"type":"SendEmail"}`)
		return r.code != http.StatusAccepted
	})
	p := problem(t, r, http.StatusInsufficientStorage, client.ProblemStorageFull)
	if !strings.Contains(p.Detail, dir) || !strings.Contains(p.Detail, "255.9 MiB free") || r.header.Get("Retry-After") == "" {
		t.Errorf("507 detail %q, Retry-After %q: want the directory, its free space and a Retry-After", p.Detail, r.header.Get("Retry-After"))
	}
	writes := []struct{ method, path string }{
		{http.MethodPost, "/v1/commands/" + got.ID + "/cancel"},
		{http.MethodPost, "/v1/commands/" + got.ID + "/run-now"},
		{http.MethodPost, "/v1/queues/commands/pause"},
	}
	for _, w := range writes {
		r := send(t, w.method, s.URL+w.path, "", "", "")
		if r.code != http.StatusInsufficientStorage && !(w.path == writes[1].path && r.code == http.StatusConflict) {
			t.Errorf("%s %s: %d %s, want 507", w.method, w.path, r.code, r.body)
		} else if r.code == http.StatusInsufficientStorage {
			problem(t, r, http.StatusInsufficientStorage, client.ProblemStorageFull)
		}
	}
	rz := send(t, http.MethodGet, s.URL+"/readyz", "", "", "")
	if p := problem(t, rz, http.StatusServiceUnavailable, client.ProblemUnavailable); !strings.Contains(p.Detail, "full") {
		t.Errorf("/readyz detail %q does not say the disk is full", p.Detail)
	}
	if r := send(t, http.MethodGet, s.URL+"/v1/commands/"+got.ID, "", "", ""); r.code != http.StatusOK {
		t.Errorf("GET status while full: %d %s", r.code, r.body)
	}
	rc, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = rc.Issue(ctx, client.IssueRequest{Type: "SendEmail"})
	var ce *client.Error
	if !errors.Is(err, cmdq.ErrStorageFull) || !errors.As(err, &ce) || ce.RetryAfter <= 0 {
		t.Errorf("client Issue while full: %v; want an *Error matching cmdq.ErrStorageFull with RetryAfter", err)
	}

	free.Store(100 << 30)
	waitFor(t, time.Minute, "POST /v1/commands answers 202 again", func() bool {
		return post(t, s.URL+"/v1/commands", `{"type":"SendEmail"}`).code == http.StatusAccepted
	})
	if r := send(t, http.MethodGet, s.URL+"/readyz", "", "", ""); r.code != http.StatusOK {
		t.Errorf("/readyz after space returned: %d %s", r.code, r.body)
	}
}

// exerciseStorageFull checks against the description the 507 of every
// write operation that documents one (TestOpenAPIMatchesServer), on a
// server whose embedded store's disk is full (a faked free-space probe).
func exerciseStorageFull(t *testing.T, spec *openapitest.Spec) {
	t.Helper()
	var free atomic.Uint64
	free.Store(100 << 30)
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), &embedded.Options{FreeSpace: func(string) (uint64, error) { return free.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	s := apitest.Start(t, apitest.Options{Store: st, Idle: true})
	pending := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"demo.echo"}`), http.StatusAccepted).ID
	later := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"demo.echo","delay":"1h"}`), http.StatusAccepted).ID
	poisoned := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"demo.echo"}`), http.StatusAccepted).ID
	s.Poison(t, poisoned, "test", "boom")
	free.Store(embedded.DefaultReserve / 2)
	waitFor(t, time.Minute, "the store refuses writes", func() bool { return st.Space().Free < st.Space().Reserve })
	sc := specClient{t, spec, s.URL}
	paths := map[string]string{
		"POST /v1/commands":              "/v1/commands",
		"POST /v1/commands/{id}/cancel":  "/v1/commands/" + pending + "/cancel",
		"POST /v1/commands/{id}/run-now": "/v1/commands/" + later + "/run-now",
		"POST /v1/poison/{id}/requeue":   "/v1/poison/" + poisoned + "/requeue",
		"DELETE /v1/poison/{id}":         "/v1/poison/" + poisoned,
		"POST /v1/queues/{name}/pause":   "/v1/queues/commands/pause",
		"POST /v1/queues/{name}/resume":  "/v1/queues/commands/resume",
	}
	for _, op := range spec.Operations() {
		if !spec.Documents(op, http.StatusInsufficientStorage) {
			continue
		}
		path, ok := paths[op]
		if !ok {
			t.Errorf("%s documents 507; exerciseStorageFull does not know a request for it", op)
			continue
		}
		method, _, _ := strings.Cut(op, " ")
		ct, body := "", ""
		if path == "/v1/commands" {
			ct, body = "application/json", `{"type":"demo.echo"}`
		}
		sc.expect(http.StatusInsufficientStorage, method, path, ct, body)
	}
}
