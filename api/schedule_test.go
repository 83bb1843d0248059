package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// TestIssueScheduleBadInput: each bad schedule is a 400 that names the
// field and says what to send, and stores nothing (the listing stays
// empty): runAt and delay together, a runAt that is not RFC 3339 or more
// than 2 years ahead, a delay that is not a duration, negative, or over 2
// years. A good one answers scheduled with runAt.
func TestIssueScheduleBadInput(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{})
	far := time.Now().Add(3 * 365 * 24 * time.Hour).UTC().Format(time.RFC3339)
	soon := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	cases := []struct {
		name, body, pointer, says string
	}{
		{"both", `{"type":"demo.echo","runAt":"` + soon + `","delay":"1h"}`, "#/delay", "one of them"},
		{"runAt not RFC 3339", `{"type":"demo.echo","runAt":"tomorrow 9am"}`, "#/runAt", "RFC 3339"},
		{"runAt a date only", `{"type":"demo.echo","runAt":"2026-05-01"}`, "#/runAt", "RFC 3339"},
		{"runAt 3 years ahead", `{"type":"demo.echo","runAt":"` + far + `"}`, "#/runAt", "2 years"},
		{"delay not a duration", `{"type":"demo.echo","delay":"90"}`, "#/delay", "90s"},
		{"delay negative", `{"type":"demo.echo","delay":"-5s"}`, "#/delay", "negative"},
		{"delay 3 years", `{"type":"demo.echo","delay":"26280h"}`, "#/delay", "2 years"},
		{"delay a number", `{"type":"demo.echo","delay":90}`, "#/delay", "string"},
	}
	for _, tc := range cases {
		r := post(t, srv.URL+"/v1/commands", tc.body)
		p := problem(t, r, http.StatusBadRequest, client.ProblemInvalidRequest)
		found := false
		for _, fe := range p.Errors {
			if fe.Pointer == tc.pointer {
				found = true
			}
		}
		text := strings.ToLower(p.Detail + fieldDetails(p))
		if !found || !strings.Contains(text, strings.ToLower(tc.says)) {
			t.Errorf("%s: %+v, want a field error at %s that says %q", tc.name, p, tc.pointer, tc.says)
		}
	}
	page, err := srv.Client.ListCommands(t.Context(), cmdq.CommandQuery{})
	if err != nil || len(page.Commands) != 0 {
		t.Fatalf("after the bad requests: %d commands stored (%v), want none", len(page.Commands), err)
	}
	r := post(t, srv.URL+"/v1/commands", `{"type":"demo.echo","delay":"90s"}`)
	var ir client.IssueResponse
	if r.code != http.StatusAccepted || json.Unmarshal(r.body, &ir) != nil || ir.Status != cmdq.StateScheduled {
		t.Fatalf("a good delay: %d %s", r.code, r.body)
	}
	if d := time.Until(ir.RunAt); d < 80*time.Second || d > 90*time.Second {
		t.Fatalf("runAt %s is in %s, want about 90s", ir.RunAt, d)
	}
}

func fieldDetails(p client.Problem) string {
	var b strings.Builder
	for _, fe := range p.Errors {
		b.WriteString(" " + fe.Detail)
	}
	return b.String()
}
