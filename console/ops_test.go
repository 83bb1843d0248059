package console_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"

	"golang.org/x/net/html"

	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// flashText returns the page's flash message ("" when there is none).
func flashText(p page) string {
	for _, n := range elements(p.doc, "p", func(n *html.Node) bool { return hasClass(n, "flash") }) {
		return text(n)
	}
	return ""
}

// TestDashboardFlashIsServerSideAndOnce: the message after an action is
// shown on the next view of its page only: not on a reload, not from the
// URL, not to another session holding a copy of the cookie, and live
// refreshes (X-Cmdq-Refresh) do not use it up.
func TestDashboardFlashIsServerSideAndOnce(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	id := issue(t, srv, "Alpha")
	poisonAt(t, srv, id, time.Now(), "x")

	// The old URL flash does nothing now.
	op := newBrowser(t, srv.URL)
	op.post("/ui/login", url.Values{"token": {apitest.OperatorToken}}).location(t, http.StatusSeeOther)
	if f := flashText(op.get("/ui/poison?flash=requeued&cmd="+id).want(t, http.StatusOK)); f != "" {
		t.Fatalf("a flash from the URL: %q", f)
	}

	tok := csrf(t, op.get("/ui/poison").want(t, http.StatusOK))
	loc := op.post("/ui/poison/"+id+"/requeue", url.Values{"csrf": {tok}}).location(t, http.StatusSeeOther)
	if loc != "/ui/poison" || strings.Contains(loc, "flash") || op.flash == nil {
		t.Fatalf("requeue redirects to %q with flash cookie %v", loc, op.flash)
	}
	c := op.flash
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui" {
		t.Fatalf("flash cookie %+v; want HttpOnly, SameSite=Strict, Path=/ui", c)
	}
	// Another operator's session with a copy of the cookie sees nothing.
	other := newBrowser(t, srv.URL)
	other.post("/ui/login", url.Values{"token": {apitest.OperatorToken}}).location(t, http.StatusSeeOther)
	other.flash = c
	if f := flashText(other.get("/ui/poison").want(t, http.StatusOK)); f != "" {
		t.Fatalf("another session sees the flash: %q", f)
	}
	// A live refresh does not use it up; another page does not show it.
	op.headers["X-Cmdq-Refresh"] = "1"
	if f := flashText(op.get("/ui/poison").want(t, http.StatusOK)); f != "" {
		t.Fatalf("a refresh shows the flash: %q", f)
	}
	delete(op.headers, "X-Cmdq-Refresh")
	if f := flashText(op.get("/ui/").want(t, http.StatusOK)); f != "" {
		t.Fatalf("the overview shows the poison list's flash: %q", f)
	}
	if f := flashText(op.get("/ui/poison").want(t, http.StatusOK)); !strings.Contains(f, "Command "+id+" was requeued at") {
		t.Fatalf("flash %q", f)
	}
	if op.flash != nil {
		t.Fatal("the flash cookie is not cleared once shown")
	}
	op.flash = c
	if f := flashText(op.get("/ui/poison").want(t, http.StatusOK)); f != "" {
		t.Fatalf("the flash came back with the old cookie: %q", f)
	}
}

// TestDashboardRequeueFromCommandPage: after a requeue from a command's
// page, the message says when it was requeued and the state the command is
// in when the page is made (not a state assumed at the time of the action).
func TestDashboardRequeueFromCommandPage(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{})
	id := issue(t, srv, "Alpha")
	poisonAt(t, srv, id, time.Now(), "x")
	b := newBrowser(t, srv.URL)
	p := b.get("/ui/commands/"+id).want(t, http.StatusOK)
	loc := b.post("/ui/poison/"+id+"/requeue", url.Values{"csrf": {csrf(t, p)}, "back": {"command"}}).location(t, http.StatusSeeOther)
	if loc != "/ui/commands/"+id {
		t.Fatalf("requeue from the command page redirects to %q", loc)
	}
	// A processor takes it and fails before the page is shown.
	srv.Log.Append(t, id, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1, Worker: "w"},
		cmdq.Event{Kind: cmdq.EventFailed, Attempt: 1, Worker: "w", Error: "again"})
	p = b.get(loc).want(t, http.StatusOK)
	if f := flashText(p); !strings.Contains(f, "Requeued at ") || !strings.HasSuffix(f, "It is retrying now.") {
		t.Fatalf("flash %q; want the requeue time and the current state, retrying", f)
	}
	var kinds []string
	for _, tr := range elements(p.doc, "tr", func(n *html.Node) bool { return hasClass(n, "event") }) {
		kinds = append(kinds, cells(tr)[2])
	}
	if !slices.Contains(kinds, "requeued") {
		t.Fatalf("timeline %v lacks requeued", kinds)
	}
}

// TestDashboardCommandExplains: a pending command says why it waits (here
// no processor polls its queue); a retrying command says when its next
// attempt is due, and shows the window its retry policy gives when the
// server knows the type's.
func TestDashboardCommandExplains(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Idle: true, Setup: func(c *cmdq.Client) error {
		return cmdq.RegisterWith(c, func(context.Context, resize, *cmdq.Attempt) error { return nil },
			cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: time.Hour, Max: 2 * time.Hour, Jitter: 0.5}})
	}})
	b := newBrowser(t, srv.URL)

	id := issueParams(t, srv, "images.resize", `{}`) // resize has no field n
	p := b.get("/ui/commands/"+id).want(t, http.StatusOK)
	contains(t, p, "Status pending", "Waiting: no processor polls queue commands (no live heartbeat names it); it starts when one does (start one: cmdq worker , or cmdq serve ).")
	if w := elements(p.doc, "dd", func(n *html.Node) bool { return attr(n, "id") == "waiting" }); len(w) != 1 || attr(w[0], "data-reason") != "no_processor" {
		t.Fatal("the waiting note does not name its reason, no_processor")
	}
	if live := elements(p.doc, "div", func(n *html.Node) bool { return attr(n, "id") == "live" }); len(live) != 1 || attr(live[0], "data-refresh") != "2" {
		t.Fatal("a pending command's page does not refresh every 2 s")
	}
	if strings.Contains(text(p.doc), "Next attempt") {
		t.Fatal("a pending command shows a next attempt")
	}

	failedAt := time.Now().UTC().Truncate(time.Millisecond)
	// Both at failedAt: an event without a time gets the store's clock,
	// and a later event is never stored earlier than the one before it.
	dueAt := failedAt.Add(time.Hour)
	srv.Log.Append(t, id, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1, Worker: "w", Time: failedAt},
		cmdq.Event{Kind: cmdq.EventFailed, Attempt: 1, Worker: "w", Error: "busy", Time: failedAt, RunAt: dueAt})
	p = b.get("/ui/commands/"+id).want(t, http.StatusOK)
	contains(t, p, "Waiting: retrying: attempt 2 at "+dueAt.Format("2006-01-02 15:04:05.000Z")+" ( in ")
	if strings.Contains(text(p.doc), "no processor polls") {
		t.Fatal("a retrying command not yet due still says no processor polls its queue")
	}
	// Base 1 h ± 50 %: due between 30 min and 90 min after the failure.
	next := elements(p.doc, "dd", func(n *html.Node) bool { return attr(n, "id") == "next-attempt" })
	if len(next) != 1 {
		t.Fatalf("no next attempt on a retrying command's page:\n%s", text(p.doc))
	}
	got := text(next[0])
	want := "(from " + failedAt.Add(30*time.Minute).Format("2006-01-02 15:04:05.000Z") + " to " + failedAt.Add(90*time.Minute).Format("2006-01-02 15:04:05.000Z") + ", by this server's retry policy for images.resize)"
	if !strings.Contains(got, want) || !strings.HasPrefix(got, "due in 29 min to 1 h 29 min") && !strings.HasPrefix(got, "due in 30 min to 1 h 30 min") {
		t.Fatalf("next attempt %q; want it to start with the relative window and contain %q", got, want)
	}

	// Without the handler here nothing is guessed.
	plain := apitest.Start(t, apitest.Options{})
	id2 := issue(t, plain, "images.resize")
	plain.Log.Append(t, id2, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1}, cmdq.Event{Kind: cmdq.EventFailed, Attempt: 1, Error: "x"})
	if strings.Contains(text(newBrowser(t, plain.URL).get("/ui/commands/"+id2).want(t, http.StatusOK).doc), "Next attempt") {
		t.Fatal("a server without the type's handler shows a next attempt")
	}
}

// TestDashboardCommandDeferred: a command whose handler deferred
// (RetryAfter) says so while it waits — the deferral's due time, no retry
// window guessed from the policy, its deferrals beside the attempts, a
// deferred badge in the timeline — and a failure after a deferral gets the
// policy's window by the attempts that count (the first: 30 to 90 min at
// 1 h ± 50 %, not the second's 1 to 3 h).
func TestDashboardCommandDeferred(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Idle: true, Setup: func(c *cmdq.Client) error {
		return cmdq.RegisterWith(c, func(context.Context, resize, *cmdq.Attempt) error { return nil },
			cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: time.Hour, Max: 2 * time.Hour, Jitter: 0.5}})
	}})
	b := newBrowser(t, srv.URL)
	id := issueParams(t, srv, "images.resize", `{}`)
	at := time.Now().UTC().Truncate(time.Millisecond)
	dueAt := at.Add(30 * time.Minute)
	srv.Log.Append(t, id, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1, Worker: "w", Time: at},
		cmdq.Event{Kind: cmdq.EventDeferred, Attempt: 1, Worker: "w", Error: "retry after 30m0s: 429", Time: at, RunAt: dueAt})
	p := b.get("/ui/commands/"+id).want(t, http.StatusOK)
	contains(t, p, "Waiting: deferred by its handler ( RetryAfter ): attempt 2 at "+dueAt.Format("2006-01-02 15:04:05.000Z")+" ( in ",
		"(1 deferred by the handler: not counted toward the poison ceiling)")
	if w := elements(p.doc, "dd", func(n *html.Node) bool { return attr(n, "id") == "waiting" }); len(w) != 1 || attr(w[0], "data-reason") != "deferred" {
		t.Fatal("the waiting note does not name its reason, deferred")
	}
	if strings.Contains(text(p.doc), "Next attempt") {
		t.Fatal("a deferred command shows a next attempt guessed from the retry policy")
	}
	badges := elements(p.doc, "span", func(n *html.Node) bool { return attr(n, "class") == "badge s-retrying" && text(n) == "deferred" })
	if len(badges) != 1 {
		t.Fatalf("the timeline has %d deferred badges, want 1", len(badges))
	}

	srv.Log.Append(t, id, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 2, Worker: "w", Time: at},
		cmdq.Event{Kind: cmdq.EventFailed, Attempt: 2, Worker: "w", Error: "busy", Time: at, RunAt: at.Add(time.Hour)})
	p = b.get("/ui/commands/"+id).want(t, http.StatusOK)
	next := elements(p.doc, "dd", func(n *html.Node) bool { return attr(n, "id") == "next-attempt" })
	want := "(from " + at.Add(30*time.Minute).Format("2006-01-02 15:04:05.000Z") + " to " + at.Add(90*time.Minute).Format("2006-01-02 15:04:05.000Z")
	if len(next) != 1 || !strings.Contains(text(next[0]), want) {
		t.Fatalf("next attempt after a deferral and a failure: %v; want the first attempt's window %q", next, want)
	}
}

// resize is the command type of TestDashboardCommandExplains; its params
// are issue's {"n":1} (the Client checks that they decode).
type resize struct {
	N int `json:"n"`
}

func (resize) CommandType() string { return "images.resize" }

// TestDashboardBulk: the poison list's bulk buttons lead to a confirmation
// page that lists the entries and changes nothing; its button requeues or
// discards them, and the message says what happened to each.
func TestDashboardBulk(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	b := newBrowser(t, srv.URL)
	var alpha, beta []string
	for i := range 5 {
		id := issue(t, srv, "Alpha")
		poisonAt(t, srv, id, time.Now().Add(time.Duration(i)*time.Second), "a")
		alpha = append(alpha, id)
	}
	for range 3 {
		id := issue(t, srv, "Beta")
		poisonAt(t, srv, id, time.Now(), "b")
		beta = append(beta, id)
	}
	p := b.get("/ui/poison?type=Alpha").want(t, http.StatusOK)
	tok := csrf(t, p)
	for _, do := range []string{"requeue", "discard", "requeue-all", "discard-all"} {
		if len(elements(p.doc, "button", func(n *html.Node) bool {
			return attr(n, "name") == "do" && attr(n, "value") == do && attr(n, "form") == ""
		})) != 1 {
			t.Fatalf("the filtered poison list has no %q button", do)
		}
	}
	if forms := elements(p.doc, "form", func(n *html.Node) bool { return attr(n, "id") == "bulk" && attr(n, "action") == "/ui/poison/bulk" }); len(forms) != 1 {
		t.Fatal("no bulk form")
	}

	// Without the CSRF token, or from another site: refused.
	b.post("/ui/poison/bulk", url.Values{"do": {"requeue"}, "id": {alpha[0]}}).want(t, http.StatusForbidden)
	b.post("/ui/poison/bulk/run", url.Values{"do": {"requeue"}, "id": {alpha[0]}}).want(t, http.StatusForbidden)
	b.headers["Sec-Fetch-Site"] = "cross-site"
	b.post("/ui/poison/bulk/run", url.Values{"do": {"requeue"}, "id": {alpha[0]}, "csrf": {tok}}).want(t, http.StatusForbidden)
	delete(b.headers, "Sec-Fetch-Site")
	contains(t, b.post("/ui/poison/bulk", url.Values{"do": {"requeue"}, "csrf": {tok}}).want(t, http.StatusBadRequest), "No poison entry was selected")
	contains(t, b.post("/ui/poison/bulk", url.Values{"do": {"discard-all"}, "csrf": {tok}}).want(t, http.StatusBadRequest), "Filter the poison list by a type first")
	contains(t, b.post("/ui/poison/bulk", url.Values{"do": {"explode"}, "id": {alpha[0]}, "csrf": {tok}}).want(t, http.StatusBadRequest), "is not an action")

	// Requeue two selected: the review lists them and changes nothing.
	sel := url.Values{"do": {"requeue"}, "id": {alpha[0], alpha[1]}, "type": {"Alpha"}, "csrf": {tok}}
	p = b.post("/ui/poison/bulk", sel).want(t, http.StatusOK)
	contains(t, p, "Requeue 2 commands?", alpha[0], alpha[1])
	if n := len(poisonRowsPlain(p)); n != 2 {
		t.Fatalf("the review lists %d entries, want 2", n)
	}
	if _, err := srv.Client.GetPoison(ctx, alpha[0]); err != nil {
		t.Fatalf("the review changed storage: %v", err)
	}
	form := confirmForm(t, p)
	if attr(form, "action") != "/ui/poison/bulk/run" {
		t.Fatalf("the confirmation posts to %q", attr(form, "action"))
	}
	run := formValues(form)
	if !slices.Equal(run["id"], []string{alpha[0], alpha[1]}) || run.Get("do") != "requeue" {
		t.Fatalf("the confirmation form carries %v", run)
	}
	loc := b.post("/ui/poison/bulk/run", run).location(t, http.StatusSeeOther)
	if loc != "/ui/poison?type=Alpha" {
		t.Fatalf("bulk run redirects to %q", loc)
	}
	p = b.get(loc).want(t, http.StatusOK)
	if f := flashText(p); !strings.HasPrefix(f, "Requeued 2 of 2 at ") || !strings.Contains(f, "they left the poison table") {
		t.Fatalf("flash %q", f)
	}
	for _, id := range alpha[:2] {
		if st, _ := srv.Client.Get(ctx, id); st.State != cmdq.StatePending {
			t.Fatalf("%s after bulk requeue: %s", id, st.State)
		}
	}
	if n := len(poisonRows(t, p)); n != 3 {
		t.Fatalf("%d Alpha entries left, want 3", n)
	}

	// A selection that names an entry handled since: left out on review;
	// if it is run anyway, the message says why it failed.
	p = b.post("/ui/poison/bulk", url.Values{"do": {"discard"}, "id": {alpha[0], alpha[2]}, "type": {"Alpha"}, "csrf": {tok}}).want(t, http.StatusOK)
	contains(t, p, "Discard 1 poison entry?", "cannot be undone", "Not in the poison table any more, so left out: "+alpha[0])
	b.post("/ui/poison/bulk/run", url.Values{"do": {"discard"}, "id": {alpha[2], alpha[0]}, "type": {"Alpha"}, "csrf": {tok}}).location(t, http.StatusSeeOther)
	f := flashText(b.get("/ui/poison?type=Alpha").want(t, http.StatusOK))
	if !strings.HasPrefix(f, "Discarded 1 of 2 at ") || !strings.Contains(f, "Not discarded: "+alpha[0]+" (") {
		t.Fatalf("flash %q", f)
	}
	if st, _ := srv.Client.Get(ctx, alpha[2]); st.State != cmdq.StateDiscarded {
		t.Fatalf("%s after bulk discard: %s", alpha[2], st.State)
	}

	// All of one type: Beta, three entries, whatever is selected.
	p = b.post("/ui/poison/bulk", url.Values{"do": {"discard-all"}, "type": {"Beta"}, "csrf": {tok}}).want(t, http.StatusOK)
	contains(t, p, "Discard 3 poison entries?")
	run = formValues(confirmForm(t, p))
	if got := slices.Sorted(slices.Values(run["id"])); !slices.Equal(got, slices.Sorted(slices.Values(beta))) || run.Get("do") != "discard" {
		t.Fatalf("discard-all carries %v, want the Beta IDs %v", run, beta)
	}
	b.post("/ui/poison/bulk/run", run).location(t, http.StatusSeeOther)
	if f := flashText(b.get("/ui/poison?type=Beta").want(t, http.StatusOK)); !strings.HasPrefix(f, "Discarded 3 of 3 at ") {
		t.Fatalf("flash %q", f)
	}
	for _, id := range beta {
		if _, err := srv.Client.GetPoison(ctx, id); !errors.Is(err, cmdq.ErrNotFound) {
			t.Fatalf("Beta entry %s after discard-all: %v", id, err)
		}
	}
	// Alpha's last two are untouched.
	for _, id := range alpha[3:] {
		if _, err := srv.Client.GetPoison(ctx, id); err != nil {
			t.Fatalf("Alpha entry %s: %v", id, err)
		}
	}
}

// poisonRowsPlain returns the cells of a confirmation page's entry rows.
func poisonRowsPlain(p page) [][]string {
	var out [][]string
	for _, tr := range elements(p.doc, "tr", func(n *html.Node) bool { return hasClass(n, "entry") }) {
		out = append(out, cells(tr))
	}
	return out
}

// confirmForm returns the confirmation page's posting form.
func confirmForm(t *testing.T, p page) *html.Node {
	t.Helper()
	forms := elements(p.doc, "form", func(n *html.Node) bool {
		return attr(n, "method") == "post" && !strings.HasSuffix(attr(n, "action"), "/logout") && !strings.HasSuffix(attr(n, "action"), "/prefs")
	})
	if len(forms) != 1 {
		t.Fatalf("%d posting forms on the confirmation page:\n%s", len(forms), p.body)
	}
	return forms[0]
}

// formValues returns the hidden fields of a form.
func formValues(form *html.Node) url.Values {
	v := url.Values{}
	for _, in := range elements(form, "input", nil) {
		if attr(in, "type") == "hidden" {
			v.Add(attr(in, "name"), attr(in, "value"))
		}
	}
	return v
}

// TestDashboardAssetsAndCSP: the stylesheet and the script are served from
// this origin with their types, cacheable under their version; pages carry
// no inline script or style, and the CSP forbids them.
func TestDashboardAssetsAndCSP(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	b := newBrowser(t, srv.URL)
	p := b.get("/ui/login").want(t, http.StatusOK)
	csp := p.header.Get("Content-Security-Policy")
	for _, d := range []string{"script-src 'self'", "style-src 'self'", "connect-src 'self'", "base-uri 'none'"} {
		if !strings.Contains(csp, d) {
			t.Fatalf("CSP %q lacks %q", csp, d)
		}
	}
	if strings.Contains(csp, "unsafe") {
		t.Fatalf("CSP %q allows unsafe sources", csp)
	}
	links := elements(p.doc, "link", func(n *html.Node) bool { return attr(n, "rel") == "stylesheet" })
	scripts := elements(p.doc, "script", nil)
	if len(links) != 1 || len(scripts) != 1 {
		t.Fatalf("%d stylesheets and %d scripts on the login page", len(links), len(scripts))
	}
	for _, c := range []struct{ url, ctype string }{{attr(links[0], "href"), "text/css; charset=utf-8"}, {attr(scripts[0], "src"), "text/javascript; charset=utf-8"}} {
		r := b.get(c.url) // no login needed
		if r.code != http.StatusOK || r.header.Get("Content-Type") != c.ctype || r.header.Get("X-Content-Type-Options") != "nosniff" ||
			!strings.Contains(r.header.Get("Cache-Control"), "immutable") || len(r.body) < 500 {
			t.Fatalf("GET %s: %d %v (%d bytes)", c.url, r.code, r.header, len(r.body))
		}
		base, _, _ := strings.Cut(c.url, "?")
		if r := b.get(base + "?v=old"); r.header.Get("Cache-Control") != "no-cache" {
			t.Fatalf("GET %s with another version: Cache-Control %q", base, r.header.Get("Cache-Control"))
		}
	}
	b.get("/ui/static/nothing.js").want(t, http.StatusNotFound)
	b.get("/ui/static/..%2fdashboard.go").want(t, http.StatusNotFound)

	// No page has inline style or script.
	b.post("/ui/login", url.Values{"token": {apitest.OperatorToken}}).location(t, http.StatusSeeOther)
	id := issue(t, srv, "Alpha")
	poisonAt(t, srv, id, time.Now(), "x")
	for _, path := range []string{"/ui/", "/ui/poison", "/ui/commands/" + id, "/ui/poison/" + id + "/discard", "/ui/nowhere"} {
		p := b.get(path)
		walk(p.doc, func(n *html.Node) {
			if n.Type != html.ElementNode {
				return
			}
			if n.Data == "style" || attr(n, "style") != "" || (n.Data == "script" && n.FirstChild != nil) {
				t.Fatalf("%s: inline style or script in <%s>", path, n.Data)
			}
			for _, a := range n.Attr {
				if strings.HasPrefix(a.Key, "on") {
					t.Fatalf("%s: inline handler %s on <%s>", path, a.Key, n.Data)
				}
			}
		})
	}
}

// storageCalls returns the storage calls the server has made so far, by op
// (cmdq_storage_operations_total).
func storageCalls(t *testing.T, srv *apitest.Server) map[string]int {
	t.Helper()
	mfs, err := srv.Prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		if mf.GetName() != "cmdq_storage_operations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" {
					out[l.GetValue()] += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}

// TestDashboardPageCosts counts the storage calls of one view of each page,
// as docs/dashboard.md states them (poison table and events under 1000
// rows, so each query is one request).
func TestDashboardPageCosts(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	done, poisoned, waiting := issue(t, srv, "Alpha"), issue(t, srv, "Alpha"), issue(t, srv, "Alpha")
	srv.Log.Append(t, done, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1}, cmdq.Event{Kind: cmdq.EventCompleted, Attempt: 1})
	poisonAt(t, srv, poisoned, time.Now(), "x")
	op := newBrowser(t, srv.URL)
	op.post("/ui/login", url.Values{"token": {apitest.OperatorToken}}).location(t, http.StatusSeeOther)
	reader := newBrowser(t, srv.URL)
	reader.post("/ui/login", url.Values{"token": {apitest.ReaderToken}}).location(t, http.StatusSeeOther)
	tok := csrf(t, op.get("/ui/poison").want(t, http.StatusOK))
	var readAt time.Time // when the reader's overview read the throughput
	for _, c := range []struct {
		name string
		view func() page
		want map[string]int
	}{
		// The processors' heartbeats: one query; the throughput: one
		// query per recent commands table (today's and the base table),
		// shared by every view for 10 s (the operator's comes within
		// them); operators also read the poison table.
		{"overview (reader)", func() page { readAt = time.Now(); return reader.get("/ui/") }, map[string]int{"queue_count": 1, "table_query": 3}},
		{"overview (operator)", func() page { return op.get("/ui/") }, map[string]int{"queue_count": 1, "table_query": 2}},
		{"poison entry", func() page { return op.get("/ui/poison/" + poisoned) }, map[string]int{"table_get": 2}},
		{"poison list", func() page { return op.get("/ui/poison") }, map[string]int{"table_query": 1}},
		{"command page", func() page { return op.get("/ui/commands/" + done) }, map[string]int{"table_get": 1, "table_query": 1}},
		// A command that waits: why (Status.Waiting) adds a query of the
		// queues' control rows, at most once per 9 s, and one of the
		// heartbeat rows at most once a minute (read above by the
		// overview's processors).
		{"command page (waiting, control rows not read in 9 s)", func() page { return op.get("/ui/commands/" + waiting) }, map[string]int{"table_get": 1, "table_query": 2}},
		{"command page (waiting, again)", func() page { return op.get("/ui/commands/" + waiting) }, map[string]int{"table_get": 1, "table_query": 1}},
		{"command page (poisoned, operator)", func() page { return op.get("/ui/commands/" + poisoned) }, map[string]int{"table_get": 2, "table_query": 1}},
		{"command page (poisoned, reader)", func() page { return reader.get("/ui/commands/" + poisoned) }, map[string]int{"table_get": 1, "table_query": 1}},
		{"discard confirmation", func() page { return op.get("/ui/poison/" + poisoned + "/discard") }, map[string]int{"table_get": 1}},
		{"bulk confirmation", func() page {
			return op.post("/ui/poison/bulk", url.Values{"do": {"discard"}, "id": {poisoned}, "csrf": {tok}})
		}, map[string]int{"table_query": 1}},
		// One query per commands table: today's day table and the base table.
		{"recent commands", func() page { return op.get("/ui/commands") }, map[string]int{"table_query": 2}},
		{"recent commands, filtered, page 2", func() page { return op.get("/ui/commands?type=Alpha&state=completed&continuation=1") }, map[string]int{"table_query": 2}},
		{"recent commands, 7 days, searched", func() page { return op.get("/ui/commands?range=7d&id=01&correlation=c-1") }, map[string]int{"table_query": 2}},
		{"login page, stylesheet, script", func() page {
			op.get("/ui/static/cmdq.css")
			op.get("/ui/static/live.js")
			return newBrowser(t, srv.URL).get("/ui/login")
		}, map[string]int{}},
	} {
		before := storageCalls(t, srv)
		c.view().want(t, http.StatusOK)
		after := storageCalls(t, srv)
		if c.name == "overview (operator)" && time.Since(readAt) >= 10*time.Second {
			c.want["table_query"] += 2 // a loaded machine: the reader's read of the throughput is over 10 s old
		}
		got := map[string]int{}
		for k, v := range after {
			if d := v - before[k]; d != 0 {
				got[k] = d
			}
		}
		if !maps.Equal(got, c.want) {
			t.Errorf("%s costs %v, docs/dashboard.md says %v", c.name, got, c.want)
		}
	}

	// The live feed of a command's page: one point read when it opens,
	// none for a second feed of the same command, none for a final
	// command read before.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pending, completed := issue(t, srv, "Alpha"), issue(t, srv, "Alpha")
	srv.Log.Append(t, completed, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1}, cmdq.Event{Kind: cmdq.EventCompleted, Attempt: 1})
	feed := func(id string) (int, map[string]int) {
		before := storageCalls(t, srv)
		r, ms := apitest.SSE(t, ctx, srv.URL+"/ui/commands/"+id+"/live", "", "Authorization", "Bearer "+apitest.ReaderToken)
		if r.StatusCode == http.StatusOK {
			if m := apitest.NextSSE(t, ms); m.Event != "alive" {
				t.Fatalf("live feed: %+v", m)
			}
		}
		after := storageCalls(t, srv)
		got := map[string]int{}
		for k, v := range after {
			if d := v - before[k]; d != 0 {
				got[k] = d
			}
		}
		return r.StatusCode, got
	}
	for _, c := range []struct {
		name string
		id   string
		code int
		want map[string]int
	}{
		{"live feed", pending, http.StatusOK, map[string]int{"table_get": 1}},
		{"live feed of a command watched already", pending, http.StatusOK, map[string]int{}},
		{"live feed of a completed command read before", completed, http.StatusNoContent, map[string]int{}},
	} {
		if c.id == completed {
			if _, err := srv.Client.Get(ctx, completed); err != nil {
				t.Fatal(err)
			}
		}
		if code, got := feed(c.id); code != c.code || !maps.Equal(got, c.want) {
			t.Errorf("%s: %d, costs %v; docs/dashboard.md says %d and %v", c.name, code, got, c.code, c.want)
		}
	}
}
