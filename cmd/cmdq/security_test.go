package main

import (
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/apitest"
)

const reliabilityPath = "../../docs/reliability.md"

// secColumn is one column of the security matrix: which server, and what
// the request carries.
type secColumn struct {
	open      bool   // the server without tokens
	token     string // bearer token ("": none)
	host      string // "", "rebind" or a Host header
	origin    string // Origin header ("": none)
	fetchSite string // Sec-Fetch-Site header ("": none)
}

const (
	appOrigin  = "https://app.example"
	evilOrigin = "https://evil.example"
)

// secColumns are the matrix's columns as docs/reliability.md names them.
var secColumns = map[string]secColumn{
	"none":               {},
	"issuer":             {token: apitest.IssuerToken},
	"reader":             {token: apitest.ReaderToken},
	"operator":           {token: apitest.OperatorToken},
	"cross-site":         {token: apitest.AllToken, origin: evilOrigin, fetchSite: "cross-site"},
	"CORS origin":        {token: apitest.AllToken, origin: appOrigin, fetchSite: "cross-site"},
	"open: loopback":     {open: true},
	"open: other Host":   {open: true, host: "rebind"},
	"open: allowed Host": {open: true, host: "cmdq.internal"},
	"open: cross-site":   {open: true, origin: evilOrigin, fetchSite: "cross-site"},
}

// secRow is one row: a route and the status each column expects.
type secRow struct {
	line         int
	method, path string
	want         map[string]int
}

// parseSecurityMatrix reads the table of docs/reliability.md's "Security
// checks" section.
func parseSecurityMatrix(t *testing.T) []secRow {
	t.Helper()
	doc, err := os.ReadFile(reliabilityPath)
	if err != nil {
		t.Fatal(err)
	}
	text, first := section(t, string(doc), "## Security checks")
	var header []string
	var rows []secRow
	route := regexp.MustCompile("^`([A-Z]+) (/[^`]*)`$")
	for i, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		switch {
		case cells[0] == "Route":
			header = cells
			for _, h := range header[2:] {
				if _, ok := secColumns[h]; !ok {
					t.Fatalf("reliability.md:%d: unknown column %q", first+i, h)
				}
			}
			continue
		case strings.HasPrefix(cells[0], "---"):
			continue
		}
		m := route.FindStringSubmatch(cells[0])
		if m == nil || header == nil || len(cells) != len(header) {
			t.Fatalf("reliability.md:%d: not a matrix row: %q", first+i, l)
		}
		r := secRow{line: first + i, method: m[1], path: m[2], want: map[string]int{}}
		for j, c := range cells[2:] {
			code, err := strconv.Atoi(c)
			if err != nil {
				t.Fatalf("reliability.md:%d: column %q: %q is not a status code", first+i, header[j+2], c)
			}
			r.want[header[j+2]] = code
		}
		rows = append(rows, r)
	}
	if len(rows) < 15 || len(header) != 2+len(secColumns) {
		t.Fatalf("the security matrix has %d rows and columns %q; want every route and %d columns", len(rows), header, len(secColumns))
	}
	return rows
}

// secServer is one server of the matrix with the IDs its rows use.
type secServer struct {
	p    *serveProc
	id   string // a completed command
	csrf string // the dashboard's CSRF token without a session (open server)
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// TestSecurityMatrix runs docs/reliability.md's security matrix (route ×
// role × origin × Host) against two real `cmdq serve` processes, one with
// tokens and one without.
func TestSecurityMatrix(t *testing.T) {
	t.Parallel()
	rows := parseSecurityMatrix(t)
	withTokens := &secServer{p: startServe(t, serveOpts{env: []string{"CMDQ_TOKENS=" + testTokens}, args: []string{"--cors-origins", appOrigin}})}
	open := &secServer{p: startServe(t, serveOpts{args: []string{"--allowed-hosts", "cmdq.internal", "--cors-origins", appOrigin, "--poison-ceiling", "1"}})}
	for _, s := range []*secServer{withTokens, open} {
		s.id = newUUID()
		if r := do(t, http.MethodPost, s.p.URL+"/v1/commands", apitest.AllToken, `{"id":"`+s.id+`","type":"demo.echo"}`); r.code != http.StatusAccepted {
			t.Fatalf("issue: %d %s", r.code, r.body)
		}
		waitState(t, s.p.URL, apitest.AllToken, s.id, "completed", 20*time.Second)
	}
	// A poison entry gives the open server's poison page a form to take its
	// CSRF token from.
	failing := newUUID()
	do(t, http.MethodPost, open.p.URL+"/v1/commands", "", `{"id":"`+failing+`","type":"demo.fail","params":{"times":9}}`)
	waitState(t, open.p.URL, "", failing, "poisoned", 30*time.Second)
	m := csrfInput.FindStringSubmatch(do(t, http.MethodGet, open.p.URL+"/ui/poison", "", "").body)
	if m == nil {
		t.Fatal("the open server's poison page has no CSRF token")
	}
	open.csrf = m[1]

	cells := 0
	for _, row := range rows {
		for name, want := range row.want {
			col := secColumns[name]
			srv := withTokens
			if col.open {
				srv = open
			}
			got, hdr := secRequest(t, srv, row, col)
			cells++
			if got != want {
				t.Errorf("reliability.md:%d: %s %s, column %q: %d, want %d", row.line, row.method, row.path, name, got, want)
			}
			apiPath := strings.HasPrefix(row.path, "/v1/") || row.path == "/healthz" || row.path == "/readyz"
			acao := hdr.Get("Access-Control-Allow-Origin")
			switch {
			case col.origin == appOrigin && apiPath && acao != appOrigin:
				t.Errorf("reliability.md:%d: %s %s from the allowed origin: Access-Control-Allow-Origin %q", row.line, row.method, row.path, acao)
			case (col.origin != appOrigin || !apiPath) && acao != "":
				t.Errorf("reliability.md:%d: %s %s, column %q: Access-Control-Allow-Origin %q", row.line, row.method, row.path, name, acao)
			}
			if hdr.Get("Access-Control-Allow-Credentials") != "" {
				t.Errorf("reliability.md:%d: %s %s: credentials allowed", row.line, row.method, row.path)
			}
		}
	}
	t.Logf("%d routes × %d columns = %d requests checked", len(rows), len(secColumns), cells)
}

// secRequest sends one matrix cell's request and returns the status and
// headers (redirects are not followed).
func secRequest(t *testing.T, s *secServer, row secRow, col secColumn) (int, http.Header) {
	t.Helper()
	path := strings.NewReplacer("{id}", s.id, "{new}", newUUID()).Replace(row.path)
	var body string
	var ct string
	switch {
	case row.method == http.MethodPost && strings.HasPrefix(path, "/v1/commands"):
		body, ct = `{"type":"demo.echo"}`, "application/json"
	case row.method == http.MethodPost && strings.HasPrefix(path, "/ui/"):
		body, ct = url.Values{"csrf": {s.csrf}}.Encode(), "application/x-www-form-urlencoded"
	}
	req, err := http.NewRequest(row.method, s.p.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if col.token != "" {
		req.Header.Set("Authorization", "Bearer "+col.token)
	}
	u, _ := url.Parse(s.p.URL)
	switch col.host {
	case "":
	case "rebind":
		req.Host = "rebind.evil.example:" + u.Port()
		req.Header.Set("Origin", "http://"+req.Host)
	default:
		req.Host = col.host
	}
	if col.origin != "" {
		req.Header.Set("Origin", col.origin)
	}
	if col.fetchSite != "" {
		req.Header.Set("Sec-Fetch-Site", col.fetchSite)
	}
	if row.method == http.MethodOptions && req.Header.Get("Origin") != "" {
		req.Header.Set("Access-Control-Request-Method", http.MethodPost)
		req.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", row.method, path, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header
}
