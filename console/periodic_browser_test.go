package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// demoTick is the command of the browser test's periodic schedule.
type demoTick struct {
	Beat int `json:"beat"`
}

func (demoTick) CommandType() string { return "demo.tick" }

// TestBrowserPeriodic opens the console's Periodic page in Chromium as a
// reader: the nav link leads there (on a phone, the Queues page's link), the server's every-second schedule is
// listed with its spec, type and queue, its last tick links to that
// tick's command (whose page shows the tick's correlation ID) with its
// state, and its next tick is shown; a schedule only stored by another
// process (not registered here) is listed too. The page passes the
// layout checks (390 px, contrast, light and dark) and is photographed.
func TestBrowserPeriodic(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	dir := artifactsDir(t)
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), Setup: func(c *cmdq.Client) error {
		if err := cmdq.Register(c, func(context.Context, demoTick, *cmdq.Attempt) error { return nil }); err != nil {
			return err
		}
		return c.Periodic("demo.heartbeat", "@every 1s", demoTick{Beat: 1})
	}})
	// Another process stores its own schedule on the same store.
	other, err := cmdq.New(srv.Store, cmdq.Config{Prefix: srv.Client.Prefix(), Worker: "elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Periodic("reports.nightly", "0 2 * * *", demoTick{Beat: 2}, cmdq.CatchUp(cmdq.NoCatchUp)); err != nil {
		t.Fatal(err)
	}
	if err := other.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := other.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

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
	rd := newTab(t, browser, "reader")
	rd.run(chromedp.Navigate(srv.URL+"/ui/login"), chromedp.WaitVisible(`input[name=token]`, chromedp.ByQuery),
		chromedp.SendKeys(`input[name=token]`, apitest.ReaderToken, chromedp.ByQuery),
		chromedp.Submit(`input[name=token]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#live`, chromedp.ByQuery))
	rd.run(chromedp.Click(`nav a[href$="/periodic"]`, chromedp.ByQuery), chromedp.WaitVisible(`tr.schedule`, chromedp.ByQuery))
	// The heartbeat's last tick has its command once the first tick is
	// issued (the page refreshes itself; reload until then).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var linked bool
		rd.eval(`!!document.querySelector("tr.schedule td.last-tick a")`, &linked)
		if linked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no linked last tick after 30 s:\n%s", rd.text())
		}
		rd.run(chromedp.Reload(), chromedp.WaitVisible(`tr.schedule`, chromedp.ByQuery))
	}
	txt := rd.text()
	for _, want := range []string{"demo.heartbeat", "@every 1s", "demo.tick", "commands", "reports.nightly", "0 2 * * *"} {
		if !strings.Contains(txt, want) {
			t.Fatalf("the periodic page lacks %q:\n%s", want, txt)
		}
	}
	var rows []string
	rd.eval(`[...document.querySelectorAll("tr.schedule")].map(r => r.innerText)`, &rows)
	if len(rows) != 2 || !strings.Contains(rows[0], "demo.heartbeat") || !strings.Contains(rows[1], "reports.nightly") {
		t.Fatalf("rows %q, want demo.heartbeat then reports.nightly", rows)
	}
	var nextTicks []string
	rd.eval(`[...document.querySelectorAll("tr.schedule td.next-tick")].map(td => td.innerText.trim())`, &nextTicks)
	for i, n := range nextTicks {
		if n == "" || strings.Contains(n, "never") {
			t.Fatalf("row %d has no next tick: %q", i, n)
		}
	}
	rd.shoot(dir, "periodic")
	// On a phone the header keeps to two rows: the Periodic link is on the
	// Queues page instead of the bar.
	rd.run(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(1), chromedp.EmulateMobile),
		chromedp.Navigate(srv.URL+"/ui/queues"), chromedp.WaitVisible(`tr.queue`, chromedp.ByQuery),
		chromedp.Click(`main a[href$="/periodic"]`, chromedp.ByQuery), chromedp.WaitVisible(`tr.schedule`, chromedp.ByQuery),
		chromedp.EmulateViewport(1280, 800, chromedp.EmulateScale(1)))
	rd.run(chromedp.Click(`tr.schedule td.last-tick a`, chromedp.ByQuery), chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	if txt := rd.text(); !strings.Contains(txt, "periodic:demo.heartbeat@") || !strings.Contains(txt, "demo.tick") {
		t.Fatalf("the last tick's command page:\n%s", txt)
	}
	if errs := rd.consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}
