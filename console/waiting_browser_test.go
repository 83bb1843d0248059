package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// TestBrowserCommandWaitsInPausedQueue: in a real browser (headless
// Chromium), an operator pauses the queue on the Queues page; the page of
// a command issued then says why it waits: its queue is paused, by whom
// (the operator, as GET /v1/queues says) and since when, and that it
// starts when the queue is resumed, with a link to Queues. The operator
// follows the link and resumes the queue; the command runs, and its page
// shows it completed, waiting for nothing. The page passes the layout
// checks (390 px, contrast, light and dark) and is photographed.
func TestBrowserCommandWaitsInPausedQueue(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	dir := artifactsDir(t)
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), Setup: registerDemo})
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(browserDataDir(t)),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1280, 800))
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Run(browser); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}

	op := newTab(t, browser, "operator")
	op.run(chromedp.Navigate(srv.URL+"/ui/login"), chromedp.WaitVisible(`input[name=token]`, chromedp.ByQuery),
		chromedp.SendKeys(`input[name=token]`, apitest.OperatorToken, chromedp.ByQuery),
		chromedp.Submit(`input[name=token]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#live`, chromedp.ByQuery))
	op.run(chromedp.Navigate(srv.URL+"/ui/queues"), chromedp.WaitVisible(`tr.queue`, chromedp.ByQuery),
		chromedp.Click(`form[action$="/queues/commands/pause"] button`, chromedp.ByQuery), chromedp.WaitVisible(`p.flash`, chromedp.ByQuery))
	var qs client.QueuesResponse
	if r := do(t, http.MethodGet, srv.URL+"/v1/queues", apitest.ReaderToken, ""); r.code != http.StatusOK || json.Unmarshal([]byte(r.body), &qs) != nil {
		t.Fatalf("GET /v1/queues: %d %s", r.code, r.body)
	}
	i := slices.IndexFunc(qs.Queues, func(q cmdq.QueueInfo) bool { return q.Name == cmdq.DefaultQueue })
	if i < 0 || !qs.Queues[i].Paused || !strings.HasPrefix(qs.Queues[i].By, "ui:") {
		t.Fatalf("queues %+v: want commands paused by ui:…", qs.Queues)
	}
	pause := qs.Queues[i]

	id := uuid.NewString()
	if r := do(t, http.MethodPost, srv.URL+"/v1/commands", apitest.IssuerToken, `{"id":"`+id+`","type":"demo.sleep","params":{"ms":10}}`); r.code != http.StatusAccepted {
		t.Fatalf("issue: %d %s", r.code, r.body)
	}
	op.run(chromedp.Navigate(srv.URL+"/ui/commands/"+id), chromedp.WaitVisible(`#waiting`, chromedp.ByQuery))
	var reason string
	op.eval(`document.getElementById("waiting").dataset.reason`, &reason)
	want := "Waiting: its queue commands is paused (by " + pause.By + " since " + pause.Since.UTC().Format("2006-01-02 15:04:05.000Z") +
		"); it starts when the queue is resumed (Queues)."
	if got := op.textOf("#waiting"); reason != "paused" || got != want {
		t.Fatalf("the waiting command's page says (%s) %q, want (paused) %q", reason, got, want)
	}
	if st := op.textOf("#status"); st != "pending" {
		t.Fatalf("status %q, want pending", st)
	}
	op.shoot(dir, "command-waiting-paused", summaryCheck)

	// The link leads to Queues, where the operator resumes the queue.
	op.run(chromedp.Click(`#waiting a[href$="/queues"]`, chromedp.ByQuery))
	op.waitURL("/ui/queues")
	op.run(chromedp.Click(`form[action$="/queues/commands/resume"] button`, chromedp.ByQuery), chromedp.WaitVisible(`p.flash`, chromedp.ByQuery))
	op.run(chromedp.Navigate(srv.URL+"/ui/commands/"+id), chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	op.waitJS("the page shows the command completed, waiting for nothing",
		`document.getElementById("status").textContent.trim() === "completed" && !document.getElementById("waiting")`, 30*time.Second)
	if errs := op.consoleErrors(); len(errs) > 0 {
		t.Fatalf("browser console errors: %q", errs)
	}
}
