package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// commandRows returns the cells of the recent commands table.
func commandRows(p page) [][]string {
	var out [][]string
	for _, tr := range elements(p.doc, "tr", func(n *html.Node) bool { return hasClass(n, "command") }) {
		var row []string
		for _, td := range elements(tr, "td", func(n *html.Node) bool { return !hasClass(n, "pick") }) {
			row = append(row, strings.TrimSpace(text(td)))
		}
		out = append(out, row)
	}
	return out
}

// tabs returns the state links of the recent commands page: "state count".
func tabs(p page) []string {
	var out []string
	for _, nav := range elements(p.doc, "nav", func(n *html.Node) bool { return hasClass(n, "tabs") }) {
		for _, a := range elements(nav, "a", nil) {
			out = append(out, strings.Join(strings.Fields(text(a)), " "))
		}
	}
	return out
}

// TestDashboardCommandsPage: the recent commands page counts the last
// hour's commands per state, charts the outcomes per minute, lists them
// newest first, filters by state and type, and pages.
func TestDashboardCommandsPage(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	ctx := context.Background()
	appendTo := func(id string, evs ...cmdq.Event) {
		t.Helper()
		srv.Log.Append(t, id, evs...)
	}
	done := issue(t, srv, "Alpha")
	appendTo(done, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1}, cmdq.Event{Kind: cmdq.EventCompleted, Attempt: 1})
	retrying := issue(t, srv, "Alpha")
	appendTo(retrying, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1}, cmdq.Event{Kind: cmdq.EventFailed, Attempt: 1, Error: "<b>boom</b>"})
	poisoned := issue(t, srv, "Beta")
	poisonAt(t, srv, poisoned, time.Now(), "x", cmdq.Event{Kind: cmdq.EventFailed, Attempt: 1, Error: "x"})
	for range 51 {
		issue(t, srv, "Gamma")
	}

	reader := newBrowser(t, srv.URL)
	reader.post("/ui/login", url.Values{"token": {apitest.ReaderToken}}).location(t, http.StatusSeeOther)
	p := reader.get("/ui/commands").want(t, http.StatusOK)
	if got, want := tabs(p), []string{"all 54", "pending 51", "running 0", "retrying 1", "completed 1", "poisoned 1", "discarded 0", "cancelled 0"}; !slices.Equal(got, want) {
		t.Fatalf("state counts %q, want %q", got, want)
	}
	rows := commandRows(p)
	if len(rows) != 50 || nextLink(p) == "" {
		t.Fatalf("%d rows, next %q: want 50 and a next page", len(rows), nextLink(p))
	}
	second := reader.get(nextLink(p)).want(t, http.StatusOK)
	var listed []string
	for _, r := range append(rows, commandRows(second)...) {
		listed = append(listed, r[0])
	}
	// Every command once, newest change first.
	if len(listed) != 54 {
		t.Fatalf("%d commands listed on two pages, want 54", len(listed))
	}
	sts, err := srv.Client.Statuses(ctx, listed...)
	if err != nil || len(sts) != 54 {
		t.Fatalf("statuses: %d %v (a command listed twice?)", len(sts), err)
	}
	for i := 1; i < len(listed); i++ {
		if sts[listed[i]].UpdatedAt.After(sts[listed[i-1]].UpdatedAt) {
			t.Fatalf("listed %s (updated %s) after %s (updated %s): not newest first", listed[i], sts[listed[i]].UpdatedAt, listed[i-1], sts[listed[i-1]].UpdatedAt)
		}
	}
	// Charts: completed, failed attempts, poisoned, each with its total
	// and one bar for the minute that had them.
	var captions []string
	for _, fc := range elements(p.doc, "figcaption", nil) {
		captions = append(captions, strings.Join(strings.Fields(text(fc)), " "))
	}
	if want := []string{"Completed: 1 · peak 1/min", "Failed attempts: 2 · peak 2/min", "Poisoned: 1 · peak 1/min"}; len(captions) != 4 || !slices.Equal(captions[:3], want) ||
		!strings.HasPrefix(captions[3], "Latency, issue → start: p50 ") || !strings.HasSuffix(captions[3], " · 2 first attempts") {
		t.Fatalf("chart captions %q, want %q and the latency of 2 first attempts", captions, want)
	}
	svgs := elements(p.doc, "svg", nil)
	if len(svgs) != 4 {
		t.Fatalf("%d charts, want 4", len(svgs))
	}
	// The latency chart: a p95 and a p50 bar for the minute of the two
	// first attempts.
	title := func(rect *html.Node) string {
		if rect.FirstChild != nil && rect.FirstChild.FirstChild != nil {
			return rect.FirstChild.FirstChild.Data // <rect><title>text
		}
		return ""
	}
	if bars := elements(svgs[3], "rect", nil); len(bars) != 2 || attr(bars[0], "class") != "c-p95" || attr(bars[1], "class") != "c-p50" ||
		!strings.Contains(title(bars[0]), ": p95 ") || !strings.Contains(title(bars[1]), ": p50 ") || !strings.HasSuffix(title(bars[1]), "(2 started)") {
		t.Fatalf("latency chart bars: %d, %q %q", len(bars), title(bars[0]), title(bars[len(bars)-1]))
	}
	// Every chart has a y-axis: its top, middle and 0 (counts: 2, 1, 0).
	for i, ax := range elements(p.doc, "div", func(n *html.Node) bool { return hasClass(n, "yaxis") }) {
		if got := strings.Fields(text(ax)); i < 3 && !slices.Equal(got, []string{"2", "1", "0"}) || len(got) < 3 {
			t.Fatalf("y-axis %d: %q", i, got)
		}
	}
	for _, svg := range svgs[:3] {
		bars := elements(svg, "rect", nil)
		var title string
		if len(bars) == 1 && bars[0].FirstChild != nil && bars[0].FirstChild.FirstChild != nil {
			title = bars[0].FirstChild.FirstChild.Data // <rect><title>text
		}
		if len(bars) != 1 || !regexp.MustCompile(`^\d\d:\d\d UTC: [12] (completed|failed attempts|poisoned)$`).MatchString(title) {
			t.Fatalf("a chart has %d bars (title %q), want 1 with a title", len(bars), title)
		}
	}
	// Filters: a state, a type; the counts keep every state of the type.
	// The created column is relative: "just now", or seconds on a loaded
	// machine.
	justCreated := regexp.MustCompile(`^(just now|[1-9]\d? s ago)$`)
	f := reader.get("/ui/commands?state=retrying").want(t, http.StatusOK)
	// Columns: ID, type, state, attempts, created, updated, params, last error.
	if r := commandRows(f); len(r) != 1 || r[0][0] != retrying || r[0][2] != "retrying" || !justCreated.MatchString(r[0][4]) || r[0][6] != `{"n":1}` || !strings.Contains(r[0][7], "<b>boom</b>") {
		t.Fatalf("retrying rows %q", r)
	}
	// The type filter takes the start of a type, in any case.
	for _, q := range []string{"Alpha", "alp", "ALPH"} {
		f = reader.get("/ui/commands?type="+q).want(t, http.StatusOK)
		if got := tabs(f); got[0] != "all 2" || got[3] != "retrying 1" || got[4] != "completed 1" || len(commandRows(f)) != 2 {
			t.Fatalf("type %s: tabs %q, rows %q", q, got, commandRows(f))
		}
	}
	// The breakdown by type counts each type's commands and outcomes.
	byType := map[string][]string{}
	for _, tr := range elements(p.doc, "table", func(n *html.Node) bool { return hasClass(n, "bytype") }) {
		for _, row := range elements(tr, "tr", func(n *html.Node) bool { return hasClass(n, "group") }) {
			c := cells(row)
			byType[c[0]] = c[1:]
		}
	}
	if !slices.Equal(byType["Alpha"][:4], []string{"2", "1", "1", "0"}) || !slices.Equal(byType["Beta"][:4], []string{"1", "0", "1", "1"}) || byType["Gamma"][0] != "51" {
		t.Fatalf("by type: %q", byType)
	}
	// Search by the start of an ID and by correlation ID.
	tagged, err := srv.Client.IssueRaw(ctx, cmdq.Raw{Type: "Delta", Params: []byte(`{}`), CorrelationID: "order-42"})
	if err != nil {
		t.Fatal(err)
	}
	if r := commandRows(reader.get("/ui/commands?correlation=order-42").want(t, http.StatusOK)); len(r) != 1 || r[0][0] != tagged.ID {
		t.Fatalf("correlation order-42: %q", r)
	}
	if r := commandRows(reader.get("/ui/commands?range=7d&id="+strings.ToUpper(tagged.ID[:13])).want(t, http.StatusOK)); len(r) != 1 || r[0][0] != tagged.ID {
		t.Fatalf("ID prefix %s: %q", tagged.ID[:13], r)
	}
	contains(t, reader.get("/ui/commands?range=forever").want(t, http.StatusBadRequest), "not a range of this page")
	contains(t, reader.get("/ui/commands?id=xyz").want(t, http.StatusBadRequest), "cannot start a command ID")
	contains(t, reader.get("/ui/commands?state=exploded").want(t, http.StatusBadRequest), "not a command state")
	contains(t, reader.get("/ui/commands?type=%3Cscript%3E").want(t, http.StatusBadRequest), "not a command type name")
	if live := elements(reader.get("/ui/commands?range=7d").want(t, http.StatusOK).doc, "div", func(n *html.Node) bool { return attr(n, "id") == "live" }); attr(live[0], "data-refresh") != "300" {
		t.Fatal("the 7-day view does not refresh every 5 min")
	}
	// The page refreshes itself, and the overview links to it.
	if live := elements(p.doc, "div", func(n *html.Node) bool { return attr(n, "id") == "live" }); len(live) != 1 || attr(live[0], "data-refresh") != "10" {
		t.Fatal("the commands page has no live part refreshing every 10 s")
	}
	contains(t, reader.get("/ui/").want(t, http.StatusOK), "Throughput now", "No processor is running")
}

// TestDashboardRunningFromInFlight: a command whose handler runs on this
// server's processor shows as running on its page and in the listing
// although its stored state is still pending (the started event is
// written lazily); the page's live feed says when to refresh, as the
// handler starts and as it ends.
func TestDashboardRunningFromInFlight(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := apitest.Start(t, apitest.Options{
		// No storage read finds a change within the test: only pushes do.
		Config: cmdq.Config{WaitPollInterval: time.Hour, StartedWriteDelay: time.Hour},
		Setup: func(c *cmdq.Client) error {
			return cmdq.Register(c, func(ctx context.Context, _ alpha, _ *cmdq.Attempt) error {
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		},
	})
	b := newBrowser(t, srv.URL)
	id := issue(t, srv, "Alpha")
	waitFor(t, 30*time.Second, "the handler runs", func() bool { _, ok := srv.Client.Running(id); return ok })
	if st, err := srv.Client.Get(context.Background(), id); err != nil || st.State != cmdq.StatePending {
		t.Fatalf("stored state %s %v, want pending (started not written)", st.State, err)
	}
	p := b.get("/ui/commands/"+id).want(t, http.StatusOK)
	contains(t, p, "Status running (stored: pending)", "attempt 1 has been running on this server's processor")
	if strings.Contains(text(p.doc), "Waiting for a processor") {
		t.Fatal("a running command is explained as waiting")
	}
	if r := commandRows(b.get("/ui/commands").want(t, http.StatusOK)); len(r) != 1 || !strings.HasPrefix(r[0][2], "running since ") {
		t.Fatalf("listing: %q", r)
	}
	live := elements(p.doc, "div", func(n *html.Node) bool { return attr(n, "id") == "live" })
	if len(live) != 1 || attr(live[0], "data-stream") != "/ui/commands/"+id+"/live" {
		t.Fatal("the page of a running command has no live feed")
	}
	// The feed: alive at once, change when the handler ends (the outcome
	// is pushed by the server's processor).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, ms := apitest.SSE(t, ctx, srv.URL+"/ui/commands/"+id+"/live", "")
	if r.StatusCode != http.StatusOK || r.Header.Get("Content-Type") != "text/event-stream" || r.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("live feed: %d %q", r.StatusCode, r.Header.Get("Content-Type"))
	}
	if m := apitest.NextSSE(t, ms); m.Event != "alive" {
		t.Fatalf("first message %+v, want alive", m)
	}
	close(release)
	if m := apitest.NextSSE(t, ms); m.Event != "change" || !strings.HasPrefix(m.Data, `"`) {
		t.Fatalf("after the outcome %+v, want change", m)
	}
	p = b.get("/ui/commands/"+id).want(t, http.StatusOK)
	contains(t, p, "Status completed")
	if live := elements(p.doc, "div", func(n *html.Node) bool { return attr(n, "id") == "live" }); attr(live[0], "data-stream") != "" || attr(live[0], "data-refresh") != "0" {
		t.Fatal("a completed command's page still refreshes")
	}
	// A completed command's feed says there is nothing to follow.
	if r, _ := apitest.SSE(t, ctx, srv.URL+"/ui/commands/"+id+"/live", ""); r.StatusCode != http.StatusNoContent {
		t.Fatalf("live feed of a completed command: %d, want 204", r.StatusCode)
	}
}

// TestDashboardLiveFeedNeedsReader: the live feed asks for a login like
// the page, and a change made by another process reaches it.
func TestDashboardLiveFeedNeedsReader(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	id := issue(t, srv, "Alpha")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/ui/commands/"+id+"/live", nil)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login") {
		t.Fatalf("live feed without a session: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if r, _ := apitest.SSE(t, ctx, srv.URL+"/ui/commands/"+id+"/live", "", "Authorization", "Bearer "+apitest.IssuerToken); r.StatusCode != http.StatusForbidden {
		t.Fatalf("live feed for an issuer: %d", r.StatusCode)
	}
	_, ms := apitest.SSE(t, ctx, srv.URL+"/ui/commands/"+id+"/live", "", "Authorization", "Bearer "+apitest.ReaderToken)
	if m := apitest.NextSSE(t, ms); m.Event != "alive" {
		t.Fatalf("first message %+v", m)
	}
	// Another process (srv.Log: nothing pushed) poisons it: the feed's
	// storage read finds it (1 s later at most).
	poisonAt(t, srv, id, time.Now(), "x")
	for {
		m := apitest.NextSSE(t, ms)
		if m.Event == "change" {
			break
		}
		if m.Event != "alive" {
			t.Fatalf("unexpected %+v", m)
		}
	}
}

// alpha is the command type of the live feed tests.
type alpha struct {
	N int `json:"n"`
}

func (alpha) CommandType() string { return "Alpha" }
