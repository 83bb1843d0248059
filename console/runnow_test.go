package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// TestConsoleRunNow: a scheduled command's page says when it runs and
// offers Run now… to an operator (not to a reader, who is refused: 403);
// the confirmation page names it and its button makes it due now (a
// requeued event by ui:<who>, state pending), after which the page says
// so and offers no Run now. A retrying command waiting for its retry is
// offered it too; a pending one is not, and its POST is a 409 page.
func TestConsoleRunNow(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	ctx := context.Background()
	res, err := srv.Client.IssueRaw(ctx, cmdq.Raw{Type: "Alpha", Params: []byte(`{"n":1}`), Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	id := res.ID
	op := newBrowser(t, srv.URL)
	op.post("/ui/login", url.Values{"token": {apitest.OperatorToken}}).location(t, http.StatusSeeOther)
	reader := newBrowser(t, srv.URL)
	reader.post("/ui/login", url.Values{"token": {apitest.ReaderToken}}).location(t, http.StatusSeeOther)

	rp := reader.get("/ui/commands/"+id).want(t, http.StatusOK)
	if hasRunNowLink(rp) {
		t.Fatal("a reader is offered Run now")
	}
	contains(t, rp, "scheduled", "Runs at")
	contains(t, op.get("/ui/commands?state=scheduled").want(t, http.StatusOK), id) // the scheduled tab lists it
	p := op.get("/ui/commands/"+id).want(t, http.StatusOK)
	if !hasRunNowLink(p) {
		t.Fatal("an operator is not offered Run now on a scheduled command")
	}
	confirm := op.get("/ui/commands/"+id+"/run-now").want(t, http.StatusOK)
	contains(t, confirm, "Run this command now?", "due at once", id)
	tok := csrf(t, confirm)
	reader.get("/ui/commands/"+id+"/run-now").want(t, http.StatusForbidden)
	reader.post("/ui/commands/"+id+"/run-now", url.Values{"csrf": {csrf(t, rp)}}).want(t, http.StatusForbidden)
	op.post("/ui/commands/"+id+"/run-now", url.Values{}).want(t, http.StatusForbidden) // no CSRF token
	if st, _ := srv.Client.Get(ctx, id); st.State != cmdq.StateScheduled {
		t.Fatalf("refused run-nows changed the command: %s", st.State)
	}
	loc := op.post("/ui/commands/"+id+"/run-now", url.Values{"csrf": {tok}}).location(t, http.StatusSeeOther)
	if loc != "/ui/commands/"+id {
		t.Fatalf("run-now redirects to %q", loc)
	}
	p = op.get(loc).want(t, http.StatusOK)
	if f := flashText(p); !strings.HasPrefix(f, "Due now since ") {
		t.Fatalf("flash %q", f)
	}
	if hasRunNowLink(p) {
		t.Fatal("a command due now still offers Run now")
	}
	evs, err := srv.Client.Events(ctx, id)
	if err != nil || evs[len(evs)-1].Kind != cmdq.EventRequeued || !strings.HasPrefix(evs[len(evs)-1].By, "ui:token:") || evs[len(evs)-1].RunAt.IsZero() {
		t.Fatalf("events %+v %v: want a requeued event by ui:token:… with runAt", evs, err)
	}
	if st, _ := srv.Client.Get(ctx, id); st.State != cmdq.StatePending {
		t.Fatalf("after run-now: %s, want pending", st.State)
	}

	retrying := issue(t, srv, "Alpha")
	srv.Log.Append(t, retrying, cmdq.Event{Kind: cmdq.EventStarted, Attempt: 1, Worker: "w"},
		cmdq.Event{Kind: cmdq.EventFailed, Attempt: 1, Worker: "w", Error: "boom", RunAt: time.Now().Add(time.Hour)})
	if !hasRunNowLink(op.get("/ui/commands/"+retrying).want(t, http.StatusOK)) {
		t.Fatal("an operator is not offered Run now on a retrying command")
	}
	pending := issue(t, srv, "Alpha")
	if hasRunNowLink(op.get("/ui/commands/"+pending).want(t, http.StatusOK)) {
		t.Fatal("a pending command offers Run now")
	}
	contains(t, op.get("/ui/commands/"+pending+"/run-now").want(t, http.StatusOK), "Nothing to run now")
	contains(t, op.post("/ui/commands/"+pending+"/run-now", url.Values{"csrf": {tok}}).want(t, http.StatusConflict), "not waiting")
}

func hasRunNowLink(p page) bool {
	return len(elements(p.doc, "a", func(n *html.Node) bool { return attr(n, "id") == "run-now" })) > 0
}
