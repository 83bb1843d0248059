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
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// TestConsoleBulkFoldsUpperCaseIDs (issue 32, finding 9): the bulk forms
// read an ID in upper case as the lower-case ID, as the single routes and
// the API do. The poison list's bulk action used to report the entry gone
// and the commands view's bulk cancel answered 400. Real form posts to the
// real console, on both stores.
func TestConsoleBulkFoldsUpperCaseIDs(t *testing.T) {
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		srv := apitest.Start(t, apitest.Options{Store: env.Store, Prefix: env.Prefix})
		ctx := context.Background()
		br := newBrowser(t, srv.URL)
		br.headers["Sec-Fetch-Site"] = "same-origin"
		hidden := func(p page) []string {
			var ids []string
			for _, in := range elements(p.doc, "input", func(n *html.Node) bool { return attr(n, "name") == "id" && attr(n, "type") == "hidden" }) {
				ids = append(ids, attr(in, "value"))
			}
			return ids
		}

		// The poison list's bulk requeue.
		p1, p2 := issue(t, srv, "Alpha"), issue(t, srv, "Alpha")
		poisonAt(t, srv, p1, time.Now(), "x")
		poisonAt(t, srv, p2, time.Now(), "y")
		list := br.get("/ui/poison").want(t, http.StatusOK)
		review := br.post("/ui/poison/bulk", url.Values{"csrf": {csrf(t, list)}, "do": {"requeue"}, "id": {strings.ToUpper(p1), p2}}).want(t, http.StatusOK)
		contains(t, review, "Requeue 2 commands?")
		if ids := hidden(review); len(ids) != 2 || ids[0] != p1 && ids[1] != p1 {
			t.Fatalf("the confirmation posts %v, want %s and %s", ids, p1, p2)
		}
		loc := br.post("/ui/poison/bulk/run", url.Values{"csrf": {csrf(t, review)}, "do": {"requeue"}, "id": {strings.ToUpper(p1), strings.ToUpper(p2)}}).location(t, http.StatusSeeOther)
		if f := flashText(br.get(loc).want(t, http.StatusOK)); !strings.HasPrefix(f, "Requeued 2 of 2 at ") {
			t.Fatalf("flash %q", f)
		}
		for _, id := range []string{p1, p2} {
			if st, _ := srv.Client.Get(ctx, id); st.State != cmdq.StatePending {
				t.Fatalf("%s is %s after the bulk requeue, want pending", id, st.State)
			}
		}

		// The commands view's bulk cancel.
		c1 := issue(t, srv, "Alpha")
		cl := br.get("/ui/commands").want(t, http.StatusOK)
		review = br.post("/ui/commands/bulk", url.Values{"csrf": {csrf(t, cl)}, "id": {strings.ToUpper(c1)}}).want(t, http.StatusOK)
		contains(t, review, "Cancel 1 command?")
		loc = br.post("/ui/commands/bulk/run", url.Values{"csrf": {csrf(t, review)}, "id": {strings.ToUpper(c1)}}).location(t, http.StatusSeeOther)
		if f := flashText(br.get(loc).want(t, http.StatusOK)); !strings.HasPrefix(f, "Cancelled 1 of 1 at ") {
			t.Fatalf("flash %q", f)
		}
		if st, _ := srv.Client.Get(ctx, c1); st.State != cmdq.StateCancelled {
			t.Fatalf("%s is %s after the bulk cancel, want cancelled", c1, st.State)
		}
	})
}
