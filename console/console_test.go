package console_test

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/console"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// ---- a small browser: no redirects followed, one session cookie ----

type page struct {
	code   int
	header http.Header
	body   string
	doc    *html.Node
}

type browser struct {
	t       *testing.T
	base    string
	cookie  *http.Cookie // the session cookie, if logged in
	flash   *http.Cookie // the flash cookie, while one is set
	prefs   *http.Cookie // the preferences cookie, once set
	bearer  string
	headers map[string]string // extra request headers (Origin, Sec-Fetch-Site)
}

func newBrowser(t *testing.T, base string) *browser {
	return &browser{t: t, base: base, headers: map[string]string{}}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (b *browser) do(method, path string, form url.Values) page {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if b.cookie != nil {
		req.AddCookie(b.cookie)
	}
	if b.flash != nil {
		req.AddCookie(b.flash)
	}
	if b.prefs != nil {
		req.AddCookie(b.prefs)
	}
	if b.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+b.bearer)
	}
	for k, v := range b.headers {
		req.Header.Set(k, v)
	}
	r, err := noRedirect.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer r.Body.Close()
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	p := page{code: r.StatusCode, header: r.Header, body: string(raw)}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
		doc, err := html.Parse(strings.NewReader(p.body))
		if err != nil {
			b.t.Fatalf("%s %s: parse HTML: %v", method, path, err)
		}
		p.doc = doc
	}
	for _, c := range r.Cookies() {
		if c.Name == "cmdq_flash" {
			if c.MaxAge < 0 || c.Value == "" {
				b.flash = nil
			} else {
				b.flash = c
			}
		}
		if c.Name == "cmdq_prefs" {
			b.prefs = c
		}
		if c.Name == console.SessionCookieName {
			if c.MaxAge < 0 || c.Value == "" {
				b.cookie = nil
			} else {
				b.cookie = c
			}
		}
	}
	return p
}

func (b *browser) get(path string) page { b.t.Helper(); return b.do(http.MethodGet, path, nil) }

func (b *browser) post(path string, form url.Values) page {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	return b.do(http.MethodPost, path, form)
}

// want checks the status code and, for HTML pages, the security headers.
func (p page) want(t *testing.T, code int) page {
	t.Helper()
	if p.code != code {
		t.Fatalf("status %d, want %d; body:\n%s", p.code, code, p.body)
	}
	if p.doc != nil {
		h := p.header
		csp := h.Get("Content-Security-Policy")
		for _, d := range []string{"default-src 'none'", "form-action 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, d) {
				t.Fatalf("Content-Security-Policy %q lacks %q", csp, d)
			}
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "same-origin" {
			t.Fatalf("security headers missing: %v", h)
		}
	}
	return p
}

// location checks a redirect and returns its target.
func (p page) location(t *testing.T, code int) string {
	t.Helper()
	if p.code != code {
		t.Fatalf("status %d, want redirect %d; body:\n%s", p.code, code, p.body)
	}
	return p.header.Get("Location")
}

// ---- HTML helpers ----

func walk(n *html.Node, f func(*html.Node)) {
	f(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, f)
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasClass(n *html.Node, class string) bool {
	return slices.Contains(strings.Fields(attr(n, "class")), class)
}

// text returns n's visible text, each text node separated by a space.
func text(n *html.Node) string {
	var parts []string
	var rec func(*html.Node)
	rec = func(c *html.Node) {
		if c.Type == html.ElementNode && (c.Data == "style" || c.Data == "title") {
			return
		}
		if c.Type == html.TextNode {
			parts = append(parts, c.Data)
		}
		for k := c.FirstChild; k != nil; k = k.NextSibling {
			rec(k)
		}
	}
	rec(n)
	return strings.Join(strings.Fields(strings.Join(parts, " ")), " ")
}

func elements(n *html.Node, tag string, keep func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	walk(n, func(c *html.Node) {
		if c.Type == html.ElementNode && c.Data == tag && (keep == nil || keep(c)) {
			out = append(out, c)
		}
	})
	return out
}

func cells(row *html.Node) []string {
	var out []string
	for _, td := range elements(row, "td", nil) {
		out = append(out, text(td))
	}
	return out
}

// poisonRows returns the cells of the poison list's rows, in page order,
// without the selection box: command ID, type, attempts, reason, last
// error, poisoned, actions.
func poisonRows(t *testing.T, p page) [][]string {
	t.Helper()
	var out [][]string
	for _, tr := range elements(p.doc, "tr", func(n *html.Node) bool { return hasClass(n, "entry") }) {
		c := cells(tr)
		boxes := elements(tr, "input", func(n *html.Node) bool { return attr(n, "type") == "checkbox" && attr(n, "form") == "bulk" })
		if len(boxes) != 1 || attr(boxes[0], "name") != "id" || attr(boxes[0], "value") != strings.Fields(c[1] + " ")[0] {
			t.Fatalf("poison row %q has no selection box for its ID", c)
		}
		out = append(out, c[1:])
	}
	return out
}

// csrf returns the CSRF token of the first form that has one.
func csrf(t *testing.T, p page) string {
	t.Helper()
	for _, in := range elements(p.doc, "input", func(n *html.Node) bool { return attr(n, "name") == "csrf" }) {
		if v := attr(in, "value"); v != "" {
			return v
		}
	}
	t.Fatalf("no CSRF field on the page:\n%s", p.body)
	return ""
}

func nextLink(p page) string {
	for _, a := range elements(p.doc, "a", func(n *html.Node) bool { return attr(n, "rel") == "next" }) {
		return attr(a, "href")
	}
	return ""
}

func contains(t *testing.T, p page, want ...string) {
	t.Helper()
	got := text(p.doc)
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Fatalf("page text lacks %q:\n%s", w, got)
		}
	}
}

// ---- storage set-up through the real store ----

// issue issues a command of typ with params {"n":1}.
func issue(t *testing.T, srv *apitest.Server, typ string) string {
	t.Helper()
	return issueParams(t, srv, typ, `{"n":1}`)
}

// issueParams issues a command of typ with params.
func issueParams(t *testing.T, srv *apitest.Server, typ, params string) string {
	t.Helper()
	res, err := srv.Client.IssueRaw(context.Background(), cmdq.Raw{Type: typ, Params: []byte(params)})
	if err != nil {
		t.Fatalf("issue %s: %v", typ, err)
	}
	return res.ID
}

// poisonAt poisons id as a processor does, with a given PoisonedAt and events.
func poisonAt(t *testing.T, srv *apitest.Server, id string, at time.Time, lastError string, events ...cmdq.Event) {
	t.Helper()
	srv.Log.Poison(t, id, cmdq.PoisonEntry{DequeueCount: 6, Reason: "ceiling exceeded", LastError: lastError, PoisonedAt: at, Worker: "w1"}, events...)
}

// ---- tests ----

func TestDashboardOverview(t *testing.T) {
	t.Parallel()
	for _, healthy := range []bool{true, false} {
		state := map[bool]string{true: "working", false: "unhealthy"}[healthy]
		srv := apitest.Start(t, apitest.Options{Health: func() (string, bool, any) {
			return state, healthy, map[string]any{"inFlight": 2, "lastError": "table timeout"}
		}})
		b := newBrowser(t, srv.URL)
		if loc := b.get("/ui").location(t, http.StatusMovedPermanently); loc != "/ui/" {
			t.Fatalf("/ui redirects to %q, want /ui/", loc)
		}
		ids := []string{issue(t, srv, "Alpha"), issue(t, srv, "Alpha"), issue(t, srv, "Beta")}
		now := time.Now()
		poisonAt(t, srv, ids[0], now, "e1")
		poisonAt(t, srv, ids[1], now, "e2")
		poisonAt(t, srv, ids[2], now, "e3")

		p := b.get("/ui/").want(t, http.StatusOK)
		// The health detail is a readable panel, not raw JSON.
		contains(t, p, "Last fault table timeout", "Messages in flight 2", "3 poisoned commands")
		if strings.Contains(p.body, `"inFlight"`) {
			t.Fatal("the overview shows the health detail as raw JSON")
		}
		if healthy {
			contains(t, p, "State "+state+" healthy")
		} else {
			contains(t, p, "State "+state+" unhealthy — the service reports itself unhealthy")
		}
		var rows [][]string
		for _, tr := range elements(p.doc, "tr", nil) {
			if c := cells(tr); len(c) == 2 {
				rows = append(rows, c)
			}
		}
		// Queue depth: the three issued messages are still on the queue.
		want := [][]string{{"commands", "3"}, {"Alpha", "2"}, {"Beta", "1"}}
		if !slices.EqualFunc(rows, want, slices.Equal) {
			t.Fatalf("overview rows %v, want %v", rows, want)
		}
	}
}

func TestDashboardPoisonList(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{})
	b := newBrowser(t, srv.URL)
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	var alpha, beta []string // newest first
	for i := range 7 {
		typ := "Alpha"
		if i%3 == 2 {
			typ = "Beta"
		}
		id := issue(t, srv, typ)
		poisonAt(t, srv, id, base.Add(time.Duration(i)*time.Minute), "boom")
		if typ == "Alpha" {
			alpha = append([]string{id}, alpha...)
		} else {
			beta = append([]string{id}, beta...)
		}
	}

	// The whole list, three per page, newest first, following "next" links.
	var got []string
	path, pages := "/ui/poison?limit=3", 0
	for path != "" {
		p := b.get(path).want(t, http.StatusOK)
		pages++
		rows := poisonRows(t, p)
		if len(rows) == 0 || len(rows) > 3 {
			t.Fatalf("page %d has %d rows", pages, len(rows))
		}
		for _, r := range rows {
			got = append(got, r[0])
		}
		path = nextLink(p)
		if path != "" && !strings.HasPrefix(path, "/ui/poison?") {
			t.Fatalf("next link %q", path)
		}
	}
	if pages != 3 || len(got) != 7 {
		t.Fatalf("%d pages, %d rows; want 3 pages, 7 rows", pages, len(got))
	}
	all := map[string]time.Time{}
	for _, id := range got {
		e, err := srv.Client.GetPoison(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		all[id] = e.PoisonedAt
	}
	if !slices.IsSortedFunc(got, func(x, y string) int { return all[y].Compare(all[x]) }) {
		t.Fatalf("rows not newest first: %v", got)
	}

	// Filter by type; each row shows type, dequeue count, reason, error, time.
	p := b.get("/ui/poison?type=Beta").want(t, http.StatusOK)
	rows := poisonRows(t, p)
	if len(rows) != len(beta) {
		t.Fatalf("Beta filter: %d rows, want %d", len(rows), len(beta))
	}
	for i, r := range rows {
		if r[0] != beta[i] || r[1] != "Beta" || r[2] != "6" || r[3] != "ceiling exceeded" || r[4] != "boom" || r[5] != `{"n":1}` || !strings.HasSuffix(r[6], " min ago") {
			t.Fatalf("Beta row %d = %q, want id %s Beta 6 'ceiling exceeded' boom {\"n\":1} <N min ago>", i, r, beta[i])
		}
	}
	if nextLink(p) != "" {
		t.Fatal("Beta filter: unexpected next link")
	}
	filter := elements(p.doc, "input", func(n *html.Node) bool { return attr(n, "name") == "type" && attr(n, "type") == "" })
	if len(filter) != 1 || attr(filter[0], "value") != "Beta" {
		t.Fatal("the filter box does not show the current filter")
	}
	if rows := poisonRows(t, b.get("/ui/poison?type=Alpha").want(t, http.StatusOK)); len(rows) != len(alpha) || rows[0][0] != alpha[0] {
		t.Fatalf("Alpha filter rows %v, want first %s of %d", rows, alpha[0], len(alpha))
	}
	contains(t, b.get("/ui/poison?type=Gamma").want(t, http.StatusOK), "No poisoned commands of type Gamma")

	// Links: command ID → its poison entry's page.
	links := elements(p.doc, "a", func(n *html.Node) bool { return attr(n, "href") == "/ui/poison/"+beta[0] })
	if len(links) != 1 {
		t.Fatalf("no link to /ui/poison/%s", beta[0])
	}

	// Bad input is a readable page.
	contains(t, b.get("/ui/poison?limit=0").want(t, http.StatusBadRequest), "limit \"0\" is not a whole number")
	contains(t, b.get("/ui/poison?continuation=xyz").want(t, http.StatusBadRequest), "Start again from the first page")
}

func TestDashboardCommandPage(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{})
	b := newBrowser(t, srv.URL)
	id := issue(t, srv, "Convert")
	srv.Log.Append(t, id,
		cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1, Worker: "host-a"},
		cmdq.Event{Kind: cmdq.EventStepCompleted, Attempt: 1, Worker: "host-a", Step: 1, Note: "file 1 converted"},
		cmdq.Event{Kind: cmdq.EventFailed, Attempt: 1, Worker: "host-a", Error: "panic: nil map", Detail: "goroutine 7 [running]:\nmain.convert()"},
	)
	poisonAt(t, srv, id, time.Now(), "")

	p := b.get("/ui/commands/"+id).want(t, http.StatusOK)
	contains(t, p, "Type Convert", "Status poisoned", "Last completed step 1", `Parameters (7 bytes) { "n": 1 }`)
	if n := len(elements(p.doc, "span", func(n *html.Node) bool {
		return hasClass(n, "badge") && hasClass(n, "s-poisoned") && text(n) == "poisoned"
	})); n < 2 {
		t.Fatalf("the poisoned state is not a coloured badge (%d badges)", n)
	}
	var kinds []string
	rows := elements(p.doc, "tr", func(n *html.Node) bool { return hasClass(n, "event") })
	for _, tr := range rows {
		kinds = append(kinds, cells(tr)[2])
	}
	if want := []string{"created", "started", "step 1 completed", "failed", "poisoned"}; !slices.Equal(kinds, want) {
		t.Fatalf("timeline %v, want %v", kinds, want)
	}
	failed := cells(rows[3])
	if !strings.HasPrefix(failed[3], "attempt 1 took ") || failed[4] != "1" || failed[5] != "host-a" || !strings.Contains(failed[6], "panic: nil map") {
		t.Fatalf("failed row %q", failed)
	}
	// The step and its note are told apart: "step 1 completed", then the
	// note on its own ("step 1 step 1 of 4" ran together before).
	if c := cells(rows[2]); !strings.HasPrefix(c[3], "step took ") || c[6] != "file 1 converted" || len(elements(rows[2], "q", nil)) != 1 {
		t.Fatalf("step row %q", c)
	}
	details := elements(rows[3], "details", nil)
	if len(details) != 1 || !strings.Contains(text(details[0]), "goroutine 7 [running]:") {
		t.Fatal("the panic stack is not in a <details> of the failed event")
	}
	// Times are relative, with the absolute UTC time in the title; the
	// timeline shows the time of day (UTC), with the date and how long ago
	// in the title.
	// Everything happened moments ago ("just now" under a second; the
	// page may be rendered a few seconds later on a loaded machine).
	clock := regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3}Z$`)
	recent := regexp.MustCompile(`^(just now|[1-9] s ago)$`)
	recentTitle := regexp.MustCompile(`Z \((just now|[1-9] s ago)\)$`)
	for _, tm := range elements(p.doc, "time", func(n *html.Node) bool { return attr(n, "id") != "updated" }) {
		ok := strings.HasSuffix(attr(tm, "datetime"), "Z")
		if hasClass(tm, "clock") {
			ok = ok && clock.MatchString(text(tm)) && recentTitle.MatchString(attr(tm, "title"))
		} else {
			ok = ok && strings.HasSuffix(attr(tm, "title"), "Z") && recent.MatchString(text(tm))
		}
		if !ok {
			t.Fatalf("time element %q title %q datetime %q", text(tm), attr(tm, "title"), attr(tm, "datetime"))
		}
	}
	// A poisoned command offers the actions: requeue at once, discard
	// after a confirmation page.
	forms := elements(p.doc, "form", func(n *html.Node) bool { return attr(n, "method") == "post" })
	var actions []string
	for _, f := range forms {
		actions = append(actions, attr(f, "action"))
	}
	if !slices.Contains(actions, "/ui/poison/"+id+"/requeue") || slices.Contains(actions, "/ui/poison/"+id+"/discard") {
		t.Fatalf("poisoned command page forms %v: want requeue, and discard only behind a confirmation", actions)
	}
	if len(elements(p.doc, "a", func(n *html.Node) bool { return attr(n, "href") == "/ui/poison/"+id+"/discard" })) != 1 {
		t.Fatal("no link to the discard confirmation")
	}
	// The page refreshes itself while the command may change.
	if live := elements(p.doc, "div", func(n *html.Node) bool { return attr(n, "id") == "live" }); len(live) != 1 || attr(live[0], "data-refresh") != "5" {
		t.Fatal("a poisoned command's page has no live part refreshing every 5 s")
	}

	// Search box → command page.
	if len(elements(p.doc, "form", func(n *html.Node) bool { return attr(n, "action") == "/ui/search" })) != 1 {
		t.Fatal("no search form")
	}
	if loc := b.get("/ui/search?id="+strings.ToUpper(id)).location(t, http.StatusSeeOther); loc != "/ui/commands/"+id {
		t.Fatalf("search redirects to %q", loc)
	}
	// Anything else: the start of an ID (hex digits) or a correlation ID,
	// searched among the commands of the last day.
	if loc := b.get("/ui/search?id="+id[:8]).location(t, http.StatusSeeOther); loc != "/ui/commands?id="+id[:8]+"&range=24h" {
		t.Fatalf("search of an ID prefix redirects to %q", loc)
	}
	if loc := b.get("/ui/search?id=order-42").location(t, http.StatusSeeOther); loc != "/ui/commands?correlation=order-42&range=24h" {
		t.Fatalf("search of a correlation ID redirects to %q", loc)
	}
	contains(t, b.get("/ui/search?id=+").want(t, http.StatusBadRequest), "The search box was empty")
	contains(t, b.get("/ui/commands/not-a-uuid").want(t, http.StatusBadRequest), "lowercase canonical UUIDs")
	contains(t, b.get("/ui/commands/"+uuid.NewString()).want(t, http.StatusNotFound), "There is no command with this ID")
	b.get("/ui/nowhere").want(t, http.StatusNotFound)
}

func TestDashboardRequeueDiscard(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	b := newBrowser(t, srv.URL)
	a, d := issue(t, srv, "Alpha"), issue(t, srv, "Alpha")
	poisonAt(t, srv, a, time.Now(), "x")
	poisonAt(t, srv, d, time.Now(), "y")
	before := srv.QueueCount(t, "")

	p := b.get("/ui/poison?type=Alpha").want(t, http.StatusOK)
	tok := csrf(t, p)

	// Without the CSRF token nothing happens.
	contains(t, b.post("/ui/poison/"+a+"/requeue", url.Values{"type": {"Alpha"}}).want(t, http.StatusForbidden), "Reload the page")
	// Nor cross-origin, even with the token.
	b.headers["Sec-Fetch-Site"] = "cross-site"
	b.post("/ui/poison/"+a+"/requeue", url.Values{"csrf": {tok}}).want(t, http.StatusForbidden)
	delete(b.headers, "Sec-Fetch-Site")
	if _, err := srv.Client.GetPoison(ctx, a); err != nil {
		t.Fatalf("refused requeue changed storage: %v", err)
	}

	// Requeue: command pending, a new message, entry gone; redirect with flash.
	b.headers["Sec-Fetch-Site"] = "same-origin"
	loc := b.post("/ui/poison/"+a+"/requeue", url.Values{"csrf": {tok}, "type": {"Alpha"}}).location(t, http.StatusSeeOther)
	if !strings.HasPrefix(loc, "/ui/poison?") || !strings.Contains(loc, "type=Alpha") {
		t.Fatalf("requeue redirects to %q", loc)
	}
	contains(t, b.get(loc).want(t, http.StatusOK), "Command "+a+" was requeued at")
	// The message is shown once: a reload does not repeat it.
	if got := text(b.get(loc).want(t, http.StatusOK).doc); strings.Contains(got, "was requeued") {
		t.Fatalf("the flash message came back on reload:\n%s", got)
	}
	st, err := srv.Client.Get(ctx, a)
	if err != nil || st.State != cmdq.StatePending {
		t.Fatalf("after requeue: %v %v, want pending", st.State, err)
	}
	if n := srv.QueueCount(t, ""); n != before+1 {
		t.Fatalf("queue has %d messages, want %d", n, before+1)
	}
	if _, err := srv.Client.GetPoison(ctx, a); !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("poison entry after requeue: %v", err)
	}
	evs, _ := srv.Client.Events(ctx, a)
	if last := evs[len(evs)-1]; last.Kind != cmdq.EventRequeued || last.By != "ui:anonymous" {
		t.Fatalf("last event %+v", last)
	}
	// Again: a readable 409 saying it is not poisoned.
	contains(t, b.post("/ui/poison/"+a+"/requeue", url.Values{"csrf": {tok}}).want(t, http.StatusConflict), "is pending, not poisoned")

	// Discard asks first: the confirmation page changes nothing and posts
	// to the action.
	p = b.get("/ui/poison/"+d+"/discard?type=Alpha").want(t, http.StatusOK)
	contains(t, p, "Discard this poison entry?", "cannot be undone", d, "ceiling exceeded")
	if forms := elements(p.doc, "form", func(n *html.Node) bool {
		return attr(n, "method") == "post" && attr(n, "action") == "/ui/poison/"+d+"/discard"
	}); len(forms) != 1 {
		t.Fatalf("the confirmation page has no form posting the discard:\n%s", p.body)
	}
	if _, err := srv.Client.GetPoison(ctx, d); err != nil {
		t.Fatalf("the confirmation page changed storage: %v", err)
	}
	// Discard: status discarded, entry gone.
	contains(t, b.get(b.post("/ui/poison/"+d+"/discard", url.Values{"csrf": {csrf(t, p)}, "type": {"Alpha"}}).location(t, http.StatusSeeOther)).want(t, http.StatusOK),
		"Poison entry "+d+" was discarded")
	if st, _ := srv.Client.Get(ctx, d); st.State != cmdq.StateDiscarded {
		t.Fatalf("after discard: %s", st.State)
	}
	if _, err := srv.Client.GetPoison(ctx, d); !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("poison entry after discard: %v", err)
	}

	// An orphan entry (malformed message): requeue explains, offers discard.
	srv.Log.PoisonMessage(t, cmdq.PoisonEntry{CommandID: "msg-0042", Reason: "malformed message", LastError: "invalid JSON"})
	orphan := poisonRows(t, b.get("/ui/poison").want(t, http.StatusOK))
	if len(orphan) != 1 || orphan[0][0] != "msg-0042 (no stored command)" {
		t.Fatalf("poison list with an orphan entry: %q", orphan)
	}
	p = b.post("/ui/poison/msg-0042/requeue", url.Values{"csrf": {tok}}).want(t, http.StatusConflict)
	contains(t, p, "nothing to requeue", "discard the entry")
	if links := elements(p.doc, "a", func(n *html.Node) bool { return attr(n, "href") == "/ui/poison/msg-0042/discard" }); len(links) != 1 {
		t.Fatalf("orphan error page offers no discard:\n%s", p.body)
	}
	p = b.get("/ui/poison/msg-0042/discard").want(t, http.StatusOK)
	contains(t, p, "msg-0042 (no stored command)")
	b.post("/ui/poison/msg-0042/discard", url.Values{"csrf": {csrf(t, p)}}).location(t, http.StatusSeeOther)
	if _, err := srv.Client.GetPoison(ctx, "msg-0042"); !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("orphan entry after discard: %v", err)
	}
	contains(t, b.post("/ui/poison/"+uuid.NewString()+"/discard", url.Values{"csrf": {tok}}).want(t, http.StatusNotFound), "no poison entry or command")
}

func TestDashboardLogin(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	ctx := context.Background()
	id := issue(t, srv, "Alpha")
	poisonAt(t, srv, id, time.Now(), "x")

	anon := newBrowser(t, srv.URL)
	if loc := anon.get("/ui/poison?type=Alpha").location(t, http.StatusSeeOther); loc != "/ui/login?next="+url.QueryEscape("/ui/poison?type=Alpha") {
		t.Fatalf("anonymous GET redirects to %q", loc)
	}
	anon.get("/ui/commands/"+id).location(t, http.StatusSeeOther)
	anon.post("/ui/poison/"+id+"/requeue", nil).want(t, http.StatusUnauthorized)
	p := anon.get("/ui/login?next=/ui/").want(t, http.StatusOK)
	if len(elements(p.doc, "input", func(n *html.Node) bool { return attr(n, "name") == "token" && attr(n, "type") == "password" })) != 1 {
		t.Fatal("login page has no password field named token")
	}
	contains(t, anon.post("/ui/login", url.Values{"token": {"wrong-token-0123456789"}}).want(t, http.StatusUnauthorized), "not configured")
	contains(t, anon.post("/ui/login", url.Values{"token": {apitest.IssuerToken}}).want(t, http.StatusForbidden), "needs a reader or operator token")
	if anon.cookie != nil {
		t.Fatal("a failed login set a session cookie")
	}
	anon.headers["Origin"] = "https://evil.example"
	anon.post("/ui/login", url.Values{"token": {apitest.OperatorToken}}).want(t, http.StatusForbidden)
	if anon.cookie != nil {
		t.Fatal("a cross-origin login set a session cookie")
	}

	// Reader: sees status pages, not the poison table, cannot act.
	reader := newBrowser(t, srv.URL)
	if loc := reader.post("/ui/login", url.Values{"token": {apitest.ReaderToken}, "next": {"/ui/commands/" + id}}).location(t, http.StatusSeeOther); loc != "/ui/commands/"+id {
		t.Fatalf("login redirects to %q", loc)
	}
	c := reader.cookie
	if c == nil || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui" || c.MaxAge != int(console.SessionLifetime/time.Second) {
		t.Fatalf("session cookie %+v; want HttpOnly, SameSite=Strict, Path=/ui, 8 h", c)
	}
	if strings.Contains(c.Value, apitest.ReaderToken) {
		t.Fatal("the cookie holds the token")
	}
	p = reader.get("/ui/commands/"+id).want(t, http.StatusOK)
	contains(t, p, "Status poisoned")
	readerCSRF := csrf(t, p) // from the logout form
	reader.get("/ui/").want(t, http.StatusOK)
	contains(t, reader.get("/ui/poison").want(t, http.StatusForbidden), `needs the "operator" role`)
	reader.post("/ui/poison/"+id+"/requeue", url.Values{"csrf": {readerCSRF}}).want(t, http.StatusForbidden)

	// Operator: CSRF bound to the session; then the action works.
	op := newBrowser(t, srv.URL)
	op.post("/ui/login", url.Values{"token": {apitest.OperatorToken}}).location(t, http.StatusSeeOther)
	tok := csrf(t, op.get("/ui/poison").want(t, http.StatusOK))
	op.post("/ui/poison/"+id+"/requeue", nil).want(t, http.StatusForbidden)
	op.post("/ui/poison/"+id+"/requeue", url.Values{"csrf": {readerCSRF}}).want(t, http.StatusForbidden)
	op.headers["Origin"] = "http://evil.example"
	op.post("/ui/poison/"+id+"/requeue", url.Values{"csrf": {tok}}).want(t, http.StatusForbidden)
	delete(op.headers, "Origin")
	if _, err := srv.Client.GetPoison(ctx, id); err != nil {
		t.Fatalf("a refused POST changed storage: %v", err)
	}
	op.post("/ui/poison/"+id+"/requeue", url.Values{"csrf": {tok}}).location(t, http.StatusSeeOther)
	if st, _ := srv.Client.Get(ctx, id); st.State != cmdq.StatePending {
		t.Fatalf("after operator requeue: %s", st.State)
	}
	evs, _ := srv.Client.Events(ctx, id)
	if w := evs[len(evs)-1].By; !strings.HasPrefix(w, "ui:token:") {
		t.Fatalf("requeue recorded by %q, want ui:token:<hash>", w)
	}

	// Forged cookies: operator roles in a reader cookie's payload, garbage.
	payload, sig, _ := strings.Cut(c.Value, ".")
	claims, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || !strings.Contains(string(claims), `"reader"`) {
		t.Fatalf("cookie payload %q: %v", claims, err)
	}
	forged := base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(claims), `"reader"`, `"operator"`, 1)))
	for _, v := range []string{forged + "." + sig, payload + "x." + sig, "garbage", payload + "." + sig + "A"} {
		f := newBrowser(t, srv.URL)
		f.cookie = &http.Cookie{Name: console.SessionCookieName, Value: v}
		if loc := f.get("/ui/").location(t, http.StatusSeeOther); !strings.HasPrefix(loc, "/ui/login") {
			t.Fatalf("forged cookie %q: redirect to %q", v, loc)
		}
	}

	// Bearer tokens work for scripted checks.
	bb := newBrowser(t, srv.URL)
	bb.bearer = apitest.OperatorToken
	bb.get("/ui/poison").want(t, http.StatusOK)
	bb.bearer = apitest.ReaderToken
	bb.get("/ui/poison").want(t, http.StatusForbidden)
	bb.get("/ui/").want(t, http.StatusOK)
	bb.bearer = "not-a-token-0123456789"
	bb.get("/ui/").want(t, http.StatusUnauthorized)

	// Open redirects are refused.
	for _, next := range []string{"https://evil.example/", "//evil.example/ui/", "/v1/poison"} {
		x := newBrowser(t, srv.URL)
		if loc := x.post("/ui/login", url.Values{"token": {apitest.ReaderToken}, "next": {next}}).location(t, http.StatusSeeOther); loc != "/ui/" {
			t.Fatalf("next=%q redirects to %q", next, loc)
		}
	}

	// Logout clears the cookie and ends the session on the server: a copy
	// of the cookie taken before stops working at once.
	copied := *op.cookie
	op.post("/ui/logout", nil).want(t, http.StatusForbidden)
	if loc := op.post("/ui/logout", url.Values{"csrf": {tok}}).location(t, http.StatusSeeOther); loc != "/ui/login" || op.cookie != nil {
		t.Fatalf("logout: redirect %q, cookie %v", loc, op.cookie)
	}
	op.get("/ui/").location(t, http.StatusSeeOther)
	thief := newBrowser(t, srv.URL)
	thief.cookie = &copied
	if loc := thief.get("/ui/poison").location(t, http.StatusSeeOther); !strings.HasPrefix(loc, "/ui/login") {
		t.Fatalf("a copy of the logged-out cookie still works: redirect %q", loc)
	}
	thief.cookie = &copied
	thief.post("/ui/poison/"+id+"/discard", url.Values{"csrf": {tok}}).want(t, http.StatusUnauthorized)
	// Other sessions of the same token are not affected.
	op2 := newBrowser(t, srv.URL)
	op2.post("/ui/login", url.Values{"token": {apitest.OperatorToken}}).location(t, http.StatusSeeOther)
	op2.get("/ui/poison").want(t, http.StatusOK)
}

// TestDashboardSessionExpiry moves the dashboard's clock, so it does not run
// in parallel.
func TestDashboardSessionExpiry(t *testing.T) {
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	b := newBrowser(t, srv.URL)
	b.post("/ui/login", url.Values{"token": {apitest.ReaderToken}}).location(t, http.StatusSeeOther)
	b.get("/ui/").want(t, http.StatusOK)
	restore := console.SetDashboardClock(func() time.Time { return time.Now().Add(console.SessionLifetime - time.Minute) })
	b.get("/ui/").want(t, http.StatusOK)
	console.SetDashboardClock(func() time.Time { return time.Now().Add(console.SessionLifetime + time.Second) })
	defer restore()
	if loc := b.get("/ui/").location(t, http.StatusSeeOther); !strings.HasPrefix(loc, "/ui/login") {
		t.Fatalf("expired session redirects to %q", loc)
	}
}

func TestDashboardEscaping(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{})
	b := newBrowser(t, srv.URL)
	const evil = `<script>alert("x")</script>`
	srv.Log.PoisonMessage(t, cmdq.PoisonEntry{CommandID: "msg-evil", Type: evil, Reason: evil, LastError: evil})
	id := issue(t, srv, "Alpha")
	srv.Log.Append(t, id, cmdq.Event{Kind: cmdq.EventFailed, Attempt: 1, Worker: evil, Error: evil, Detail: evil})
	for _, path := range []string{"/ui/poison", "/ui/poison?type=" + url.QueryEscape(evil), "/ui/commands/" + id, "/ui/", "/ui/commands?correlation=" + url.QueryEscape(evil), "/ui/poison/msg-evil"} {
		p := b.get(path)
		if p.doc == nil {
			t.Fatalf("%s: not HTML", path)
		}
		// The only script is the dashboard's own file.
		for _, sc := range elements(p.doc, "script", nil) {
			if !strings.HasPrefix(attr(sc, "src"), "/ui/static/live.js?v=") || sc.FirstChild != nil {
				t.Fatalf("%s: a script that is not the dashboard's own:\n%s", path, p.body)
			}
		}
		if strings.Contains(p.body, "<script>") {
			t.Fatalf("%s: unescaped script:\n%s", path, p.body)
		}
		if !strings.Contains(p.body, "&lt;script&gt;") {
			t.Fatalf("%s: the escaped text is missing:\n%s", path, p.body)
		}
	}
}

func TestDashboardBasePath(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	h, err := console.New(console.Config{Client: srv.Client, Tokens: apitest.Tokens(), BasePath: "/cmdq"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/cmdq/", http.StripPrefix("/cmdq", h))
	hs := httptest.NewServer(mux)
	defer hs.Close()
	b := newBrowser(t, hs.URL)
	if loc := b.get("/cmdq/ui/").location(t, http.StatusSeeOther); loc != "/cmdq/ui/login?next=%2Fcmdq%2Fui%2F" {
		t.Fatalf("redirect %q", loc)
	}
	if loc := b.post("/cmdq/ui/login", url.Values{"token": {apitest.OperatorToken}, "next": {"/cmdq/ui/poison"}}).location(t, http.StatusSeeOther); loc != "/cmdq/ui/poison" {
		t.Fatalf("login redirect %q", loc)
	}
	if b.cookie.Path != "/cmdq/ui" {
		t.Fatalf("cookie path %q", b.cookie.Path)
	}
	p := b.get("/cmdq/ui/poison").want(t, http.StatusOK)
	if len(elements(p.doc, "a", func(n *html.Node) bool { return attr(n, "href") == "/cmdq/ui/" })) == 0 {
		t.Fatal("links do not carry the base path")
	}
}
