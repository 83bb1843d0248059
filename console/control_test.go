package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// TestConsoleCancel: a command page offers Cancel… to an operator while the
// command has not ended; the confirmation page names it and its button
// cancels it (a cancelled event by ui:<who>), after which the page says so
// and offers no Cancel. A reader sees no Cancel and is refused (403); a
// completed command cannot be cancelled (409 page).
func TestConsoleCancel(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	ctx := context.Background()
	id := issue(t, srv, "Alpha")
	op := newBrowser(t, srv.URL)
	op.post("/ui/login", url.Values{"token": {apitest.OperatorToken}}).location(t, http.StatusSeeOther)
	reader := newBrowser(t, srv.URL)
	reader.post("/ui/login", url.Values{"token": {apitest.ReaderToken}}).location(t, http.StatusSeeOther)

	if hasCancelLink(reader.get("/ui/commands/"+id).want(t, http.StatusOK)) {
		t.Fatal("a reader is offered Cancel")
	}
	p := op.get("/ui/commands/"+id).want(t, http.StatusOK)
	if !hasCancelLink(p) {
		t.Fatal("an operator is not offered Cancel on a pending command")
	}
	confirm := op.get("/ui/commands/"+id+"/cancel").want(t, http.StatusOK)
	contains(t, confirm, "Cancel this command?", "Cancelling cannot be undone", id)
	tok := csrf(t, confirm)
	reader.post("/ui/commands/"+id+"/cancel", url.Values{"csrf": {csrf(t, reader.get("/ui/commands/"+id).want(t, http.StatusOK))}}).want(t, http.StatusForbidden)
	op.post("/ui/commands/"+id+"/cancel", url.Values{}).want(t, http.StatusForbidden) // no CSRF token
	if st, _ := srv.Client.Get(ctx, id); st.State != cmdq.StatePending {
		t.Fatalf("refused cancels changed the command: %s", st.State)
	}
	loc := op.post("/ui/commands/"+id+"/cancel", url.Values{"csrf": {tok}}).location(t, http.StatusSeeOther)
	if loc != "/ui/commands/"+id {
		t.Fatalf("cancel redirects to %q", loc)
	}
	p = op.get(loc).want(t, http.StatusOK)
	if f := flashText(p); !strings.HasPrefix(f, "Cancelled at ") {
		t.Fatalf("flash %q", f)
	}
	contains(t, p, "cancelled", "ui:token:")
	if hasCancelLink(p) {
		t.Fatal("a cancelled command still offers Cancel")
	}
	evs, err := srv.Client.Events(ctx, id)
	if err != nil || evs[len(evs)-1].Kind != cmdq.EventCancelled || !strings.HasPrefix(evs[len(evs)-1].By, "ui:token:") {
		t.Fatalf("events %+v %v: want a cancelled event by ui:token:…", evs, err)
	}

	done := issue(t, srv, "Alpha")
	srv.Log.Append(t, done, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1, Worker: "w"}, cmdq.Event{Kind: cmdq.EventCompleted, Attempt: 1, Worker: "w"})
	contains(t, op.get("/ui/commands/"+done+"/cancel").want(t, http.StatusOK), "Nothing to cancel")
	contains(t, op.post("/ui/commands/"+done+"/cancel", url.Values{"csrf": {tok}}).want(t, http.StatusConflict), "is completed")
}

func hasCancelLink(p page) bool {
	return len(elements(p.doc, "a", func(n *html.Node) bool { return attr(n, "id") == "cancel" })) > 0
}

// TestConsoleBulkCancel: the commands view's "Cancel selected…" asks
// first, listing the selected commands that can be cancelled and leaving
// out those that ended; its button cancels them and says how many.
func TestConsoleBulkCancel(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	a, b := issue(t, srv, "Alpha"), issue(t, srv, "Alpha")
	done := issue(t, srv, "Alpha")
	srv.Log.Append(t, done, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1, Worker: "w"}, cmdq.Event{Kind: cmdq.EventCompleted, Attempt: 1, Worker: "w"})
	br := newBrowser(t, srv.URL)
	list := br.get("/ui/commands").want(t, http.StatusOK)
	boxes := elements(list.doc, "input", func(n *html.Node) bool { return attr(n, "name") == "id" && attr(n, "form") == "bulk" })
	if len(boxes) != 2 {
		t.Fatalf("%d selection boxes, want 2 (the completed command has none)", len(boxes))
	}
	tok := csrf(t, list)
	review := br.post("/ui/commands/bulk", url.Values{"csrf": {tok}, "id": {a, b, done}}).want(t, http.StatusOK)
	contains(t, review, "Cancel 2 commands?", "Ended already, so left out", done)
	var ids []string
	for _, in := range elements(review.doc, "input", func(n *html.Node) bool { return attr(n, "name") == "id" && attr(n, "type") == "hidden" }) {
		ids = append(ids, attr(in, "value"))
	}
	if len(ids) != 2 {
		t.Fatalf("the confirmation posts %v, want the two pending commands", ids)
	}
	loc := br.post("/ui/commands/bulk/run", url.Values{"csrf": {csrf(t, review)}, "id": ids}).location(t, http.StatusSeeOther)
	if f := flashText(br.get(loc).want(t, http.StatusOK)); !strings.HasPrefix(f, "Cancelled 2 of 2 at ") {
		t.Fatalf("flash %q", f)
	}
	for _, id := range []string{a, b} {
		if st, _ := srv.Client.Get(ctx, id); st.State != cmdq.StateCancelled {
			t.Fatalf("%s is %s, want cancelled", id, st.State)
		}
	}
	br.post("/ui/commands/bulk", url.Values{"csrf": {tok}}).want(t, http.StatusBadRequest)
}

// TestConsoleQueues: the queues view lists the queue with its depth and
// state; an operator's Pause and Resume change it (by ui:<who>), a reader
// gets no buttons and is refused (403).
func TestConsoleQueues(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	issue(t, srv, "Alpha")
	op := newBrowser(t, srv.URL)
	op.post("/ui/login", url.Values{"token": {apitest.OperatorToken}}).location(t, http.StatusSeeOther)
	reader := newBrowser(t, srv.URL)
	reader.post("/ui/login", url.Values{"token": {apitest.ReaderToken}}).location(t, http.StatusSeeOther)

	p := op.get("/ui/queues").want(t, http.StatusOK)
	if rows := queueRows(p); len(rows) != 1 || rows[0][0] != "commands" || rows[0][1] != "1" || rows[0][2] != "running" || rows[0][5] != "Pause" {
		t.Fatalf("queues %q", rows)
	}
	rp := reader.get("/ui/queues").want(t, http.StatusOK)
	if rows := queueRows(rp); len(rows) != 1 || len(rows[0]) != 5 {
		t.Fatalf("a reader's queues %q: want no action column", rows)
	}
	reader.post("/ui/queues/commands/pause", url.Values{"csrf": {csrf(t, rp)}}).want(t, http.StatusForbidden)
	loc := op.post("/ui/queues/commands/pause", url.Values{"csrf": {csrf(t, p)}}).location(t, http.StatusSeeOther)
	p = op.get(loc).want(t, http.StatusOK)
	if f := flashText(p); !strings.HasPrefix(f, "Queue commands was paused at ") {
		t.Fatalf("flash %q", f)
	}
	if rows := queueRows(p); rows[0][2] != "paused" || !strings.HasPrefix(rows[0][4], "ui:token:") || rows[0][5] != "Resume" {
		t.Fatalf("after the pause %q", rows)
	}
	if !srv.Client.Health().Healthy() {
		t.Fatal("unhealthy")
	}
	op.post("/ui/queues/nobody-knows/pause", url.Values{"csrf": {csrf(t, p)}}).want(t, http.StatusNotFound)
	op.post("/ui/queues/commands/resume", url.Values{"csrf": {csrf(t, p)}}).location(t, http.StatusSeeOther)
	if rows := queueRows(op.get("/ui/queues").want(t, http.StatusOK)); rows[0][2] != "running" {
		t.Fatalf("after the resume %q", rows)
	}
}

// queueRows returns the queues view's rows: queue, depth, state, since,
// by and (for operators) the button.
func queueRows(p page) [][]string {
	var out [][]string
	for _, tr := range elements(p.doc, "tr", func(n *html.Node) bool { return hasClass(n, "queue") }) {
		var row []string
		for _, c := range cells(tr) {
			row = append(row, strings.TrimSpace(c))
		}
		out = append(out, row)
	}
	return out
}
