package console_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// report records an output: Rows rows of a report (a large one is cut on
// the page).
type report struct {
	Rows int `json:"rows"`
}

func (report) CommandType() string { return "console.report" }

// TestBrowserCommandOutput: a completed command's page shows its recorded
// output (Run.SetOutput) indented, open when small; a large one is
// collapsed and its size given; the page keeps within a phone's width
// with either (the layout check), in headless Chromium.
func TestBrowserCommandOutput(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	srv := apitest.Start(t, apitest.Options{Setup: func(c *cmdq.Client) error {
		return cmdq.Register(c, func(_ context.Context, r report, run *cmdq.Attempt) error {
			rows := make([]map[string]any, r.Rows)
			for i := range rows {
				rows[i] = map[string]any{"row": i, "sku": "SKU-" + strings.Repeat("9", 20)}
			}
			return run.SetOutput(map[string]any{"orderNumber": 4711, "rows": rows})
		})
	}})
	ctx := context.Background()
	small, err := srv.Client.Issue(ctx, report{Rows: 1})
	if err != nil {
		t.Fatal(err)
	}
	large, err := srv.Client.Issue(ctx, report{Rows: 400})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{small.ID, large.ID} {
		waitState(t, srv, id, cmdq.StateCompleted, 30*time.Second)
	}

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(browserDataDir(t)),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(390, 844))
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Run(browser); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	tb := newTab(t, browser, "reader")
	tb.run(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(1), chromedp.EmulateMobile))

	tb.run(chromedp.Navigate(srv.URL+"/ui/commands/"+small.ID), chromedp.WaitVisible(`#output pre`, chromedp.ByQuery))
	var shown string
	var open bool
	tb.eval(`document.querySelector("#output pre").innerText`, &shown)
	tb.eval(`document.querySelector("#output").open`, &open)
	if !open || !strings.Contains(shown, `"orderNumber": 4711`) || !strings.Contains(shown, `"sku": "SKU-`) {
		t.Errorf("small output: open %v, shown %q; want it open and indented", open, shown)
	}
	var problems string
	tb.eval(layoutCheck(390), &problems)
	if problems != "" {
		t.Errorf("small output page at 390 px: %s", problems)
	}

	tb.run(chromedp.Navigate(srv.URL+"/ui/commands/"+large.ID), chromedp.WaitReady(`#output`, chromedp.ByQuery))
	var summary string
	tb.eval(`document.querySelector("#output summary").innerText`, &summary)
	tb.eval(`document.querySelector("#output").open`, &open)
	st, err := srv.Client.Get(ctx, large.ID)
	if err != nil {
		t.Fatal(err)
	}
	if open || !strings.Contains(summary, "Output (") || !strings.Contains(summary, strconv.Itoa(len(st.Output))+" bytes") {
		t.Errorf("large output (%d bytes): open %v, summary %q; want it collapsed with its size", len(st.Output), open, summary)
	}
	tb.run(chromedp.Click(`#output summary`, chromedp.ByQuery))
	tb.eval(layoutCheck(390), &problems)
	if problems != "" {
		t.Errorf("large output page at 390 px, opened: %s", problems)
	}
	if errs := tb.consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}
