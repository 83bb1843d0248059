package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
)

// exerciseTrigger drives POST /v1/periodic/{name}/trigger through c (for
// TestOpenAPIMatchesServer): srv's process registers demo.hourly. A
// trigger is 202 with the tick, whose command carries the tick's
// correlation ID; the same trigger time again 200 with the same tick and
// duplicate; an unknown schedule 404; a row stored without parameters
// (as older versions stored it) 409 naming its process; a bad name or a
// time outside the last hour 400; a body that is not JSON 415.
func exerciseTrigger(t *testing.T, c specClient, srv *apitest.Server) {
	t.Helper()
	op := []string{"Authorization", "Bearer " + apitest.OperatorToken}
	const jsonCT = "application/json"
	r := c.expect(http.StatusAccepted, http.MethodPost, "/v1/periodic/demo.hourly/trigger", "", "", op...)
	var tick cmdq.TickInfo
	if err := json.Unmarshal(r.body, &tick); err != nil || tick.ID == "" || tick.Duplicate || r.header.Get("Location") != "/v1/commands/"+tick.ID {
		t.Fatalf("trigger: %s (Location %q) %v", r.body, r.header.Get("Location"), err)
	}
	st, err := srv.Client.Get(context.Background(), tick.ID)
	if err != nil || st.CorrelationID != "periodic:demo.hourly@"+tick.At.UTC().Format(time.RFC3339Nano) {
		t.Fatalf("the triggered command: %+v %v", st, err)
	}
	at, _ := json.Marshal(map[string]time.Time{"at": tick.At})
	r = c.expect(http.StatusOK, http.MethodPost, "/v1/periodic/demo.hourly/trigger", jsonCT, string(at), op...)
	var again cmdq.TickInfo
	if err := json.Unmarshal(r.body, &again); err != nil || again.ID != tick.ID || !again.Duplicate {
		t.Fatalf("the same trigger again: %s, want duplicate of %s", r.body, tick.ID)
	}
	c.expect(http.StatusNotFound, http.MethodPost, "/v1/periodic/no.such/trigger", "", "", op...)
	c.expect(http.StatusBadRequest, http.MethodPost, "/v1/periodic/9bad/trigger", "", "", op...)
	c.expect(http.StatusBadRequest, http.MethodPost, "/v1/periodic/demo.hourly/trigger", jsonCT, `{"at":"2001-01-01T00:00:00Z"}`, op...)
	c.expect(http.StatusBadRequest, http.MethodPost, "/v1/periodic/demo.hourly/trigger", jsonCT, `{"when":"now"}`, op...)
	c.expect(http.StatusUnsupportedMediaType, http.MethodPost, "/v1/periodic/demo.hourly/trigger", "text/plain", "now", op...)
	tb, err := srv.Store.Table(context.Background(), srv.Client.Prefix()+"commands")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shared.New(tb, time.Now).StoreSchedule(context.Background(), shared.Schedule{Name: "legacy", Spec: "@daily", Type: "demo.echo", Queue: "commands"}, "old-proc-3"); err != nil {
		t.Fatal(err)
	}
	r = c.expect(http.StatusConflict, http.MethodPost, "/v1/periodic/legacy/trigger", "", "", op...)
	if !strings.Contains(string(r.body), "old-proc-3") {
		t.Fatalf("409 for a row without parameters: %s, want it to name old-proc-3", r.body)
	}
	// A reader may not trigger.
	c.expect(http.StatusForbidden, http.MethodPost, "/v1/periodic/demo.hourly/trigger", "", "", "Authorization", "Bearer "+apitest.ReaderToken)

	// GET /v1/periodic/{name}: the schedule with its latest ticks.
	rd := []string{"Authorization", "Bearer " + apitest.ReaderToken}
	r = c.expect(http.StatusOK, http.MethodGet, "/v1/periodic/demo.hourly?ticks=2", "", "", rd...)
	var info cmdq.PeriodicInfo
	if err := json.Unmarshal(r.body, &info); err != nil || info.Name != "demo.hourly" || info.Spec == "" || len(info.RecentTicks) > 2 || info.NextTick.IsZero() {
		t.Fatalf("GET /v1/periodic/demo.hourly?ticks=2: %s %v", r.body, err)
	}
	c.expect(http.StatusOK, http.MethodGet, "/v1/periodic/demo.hourly", "", "", rd...)
	c.expect(http.StatusNotFound, http.MethodGet, "/v1/periodic/no.such", "", "", rd...)
	c.expect(http.StatusBadRequest, http.MethodGet, "/v1/periodic/9bad", "", "", rd...)
	for _, q := range []string{"ticks=21", "ticks=-1", "ticks=x", "tick=2"} {
		c.expect(http.StatusBadRequest, http.MethodGet, "/v1/periodic/demo.hourly?"+q, "", "", rd...)
	}
}
