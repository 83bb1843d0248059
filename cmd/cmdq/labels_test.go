package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestServeNoDemoBoundsTypeLabels: serve --no-demo accepts any type name;
// 200 distinct names must not make 200 cmdq_commands_issued_total series
// (only "other": no type is registered).
func TestServeNoDemoBoundsTypeLabels(t *testing.T) {
	t.Parallel()
	p := startServe(t, serveOpts{args: []string{"--no-demo"}})
	for i := range 200 {
		if r := do(t, http.MethodPost, p.URL+"/v1/commands", "", fmt.Sprintf(`{"type":"junk.t%d"}`, i)); r.code != http.StatusAccepted {
			t.Fatalf("issue %d: %d %s", i, r.code, r.body)
		}
	}
	body := do(t, http.MethodGet, p.URL+"/metrics", "", "").body
	var series []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "cmdq_commands_issued_total{") {
			series = append(series, l)
		}
	}
	if len(series) != 1 || series[0] != `cmdq_commands_issued_total{type="other"} 200` {
		t.Fatalf("cmdq_commands_issued_total series: %q, want only type=\"other\" counting 200", series)
	}
}
