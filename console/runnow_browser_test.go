package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// TestBrowserRunNow walks through Run now in a real browser (headless
// Chromium, 1280x800): an operator opens a command scheduled an hour
// ahead (its page says when it runs), presses Run now…, confirms on the
// confirmation page, and lands on the command's page, which says it is
// due now; the demo handler runs it and the page, following its live
// feed, shows it completed.
func TestBrowserRunNow(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), Setup: registerDemo})
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(browserDataDir(t)),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 800))
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Run(browser); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}

	id := uuid.NewString()
	r := do(t, http.MethodPost, srv.URL+"/v1/commands", apitest.IssuerToken, `{"id":"`+id+`","type":"demo.sleep","params":{"ms":10},"delay":"1h"}`)
	if r.code != http.StatusAccepted || !strings.Contains(r.body, `"status":"scheduled"`) {
		t.Fatalf("issue: %d %s", r.code, r.body)
	}

	op := newTab(t, browser, "operator")
	op.run(chromedp.Navigate(srv.URL+"/ui/login"), chromedp.WaitVisible(`input[name=token]`, chromedp.ByQuery),
		chromedp.SendKeys(`input[name=token]`, apitest.OperatorToken, chromedp.ByQuery),
		chromedp.Submit(`input[name=token]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#live`, chromedp.ByQuery))
	op.run(chromedp.Navigate(srv.URL+"/ui/commands/"+id), chromedp.WaitVisible(`#run-now`, chromedp.ByQuery))
	if txt := op.text(); !strings.Contains(txt, "scheduled") || !strings.Contains(txt, "Runs at") {
		t.Fatalf("the scheduled command's page:\n%s", txt)
	}
	op.step("press Run now…", chromedp.Click(`#run-now`, chromedp.ByQuery))
	op.run(chromedp.WaitVisible(`button.primary`, chromedp.ByQuery))
	if txt := op.text(); !strings.Contains(txt, "Run this command now?") || !strings.Contains(txt, id) {
		t.Fatalf("the confirmation page:\n%s", txt)
	}
	if st, err := srv.Client.Get(context.Background(), id); err != nil || st.State != cmdq.StateScheduled {
		t.Fatalf("before confirming: %+v %v, want still scheduled", st, err)
	}
	op.step("confirm", chromedp.Click(`button.primary`, chromedp.ByQuery))
	op.run(chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	if !strings.Contains(op.text(), "Due now since") {
		t.Fatalf("after confirming, the command page:\n%s", op.text())
	}
	op.waitJS("the page shows the command completed", `document.getElementById("status").textContent.trim() === "completed"`, 60*time.Second)
	evs, err := srv.Client.Events(context.Background(), id)
	if err != nil || len(evs) < 2 || evs[1].Kind != cmdq.EventRequeued || !strings.HasPrefix(evs[1].By, "ui:") {
		t.Fatalf("events %+v %v, want a requeued event by ui:…", evs, err)
	}
	if errs := op.consoleErrors(); len(errs) > 0 {
		t.Fatalf("browser console errors: %q", errs)
	}
}
