package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// TestExpiredIs410: a command removed after its retention answers 410 Gone
// naming the retention (status and events); an unknown ID stays 404.
func TestExpiredIs410(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	// A command issued and completed 20 days ago, then swept (the clock of
	// the writer is injected: no sleeping).
	issued := time.Now().Add(-20 * 24 * time.Hour)
	id := testenv.CompletedAt(t, s.Store, s.Client.Prefix(), issued, "demo.Old")
	if got := send(t, http.MethodGet, s.URL+"/v1/commands/"+id, "", "", ""); got.code != http.StatusOK {
		t.Fatalf("before the sweep: %d %s", got.code, got.body)
	}
	if n := s.Log.Sweep(t); n != 1 {
		t.Fatalf("the sweep dropped %d day tables, want 1", n)
	}
	for _, path := range []string{"/v1/commands/%s", "/v1/commands/%s/events"} {
		p := problem(t, send(t, http.MethodGet, s.URL+fmt.Sprintf(path, id), "", "", ""), http.StatusGone, client.ProblemGone)
		day := issued.UTC().Format(time.DateOnly)
		if !strings.Contains(p.Detail, day) || !strings.Contains(p.Detail, "retention") || !strings.Contains(p.Detail, "7 days") || strings.Contains(p.Detail, "status:") {
			t.Fatalf("410 detail %q: want the issue day %s and the retention, without internal error texts", p.Detail, day)
		}
	}
	// A UUIDv4 nobody issued: 404, whose detail mentions retention too.
	p := problem(t, send(t, http.MethodGet, s.URL+"/v1/commands/"+uuid.NewString(), "", "", ""), http.StatusNotFound, client.ProblemNotFound)
	if !strings.Contains(p.Detail, "retention") {
		t.Fatalf("404 detail %q does not mention retention", p.Detail)
	}
}

// TestIssueWindowThroughAPI: an ID that carries a day outside the issue
// window is refused with 400 saying what to do; one inside it is accepted,
// and the same request again is an idempotent re-issue (200).
func TestIssueWindowThroughAPI(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	stale := testenv.DayID(time.Now().Add(-4 * 24 * time.Hour))
	p := problem(t, post(t, s.URL+"/v1/commands", `{"type":"A","id":"`+stale+`"}`), http.StatusBadRequest, client.ProblemInvalidRequest)
	if !strings.Contains(p.Detail, "leave the id out") || !strings.Contains(p.Detail, "2 days before today") || len(p.Errors) != 1 || p.Errors[0].Pointer != "#/id" {
		t.Fatalf("400 detail %q: want the window and what to do", p.Detail)
	}
	if n := s.QueueCount(t, ""); n != 0 {
		t.Fatalf("a refused issue enqueued %d messages", n)
	}
	// Two days old (the window's edge), and UUIDv4: accepted, and
	// recognised when sent again.
	for _, id := range []string{testenv.DayID(time.Now().Add(-2 * 24 * time.Hour)), uuid.NewString()} {
		body := `{"type":"A","params":{"n":1},"id":"` + id + `"}`
		if got := post(t, s.URL+"/v1/commands", body); got.code != http.StatusAccepted {
			t.Fatalf("issue %s: %d %s", id, got.code, got.body)
		}
		if got := post(t, s.URL+"/v1/commands", body); got.code != http.StatusOK {
			t.Fatalf("re-issue %s: %d %s", id, got.code, got.body)
		}
	}
}

// expiredCommand stores a command completed 20 days ago and sweeps it
// away; it returns its ID.
func expiredCommand(t *testing.T, s *apitest.Server) string {
	t.Helper()
	id := testenv.CompletedAt(t, s.Store, s.Client.Prefix(), time.Now().Add(-20*24*time.Hour), "demo.Old")
	if n := s.Log.Sweep(t); n == 0 {
		t.Fatal("the sweep dropped no day table")
	}
	return id
}
