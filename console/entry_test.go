package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// byID returns the text of the element with id, "" when there is none.
func byID(p page, id string) string {
	var out string
	walk(p.doc, func(n *html.Node) {
		if n.Type == html.ElementNode && attr(n, "id") == id {
			out = strings.TrimSpace(text(n))
		}
	})
	return out
}

// TestConsolePoisonEntry: a poison entry's page shows its type, queue,
// reason, true attempt count (not the delivery that poisoned it), the last
// error in full, the start of the parameters, when and by whom it was
// poisoned, a link to the command and the Requeue and Discard… controls;
// the list shows the same entry with the error's attempt prefix left out.
// A requeue from it leads to the command's page; the entry then is 404
// with the navigation. An entry without a command (a malformed message)
// says so and offers only Discard…. An unknown page keeps the navigation.
func TestConsolePoisonEntry(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	id := issueParams(t, srv, "images.resize", `{"url":"https://example.com/cat.png","width":640}`)
	long := "attempt 3 of at most 3 failed: resize: " + strings.Repeat("the decoder gave up; ", 20) + "end"
	srv.Log.Poison(t, id, cmdq.PoisonEntry{DequeueCount: 4, Reason: cmdq.ReasonCeiling, LastError: long, Worker: "host-a-17"},
		cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1, Worker: "host-a-17"}, cmdq.Event{Kind: cmdq.EventFailed, Attempt: 1, Error: "x"},
		cmdq.Event{Kind: cmdq.EventStarted, Attempt: 3, Worker: "host-a-17"}, cmdq.Event{Kind: cmdq.EventFailed, Attempt: 3, Error: long})
	srv.Log.PoisonMessage(t, cmdq.PoisonEntry{CommandID: "msg-1", Reason: cmdq.ReasonMalformed, LastError: "not JSON", DequeueCount: 1})

	op := newBrowser(t, srv.URL)
	op.post("/ui/login", url.Values{"token": {apitest.OperatorToken}}).location(t, http.StatusSeeOther)

	// The list: the true attempts (3, not delivery 4), the error without
	// its prefix, the params' start; the ID links to the entry's page.
	var row []string
	for _, r := range poisonRows(t, op.get("/ui/poison").want(t, http.StatusOK)) {
		if r[0] == id {
			row = r
		}
	}
	if row == nil || row[2] != "3" || !strings.HasPrefix(row[4], "resize: the decoder gave up;") || !strings.HasPrefix(row[5], `{"url":"https://example.com/cat.png"`) {
		t.Fatalf("poison list row %q", row)
	}

	p := op.get("/ui/poison/"+id).want(t, http.StatusOK)
	contains(t, p, "Poison entry "+id, "images.resize", "poison ceiling exceeded", "host-a-17", "Requeue", "Discard…", "Open the command")
	if got := byID(p, "attempts"); got != "3 (poisoned by delivery 4, which did not run the handler)" {
		t.Errorf("attempts %q", got)
	}
	if got := byID(p, "last-error"); got != long {
		t.Errorf("last error %q, want it whole", got)
	}
	if got := byID(p, "params-preview"); got != `{"url":"https://example.com/cat.png","width":640}` {
		t.Errorf("params %q", got)
	}
	if links := elements(p.doc, "a", func(n *html.Node) bool {
		return attr(n, "id") == "command-link" && attr(n, "href") == "/ui/commands/"+id
	}); len(links) != 1 {
		t.Error("no link to the command's page")
	}
	if nav := elements(p.doc, "a", func(n *html.Node) bool { return attr(n, "aria-current") == "page" && attr(n, "href") == "/ui/poison" }); len(nav) != 1 {
		t.Error("the poison entry page is not under Poison in the navigation")
	}

	// Requeue from the entry: to the command's page, with the state shown.
	loc := op.post("/ui/poison/"+id+"/requeue", url.Values{"csrf": {csrf(t, p)}, "back": {"command"}}).location(t, http.StatusSeeOther)
	if loc != "/ui/commands/"+id {
		t.Fatalf("requeue from the entry page leads to %q", loc)
	}
	if f := flashText(op.get(loc).want(t, http.StatusOK)); !strings.HasSuffix(f, "It is pending now.") {
		t.Errorf("flash %q", f)
	}
	gone := op.get("/ui/poison/"+id).want(t, http.StatusNotFound)
	contains(t, gone, "Not in the poison table", "/ui/commands/"+id)
	if nav := elements(gone.doc, "a", func(n *html.Node) bool { return attr(n, "href") == "/ui/commands" }); len(nav) == 0 {
		t.Error("the entry's 404 has no navigation")
	}

	// An entry without a stored command.
	m := op.get("/ui/poison/msg-1").want(t, http.StatusOK)
	contains(t, m, "no stored command", "malformed message", "not JSON", "Discard…")
	if len(elements(m.doc, "form", func(n *html.Node) bool { return strings.HasSuffix(attr(n, "action"), "/requeue") })) != 0 {
		t.Error("an entry without a command offers Requeue")
	}

	// Any unknown page keeps the navigation for a logged-in viewer.
	nf := op.get("/ui/nowhere").want(t, http.StatusNotFound)
	contains(t, nf, "Page not found")
	if nav := elements(nf.doc, "a", func(n *html.Node) bool { return attr(n, "href") == "/ui/poison" }); len(nav) == 0 {
		t.Error("the 404 page lost the navigation")
	}
	// A reader may not see poison entries.
	reader := newBrowser(t, srv.URL)
	reader.post("/ui/login", url.Values{"token": {apitest.ReaderToken}}).location(t, http.StatusSeeOther)
	reader.get("/ui/poison/msg-1").want(t, http.StatusForbidden)
	contains(t, op.get("/ui/poison/a%5Cb").want(t, http.StatusBadRequest), "cannot name a poison entry")
}

// TestConsolePrefs: the theme and auto-refresh preferences are stored in
// a cookie by the form at the foot of every page (no JavaScript needed)
// and rendered on every page; bad values, a missing CSRF token and a
// cross-origin post are refused.
func TestConsolePrefs(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	b := newBrowser(t, srv.URL)
	login := b.get("/ui/login").want(t, http.StatusOK)
	htmlAttr := func(p page, name string) string {
		for _, n := range elements(p.doc, "html", nil) {
			return attr(n, name)
		}
		return ""
	}
	if htmlAttr(login, "data-theme") != "" || htmlAttr(login, "data-refresh-pref") != "auto" {
		t.Fatal("the default preferences are not the system's theme and the page's own refresh")
	}
	// Before logging in (the login page has the form too).
	r := b.post("/ui/prefs", url.Values{"csrf": {csrf(t, login)}, "theme": {"dark"}, "back": {"/ui/login?next=%2Fui%2Fqueues"}})
	if loc := r.location(t, http.StatusSeeOther); loc != "/ui/login" {
		t.Fatalf("prefs from the login page lead to %q", loc)
	}
	if b.prefs == nil || b.prefs.Value != "dark_auto" || !b.prefs.HttpOnly || b.prefs.Path != "/ui" || b.prefs.MaxAge < 300*24*3600 {
		t.Fatalf("prefs cookie %+v", b.prefs)
	}
	b.post("/ui/login", url.Values{"token": {apitest.ReaderToken}}).location(t, http.StatusSeeOther)
	p := b.get("/ui/queues").want(t, http.StatusOK)
	if htmlAttr(p, "data-theme") != "dark" {
		t.Fatal("the chosen theme is not rendered")
	}
	tok := csrf(t, p)
	r = b.post("/ui/prefs", url.Values{"csrf": {tok}, "refresh": {"off"}, "back": {"/ui/queues"}})
	if loc := r.location(t, http.StatusSeeOther); loc != "/ui/queues" {
		t.Fatalf("prefs lead to %q", loc)
	}
	if b.prefs.Value != "dark_off" {
		t.Fatalf("prefs cookie after pausing: %q", b.prefs.Value)
	}
	if got := htmlAttr(b.get("/ui/commands").want(t, http.StatusOK), "data-refresh-pref"); got != "off" {
		t.Fatalf("data-refresh-pref %q, want off", got)
	}
	contains(t, b.post("/ui/prefs", url.Values{"csrf": {tok}, "theme": {"neon"}}).want(t, http.StatusBadRequest), "system, light or dark")
	contains(t, b.post("/ui/prefs", url.Values{"csrf": {tok}, "refresh": {"1"}}).want(t, http.StatusBadRequest), "auto, 5, 10, 30, 60 or off")
	b.post("/ui/prefs", url.Values{"theme": {"dark"}}).want(t, http.StatusForbidden)
	// Back never leaves the console.
	if loc := b.post("/ui/prefs", url.Values{"csrf": {tok}, "theme": {"light"}, "back": {"https://evil.example/ui/"}}).location(t, http.StatusSeeOther); loc != "/ui/" {
		t.Fatalf("back to another site: %q", loc)
	}
}

// TestConsoleOverviewProcessors: the overview lists every processor from
// its heartbeat (this server's, with its live state) with its host,
// queues and in-flight count, sums their last minute's outcomes as the
// throughput now, and lists the recent failures they report.
func TestConsoleOverviewProcessors(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Config: cmdq.Config{Worker: "ui-worker", HeartbeatInterval: 100 * time.Millisecond}, Setup: func(c *cmdq.Client) error {
		return cmdq.Register(c, func(_ context.Context, r resize, _ *cmdq.Attempt) error {
			if r.N == 13 {
				return cmdq.Permanent(errors.New("resize: unlucky number"))
			}
			return nil
		})
	}})
	ctx := context.Background()
	good := issueParams(t, srv, "images.resize", `{"n":1}`)
	bad := issueParams(t, srv, "images.resize", `{"n":13}`)
	for _, id := range []string{good, bad} {
		if _, err := srv.Client.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t, srv.URL)
	var p page
	deadline := time.Now().Add(30 * time.Second)
	const totals = "1 completed, 0 failed attempts, 1 poisoned since each started."
	for {
		p = b.get("/ui/").want(t, http.StatusOK)
		// Both outcomes in the totals: a heartbeat may carry one before
		// the other (the completion is counted once its message is
		// deleted, after Wait saw the command completed). The throughput
		// "now" is the last interval's (100 ms): a loaded machine's page
		// load may miss the beats that carried them, so the totals are
		// what is waited for.
		if strings.Contains(strings.Join(strings.Fields(text(p.doc)), " "), totals) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // poll interval: the next heartbeat reports the outcomes
	}
	rows := elements(p.doc, "tr", func(n *html.Node) bool { return hasClass(n, "processor") })
	if len(rows) != 1 {
		t.Fatalf("%d processors listed", len(rows))
	}
	c := cells(rows[0])
	if c[0] != "ui-worker (this server)" || !strings.Contains(c[1], "pid ") || c[4] != cmdq.DefaultQueue || !strings.HasSuffix(c[3], "of 32") {
		t.Fatalf("processor row %q", c)
	}
	if got := strings.Join(strings.Fields(text(p.doc)), " "); !strings.Contains(got, totals) {
		t.Fatalf("the overview does not say %q:\n%s", totals, got)
	}
	// The throughput now: the commands' own events of the last minutes,
	// in three parts, whatever the heartbeats carried; it says its age.
	var done, failedN, poisoned int
	if got := strings.Join(strings.Fields(byID(p, "throughput")), " "); func() bool {
		n, err := fmt.Sscanf(got, "%d completed %d failed attempts %d poisoned", &done, &failedN, &poisoned)
		return err != nil || n != 3 || done != 1 || failedN != 1 || poisoned != 1
	}() {
		t.Fatalf("throughput %q, want the stored events: 1 completed, 1 failed attempt (the permanent failure), 1 poisoned", got)
	}
	if age := strings.Join(strings.Fields(byID(p, "throughput-age")), " "); !strings.Contains(age, "from the commands' own events") || !strings.Contains(age, "read ") {
		t.Fatalf("the throughput does not say where it comes from and how old it is: %q", age)
	}
	fails := elements(p.doc, "tr", func(n *html.Node) bool { return hasClass(n, "failure") })
	if len(fails) != 1 || !strings.Contains(text(fails[0]), bad) || !strings.Contains(text(fails[0]), "permanent: resize: unlucky number") {
		t.Fatalf("recent failures: %d", len(fails))
	}
}
