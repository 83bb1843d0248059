package api_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// TestErrorsQuoteShortPrefix: an error answer quotes at most a short prefix
// of the rejected input, so its size does not grow with the request (a
// 1 MB body got a 1.32 MB answer, the input echoed twice).
func TestErrorsQuoteShortPrefix(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	withReg := apitest.Start(t, apitest.Options{Setup: func(c *cmdq.Client) error { return cmdq.Declare[sendEmail](c) }})
	big := strings.Repeat("x", 900_000)
	digits := strings.Repeat("9", 900_000)
	many := make([]string, 5000)
	for i := range many {
		many[i] = fmt.Sprintf("p%05d%s=1", i, strings.Repeat("q", 100))
	}
	check := func(what string, r resp) {
		t.Helper()
		t.Logf("%s: %d, %d bytes", what, r.code, len(r.body))
		if r.code < 400 {
			t.Errorf("%s: %d, want an error", what, r.code)
		}
		if len(r.body) > 8<<10 || strings.Contains(string(r.body), strings.Repeat("x", 200)) || strings.Contains(string(r.body), strings.Repeat("9", 200)) {
			t.Errorf("%s: %d-byte answer quotes the input at length: %.300s…", what, len(r.body), r.body)
		}
	}
	check("long type", post(t, s.URL+"/v1/commands", `{"type":"`+big+`"}`))
	check("params that do not decode", post(t, withReg.URL+"/v1/commands", `{"type":"SendEmail","params":{"`+big+`":1}}`))
	check("params of the wrong type", post(t, withReg.URL+"/v1/commands", `{"type":"SendEmail","params":{"to":`+digits+`}}`))
	check("long type, bad id", post(t, s.URL+"/v1/commands", `{"type":"`+big[:400_000]+`","id":"`+big[:400_000]+`"}`))
	check("long unknown field", post(t, s.URL+"/v1/commands", `{"`+big+`":1}`))
	check("long number as type", post(t, s.URL+"/v1/commands", `{"type":`+digits+`}`))
	check("long duplicate key", post(t, s.URL+"/v1/commands", `{"type":"A","params":{"`+big[:400_000]+`":1,"`+big[:400_000]+`":2}}`))
	check("long content type", send(t, http.MethodPost, s.URL+"/v1/commands", "", "text/"+big[:60000], `{"type":"A"}`))
	long := big[:60000]
	check("long path id", send(t, http.MethodGet, s.URL+"/v1/commands/"+long, "", "", ""))
	check("long route", send(t, http.MethodGet, s.URL+"/"+long, "", "", ""))
	check("long poison type", send(t, http.MethodGet, s.URL+"/v1/poison?type="+long, "", "", ""))
	check("many unknown parameters", send(t, http.MethodGet, s.URL+"/v1/poison?"+strings.Join(many, "&"), "", "", ""))
	check("long unknown parameter", send(t, http.MethodGet, s.URL+"/v1/poison?"+long+"=1", "", "", ""))
	check("dashboard: long command id", send(t, http.MethodGet, s.URL+"/ui/commands/"+long, "", "", ""))
	check("dashboard: long search", send(t, http.MethodGet, s.URL+"/ui/search?id="+long, "", "", ""))
	check("dashboard: long limit", send(t, http.MethodGet, s.URL+"/ui/poison?limit="+long, "", "", ""))
	check("dashboard: long page", send(t, http.MethodGet, s.URL+"/ui/"+long, "", "", ""))
	r := send(t, http.MethodGet, s.URL+"/ui/poison?flash=discarded&cmd="+url.QueryEscape(long), "", "", "")
	if strings.Contains(string(r.body), strings.Repeat("x", 200)) {
		t.Errorf("dashboard flash quotes the cmd parameter at length")
	}
}
