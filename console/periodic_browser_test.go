package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
)

// demoTick is the command of the browser test's periodic schedule.
type demoTick struct {
	Beat int `json:"beat"`
}

func (demoTick) CommandType() string { return "demo.tick" }

// TestBrowserPeriodic walks through the Periodic pages in Chromium. As a
// reader: the nav link leads there, on a phone (375 px) too, from the
// header; the server's every-second schedule is listed with its spec,
// type and queue, its last tick links to that tick's command (whose page
// shows the tick's correlation ID), and its next tick is shown; a
// schedule only stored by another process is listed too; the schedule's
// page lists its latest five ticks, a second apart, linked to their
// commands, and offers no Trigger now. As an operator: Trigger now… on
// the other process's schedule asks first, and confirming opens the
// tick's command (its correlation ID the tick's), which completes and
// shows its attempt's duration and the total; the same confirmation
// posted twice issues one command; a schedule whose row holds no
// parameters says to restart its process instead. The Queues page says
// what its message count counts. Every page passes the layout checks
// (390 px, contrast, light and dark) and is photographed.
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
	// And a row as an older version stored it: no parameters.
	tb, err := srv.Store.Table(context.Background(), srv.Client.Prefix()+"commands")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shared.New(tb, time.Now).StoreSchedule(context.Background(), shared.Schedule{Name: "legacy.weekly", Spec: "@weekly", Type: "demo.tick", Queue: "commands"}, "old-worker-9"); err != nil {
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
	for _, want := range []string{"demo.heartbeat", "@every 1s", "demo.tick", "commands", "reports.nightly", "0 2 * * *", "legacy.weekly"} {
		if !strings.Contains(txt, want) {
			t.Fatalf("the periodic page lacks %q:\n%s", want, txt)
		}
	}
	var rows []string
	rd.eval(`[...document.querySelectorAll("tr.schedule")].map(r => r.innerText)`, &rows)
	if len(rows) != 3 || !strings.Contains(rows[0], "demo.heartbeat") || !strings.Contains(rows[1], "legacy.weekly") || !strings.Contains(rows[2], "reports.nightly") {
		t.Fatalf("rows %q, want demo.heartbeat, legacy.weekly, reports.nightly", rows)
	}
	var nextTicks []string
	rd.eval(`[...document.querySelectorAll("tr.schedule td.next-tick")].map(td => td.innerText.trim())`, &nextTicks)
	for i, n := range nextTicks {
		if n == "" || strings.Contains(n, "never") {
			t.Fatalf("row %d has no next tick: %q", i, n)
		}
	}
	var triggers int
	rd.eval(`document.querySelectorAll("a.trigger, #trigger").length`, &triggers)
	if triggers != 0 {
		t.Fatalf("a reader sees %d Trigger now buttons", triggers)
	}
	// On a phone (375 px) the header holds the Periodic link, within its
	// two rows.
	rd.run(chromedp.EmulateViewport(375, 812, chromedp.EmulateScale(1), chromedp.EmulateMobile),
		chromedp.Navigate(srv.URL+"/ui/queues"), chromedp.WaitVisible(`tr.queue`, chromedp.ByQuery))
	rd.layout("the Queues page on a 375 px phone")
	rd.run(chromedp.Click(`header nav a[href$="/periodic"]`, chromedp.ByQuery), chromedp.WaitVisible(`tr.schedule`, chromedp.ByQuery))
	rd.layout("the Periodic page on a 375 px phone")
	rd.run(chromedp.EmulateViewport(1280, 800, chromedp.EmulateScale(1)))

	// The heartbeat's page: its latest five ticks, newest first, a
	// second apart, linked to their commands.
	rd.run(chromedp.Click(`tr.schedule a.schedule-link`, chromedp.ByQuery), chromedp.WaitVisible(`tr.tick`, chromedp.ByQuery))
	waitLinkedTicks(t, rd, 5)
	var ticks []string
	rd.eval(`[...document.querySelectorAll("tr.tick td[data-label=Time]")].map(td => td.innerText.trim())`, &ticks)
	if len(ticks) != 5 {
		t.Fatalf("the schedule's page lists %d ticks, want 5: %q", len(ticks), ticks)
	}
	for i := 1; i < len(ticks); i++ {
		a, errA := time.Parse("2006-01-02 15:04:05.000Z", ticks[i-1])
		b, errB := time.Parse("2006-01-02 15:04:05.000Z", ticks[i])
		if errA != nil || errB != nil || a.Sub(b) != time.Second {
			t.Fatalf("ticks %q are not a second apart, newest first", ticks)
		}
	}
	rd.eval(`document.querySelectorAll("#trigger").length`, &triggers)
	if triggers != 0 {
		t.Fatal("a reader sees Trigger now on the schedule's page")
	}
	rd.run(chromedp.Click(`tr.tick td a`, chromedp.ByQuery), chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	if txt := rd.text(); !strings.Contains(txt, "periodic:demo.heartbeat@") || !strings.Contains(txt, "demo.tick") {
		t.Fatalf("a tick's command page:\n%s", txt)
	}

	// The operator triggers the other process's schedule.
	op := newTab(t, browser, "operator")
	op.run(chromedp.Navigate(srv.URL+"/ui/login"), chromedp.WaitVisible(`input[name=token]`, chromedp.ByQuery),
		chromedp.SendKeys(`input[name=token]`, apitest.OperatorToken, chromedp.ByQuery),
		chromedp.Submit(`input[name=token]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#live`, chromedp.ByQuery))
	op.run(chromedp.Navigate(srv.URL+"/ui/periodic"), chromedp.WaitVisible(`tr.schedule`, chromedp.ByQuery))
	op.eval(`[...document.querySelectorAll("tr.schedule")].map(r => r.innerText)`, &rows)
	if len(rows) != 3 || !strings.Contains(rows[1], "restart its process to trigger") || !strings.Contains(rows[2], "Trigger now") {
		t.Fatalf("the operator's rows %q: want legacy.weekly to say restart, reports.nightly to offer Trigger now", rows)
	}
	op.shoot(dir, "periodic")
	op.run(chromedp.Navigate(srv.URL+"/ui/periodic/demo.heartbeat"), chromedp.WaitVisible(`#trigger`, chromedp.ByQuery))
	waitLinkedTicks(t, op, 5)
	op.shoot(dir, "periodic-schedule")
	op.run(chromedp.Navigate(srv.URL+"/ui/periodic/reports.nightly"), chromedp.WaitVisible(`#trigger`, chromedp.ByQuery))
	op.step("press Trigger now…", chromedp.Click(`#trigger`, chromedp.ByQuery))
	op.run(chromedp.WaitVisible(`button.primary`, chromedp.ByQuery))
	if txt := op.text(); !strings.Contains(txt, "Trigger reports.nightly now?") || !strings.Contains(txt, "built from its stored row") {
		t.Fatalf("the confirmation page:\n%s", txt)
	}
	if n := triggeredCommands(t, srv, "reports.nightly"); n != 0 {
		t.Fatalf("%d commands before confirming, want none", n)
	}
	op.shoot(dir, "periodic-trigger")
	// The same form posted twice (a double click, a resent form): the
	// first post here, the second by the button.
	var first string
	op.step("post the form once", chromedp.Evaluate(`(() => { const f = document.querySelector("form.actions");
		return fetch(f.action, {method: "POST", body: new URLSearchParams(new FormData(f)), credentials: "same-origin"}).then(r => r.url); })()`,
		&first, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if !strings.Contains(first, "/ui/commands/") {
		t.Fatalf("the first post led to %q, want a command's page", first)
	}
	op.step("confirm", chromedp.Click(`button.primary`, chromedp.ByQuery))
	op.run(chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	var here string
	op.eval(`location.href`, &here)
	if here != first || !strings.Contains(op.textOf(".flash"), "already") {
		t.Fatalf("the second post: %s (first %s), flash %q: want the same command, triggered already", here, first, op.textOf(".flash"))
	}
	if n := triggeredCommands(t, srv, "reports.nightly"); n != 1 {
		t.Fatalf("%d commands after posting twice, want 1", n)
	}
	if txt := op.text(); !strings.Contains(txt, "periodic:reports.nightly@") || !strings.Contains(txt, "demo.tick") {
		t.Fatalf("the triggered command's page:\n%s", txt)
	}
	// It completes (this server runs demo.tick); its page says how long
	// its attempt and the whole took.
	op.waitJS("the triggered command completes", `document.getElementById("status").textContent.trim() === "completed"`, 60*time.Second)
	var took []string
	op.eval(`[...document.querySelectorAll("td.took")].map(td => td.innerText.trim()).filter(s => s)`, &took)
	if len(took) != 1 || !strings.HasPrefix(took[0], "attempt 1 took ") {
		t.Fatalf("durations on the timeline %q, want the attempt's only", took)
	}
	if total := op.textOf("#total"); !strings.Contains(total, "created → completed") {
		t.Fatalf("total time %q, want it to run from created to completed", total)
	}
	op.shoot(dir, "command-durations")

	// The Queues page says what its figure counts.
	op.run(chromedp.Navigate(srv.URL+"/ui/queues"), chromedp.WaitVisible(`#depth-legend`, chromedp.ByQuery))
	if txt := op.text(); !strings.Contains(txt, "Messages, visible or not") || !strings.Contains(op.textOf("#depth-legend"), "not the number of pending commands") {
		t.Fatalf("the Queues page does not say what it counts:\n%s", txt)
	}
	op.shoot(dir, "queues-legend")
	for _, tab := range []*tab{rd, op} {
		if errs := tab.consoleErrors(); len(errs) > 0 {
			t.Errorf("%s: console errors:\n%s", tab.name, strings.Join(errs, "\n"))
		}
	}
}

// waitLinkedTicks reloads the schedule's page until its first n ticks
// link to their commands (the ticks are issued as they come).
func waitLinkedTicks(t *testing.T, tb *tab, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var linked int
		tb.eval(`document.querySelectorAll("tr.tick td a").length`, &linked)
		if linked >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the ticks linked after 30 s, want %d:\n%s", linked, n, tb.text())
		}
		tb.run(chromedp.Reload(), chromedp.WaitVisible(`tr.tick`, chromedp.ByQuery))
	}
}

// triggeredCommands counts the commands of schedule name's triggered and
// scheduled ticks (by their correlation IDs).
func triggeredCommands(t *testing.T, srv *apitest.Server, name string) int {
	t.Helper()
	page, err := srv.Client.ListCommands(context.Background(), cmdq.CommandQuery{Type: "demo.tick", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, st := range page.Commands {
		if strings.HasPrefix(st.CorrelationID, "periodic:"+name+"@") {
			n++
		}
	}
	return n
}
