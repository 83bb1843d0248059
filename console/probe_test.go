package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/net/html"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/console"
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

// TestShowBidi: the rendered page's text shows every bidi control as its
// escape; tags, attribute values and other text are left as they are.
func TestShowBidi(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"<p>plain ünïcode ✓</p>", "<p>plain ünïcode ✓</p>"},
		{"<p>abc\u202edcba</p>", `<p>abc\u202edcba</p>`},
		{"<td>\u2066x\u2069 \u200e\u200f\u061c \u202a\u202b\u202c\u202d</td>", `<td>\u2066x\u2069 \u200e\u200f\u061c \u202a\u202b\u202c\u202d</td>`},
		{"<input value=\"a\u202eb\">\u202e", "<input value=\"a\u202eb\">" + `\u202e`},
		{"<pre>\u2028 \u2060 \u2070</pre>", "<pre>\u2028 \u2060 \u2070</pre>"},
	} {
		if got := string(console.ShowBidi([]byte(c.in))); got != c.want {
			t.Errorf("ShowBidi(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// bidiNote records an output with a bidi control in it.
type bidiNote struct {
	Name string `json:"name"`
}

func (bidiNote) CommandType() string { return "console.bidi" }

// bidiFail fails with a bidi control in its error.
type bidiFail map[string]int

func (bidiFail) CommandType() string { return "console.bidifail" }

// TestBrowserShowsBidiControls (issue 32, finding 10): a right-to-left
// override (U+202E) or an isolate (U+2066) from an issuer's params — a
// value and a key —, from a handler's output, an error and a correlation
// ID is shown escaped (\u202e) on the command pages, the commands view and
// the poison list, never acting on the text, in headless Chromium.
func TestBrowserShowsBidiControls(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	srv := apitest.Start(t, apitest.Options{Setup: func(c *cmdq.Client) error {
		if err := cmdq.Register(c, func(_ context.Context, n bidiNote, run *cmdq.Attempt) error {
			return run.SetOutput(map[string]string{"said": "out\u202eput"})
		}); err != nil {
			return err
		}
		return cmdq.Register(c, func(context.Context, bidiFail, *cmdq.Attempt) error {
			return cmdq.Permanent(errors.New("err\u202eor"))
		})
	}})
	ctx := context.Background()
	done, err := srv.Client.IssueRaw(ctx, cmdq.Raw{Type: "console.bidi", Params: []byte("{\"name\":\"gpj.\u202eexe\"}"), CorrelationID: "corr\u2066x"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, srv, done.ID, cmdq.StateCompleted, 30*time.Second)
	poisoned, err := srv.Client.IssueRaw(ctx, cmdq.Raw{Type: "console.bidifail", Params: []byte("{\"\u202ekey\":1}")})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, srv, poisoned.ID, cmdq.StatePoisoned, 30*time.Second)

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(browserDataDir(t)),
		chromedp.Flag("disable-dev-shm-usage", true))
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Run(browser); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	tb := newTab(t, browser, "reader")
	for _, c := range []struct {
		path string
		want []string
	}{
		{"/ui/commands/" + done.ID, []string{`gpj.\u202eexe`, `out\u202eput`, `corr\u2066x`}},
		{"/ui/commands/" + poisoned.ID, []string{`\u202ekey`, `err\u202eor`}},
		{"/ui/poison", []string{`err\u202eor`}},
		{"/ui/commands", []string{`gpj.\u202eexe`, `\u202ekey`, `err\u202eor`}},
	} {
		tb.run(chromedp.Navigate(srv.URL+c.path), chromedp.WaitReady(`main`, chromedp.ByQuery))
		var shown string
		tb.eval(`document.body.innerText`, &shown)
		if strings.ContainsAny(shown, "\u202e\u2066") {
			t.Errorf("%s shows a raw bidi control:\n%q", c.path, shown)
		}
		for _, w := range c.want {
			if !strings.Contains(shown, w) {
				t.Errorf("%s does not show %q:\n%s", c.path, w, shown)
			}
		}
	}
	if errs := tb.consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}
