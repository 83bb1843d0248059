package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/cmdqtype"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// TestParamsTooLargeDetail: the 413 for oversized params is one clear
// sentence: the size, the limit, what to do (it read "…pass a…; store large
// data elsewhere and pass a reference").
func TestParamsTooLargeDetail(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	params := `{"blob":"` + strings.Repeat("x", cmdqtype.MaxParamsBytes) + `"}`
	p := problem(t, post(t, s.URL+"/v1/commands", `{"type":"billing.ImportLedgerFromArchive","params":`+params+`}`), http.StatusRequestEntityTooLarge, client.ProblemTooLarge)
	want := fmt.Sprintf("The params of billing.ImportLedgerFromArchive are %d bytes of JSON, over the %d-byte limit: store large data elsewhere (a blob, a file) and pass a reference to it in the params.", len(params), cmdqtype.MaxParamsBytes)
	if p.Detail != want {
		t.Fatalf("detail %q\nwant   %q", p.Detail, want)
	}
	if strings.Count(p.Detail, "reference") != 1 || strings.Contains(p.Detail, "…") {
		t.Fatalf("detail %q repeats itself or is cut", p.Detail)
	}
}
