package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/cmdqtype"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// The operator console in a real browser: Debian's Chromium driven by
// chromedp against the API and the console mounted as `cmdq serve` mounts
// them (apitest), with handlers like serve's demo ones. `make test`
// installs Chromium when it is missing (tools/install-chromium.sh) and
// sets CMDQ_REQUIRE_BROWSER=1, so a missing browser fails there instead of
// skipping. Screenshots of every page at 1280×800 and 390×844 go to
// $CMDQ_ARTIFACTS/browser (or a new temporary directory), which the test
// prints.

// demoSleep sleeps MS milliseconds, then completes (as serve's demo.sleep).
type demoSleep struct {
	MS int `json:"ms"`
}

func (demoSleep) CommandType() string { return "demo.sleep" }

// demoFail fails its first Times attempts, then completes (as serve's
// demo.fail).
type demoFail struct {
	Times int `json:"times"`
}

func (demoFail) CommandType() string { return "demo.fail" }

// registerDemo registers demo.sleep and demo.fail, retried after about a
// second, as serve does.
func registerDemo(c *cmdq.Client) error {
	opts := cmdq.HandlerOptions{Retry: cmdqtype.RetryPolicy{Base: time.Second, Max: time.Second, Multiplier: 1}}
	if err := cmdq.RegisterWith(c, func(ctx context.Context, cmd demoSleep, _ *cmdq.Run) error {
		t := time.NewTimer(time.Duration(cmd.MS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("demo.sleep: interrupted: %w", ctx.Err())
		}
	}, opts); err != nil {
		return err
	}
	return cmdq.RegisterWith(c, func(_ context.Context, cmd demoFail, run *cmdq.Run) error {
		if run.Attempt() <= cmd.Times {
			return fmt.Errorf("demo.fail: planned failure %d of %d", run.Attempt(), cmd.Times)
		}
		return nil
	}, opts)
}

// response is an HTTP response read whole.
type response struct {
	code int
	body string
}

// do sends one request with a bearer token; body "" sends none, else JSON.
func do(t *testing.T, method, url, token, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatalf("request %s %s: %v", method, url, err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return response{code: resp.StatusCode, body: string(b)}
}

// waitState polls a command (through the server's Client) until it is in
// state.
func waitState(t *testing.T, srv *apitest.Server, id string, state cmdqtype.State, timeout time.Duration) {
	t.Helper()
	var last cmdqtype.State
	waitFor(t, timeout, fmt.Sprintf("command %s is %s (last seen %s)", id, state, last), func() bool {
		st, err := srv.Client.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		last = st.State
		return last == state
	})
}

// waitFor polls cond every 25 ms until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(25 * time.Millisecond) // poll interval, not synchronisation
	}
}

// chromiumPath finds the browser: $CMDQ_CHROMIUM, else chromium on the PATH.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, c := range []string{os.Getenv("CMDQ_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	msg := "no Chromium found (set CMDQ_CHROMIUM, or run tools/install-chromium.sh, which `make test` does)"
	if os.Getenv("CMDQ_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg + "; CMDQ_REQUIRE_BROWSER=1 makes this a failure")
	}
	t.Skip(msg)
	return ""
}

// artifactsDir is where screenshots go: $CMDQ_ARTIFACTS/browser, else a new
// temporary directory that is kept.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CMDQ_ARTIFACTS")
	if dir != "" {
		dir = filepath.Join(dir, "browser")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		var err error
		if dir, err = os.MkdirTemp("", "cmdq-browser-"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// tab is one browser tab with its console errors.
type tab struct {
	t    *testing.T
	name string
	ctx  context.Context

	mu       sync.Mutex
	errs     []string
	expected []string // substrings of errors a step causes on purpose
}

// newTab opens a tab in parent's browser (and browser context, unless opts
// say otherwise) and records its exceptions and console errors.
func newTab(t *testing.T, parent context.Context, name string, opts ...chromedp.ContextOption) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(parent, opts...)
	t.Cleanup(cancel)
	tb := &tab{t: t, name: name, ctx: ctx}
	chromedp.ListenTarget(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			tb.record("exception: " + e.ExceptionDetails.Error())
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.APITypeError || e.Type == runtime.APITypeAssert {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				tb.record("console." + string(e.Type) + ": " + strings.Join(parts, " "))
			}
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.LevelError {
				tb.record(fmt.Sprintf("%s: %s (%s)", e.Entry.Source, e.Entry.Text, e.Entry.URL))
			}
		}
	})
	// The first Run opens the tab and ties it to ctx: it must get ctx
	// itself, not a context with a timeout (whose end would close the tab).
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("%s: open a tab: %v", name, err)
	}
	return tb
}

func (tb *tab) record(s string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.errs = append(tb.errs, s)
}

// expect allows console errors containing s (a page opened on purpose that
// answers 403 or 404 logs one).
func (tb *tab) expect(s string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.expected = append(tb.expected, s)
}

// forget drops the errors recorded so far that contain s (caused on
// purpose); later ones still count.
func (tb *tab) forget(s string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	kept := tb.errs[:0]
	for _, e := range tb.errs {
		if !strings.Contains(e, s) {
			kept = append(kept, e)
		}
	}
	tb.errs = kept
}

// consoleErrors returns the unexpected errors so far.
func (tb *tab) consoleErrors() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []string
next:
	for _, e := range tb.errs {
		for _, x := range tb.expected {
			if strings.Contains(e, x) {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

func (tb *tab) run(actions ...chromedp.Action) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 45*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		tb.t.Fatalf("%s: %v\npage: %s\nconsole errors: %q", tb.name, err, tb.where(), tb.consoleErrors())
	}
}

// step runs one action, naming it in the failure.
func (tb *tab) step(what string, a chromedp.Action) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, a); err != nil {
		tb.t.Fatalf("%s: %s: %v\npage: %s\nconsole errors: %q", tb.name, what, err, tb.where(), tb.consoleErrors())
	}
}

// where returns the page's URL and text, for failure messages.
func (tb *tab) where() string {
	ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	defer cancel()
	var s string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`location.href + "\n" + document.body.innerText`, &s)); err != nil {
		return "(unknown: " + err.Error() + ")"
	}
	return s
}

// eval evaluates a JavaScript expression into out.
func (tb *tab) eval(js string, out any) {
	tb.t.Helper()
	tb.run(chromedp.Evaluate(js, out))
}

// waitJS waits until a JavaScript expression is truthy.
func (tb *tab) waitJS(what, js string, timeout time.Duration) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, timeout+5*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, chromedp.Poll(js, nil, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout))); err != nil {
		tb.t.Fatalf("%s: waiting until %s: %v\npage: %s\nconsole errors: %q", tb.name, what, err, tb.where(), tb.consoleErrors())
	}
}

// text returns the page's visible text.
func (tb *tab) text() string {
	tb.t.Helper()
	var s string
	tb.eval(`document.body.innerText`, &s)
	return s
}

// mark sets a marker on the page; unmarked() reports whether a navigation
// (a reload) has wiped it since.
func (tb *tab) mark() { tb.eval(`window.cmdqMarker = 42; true`, nil) }

func (tb *tab) reloaded() bool {
	var v bool
	tb.eval(`window.cmdqMarker !== 42`, &v)
	return v
}

// layoutCheck returns the JavaScript that checks what every page must pass
// at the viewport width vw: no sideways scrolling, a header of at most two
// rows, readable contrast (WCAG AA, 4.5:1).
func layoutCheck(vw int64) string {
	return fmt.Sprintf("(%s)(%d)", layoutCheckJS, vw)
}

const layoutCheckJS = `(vw) => {
  const problems = [];
  const de = document.documentElement;
  if (de.scrollWidth > vw) problems.push("scrollWidth " + de.scrollWidth + " > viewport " + vw);
  const tops = new Set();
  for (const el of document.querySelectorAll("header a, header button, header input, header .who")) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.height > 0) tops.add(Math.round(r.top / 8));
  }
  if (tops.size > 2) problems.push("the header wraps into " + tops.size + " rows");
  // A card's labels (td::before) must fit their column, uncut.
  const probe = document.createElement("span");
  probe.style.cssText = "position:absolute;visibility:hidden;white-space:nowrap";
  document.body.append(probe);
  for (const td of document.querySelectorAll("td[data-label]")) {
    const b = getComputedStyle(td, "::before");
    if (!td.getClientRects().length || b.position !== "absolute") continue;
    probe.style.font = b.font;
    probe.textContent = td.getAttribute("data-label");
    if (probe.getBoundingClientRect().width > parseFloat(b.width) + 0.5) problems.push("card label " + JSON.stringify(probe.textContent) + " is cut");
  }
  probe.remove();
  const rgb = s => (s.match(/[\d.]+/g) || []).map(Number);
  const lum = c => { const [r, g, b] = c.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const bg = el => { for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor); if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c; } return [255, 255, 255]; };
  for (const el of document.querySelectorAll(".who, .muted, .badge, header a, .updated, .flash, .err, .note, th, td, dt, dd, button, .button, a, label, summary, q, pre, .probe")) {
    if (!el.getClientRects().length || !el.textContent.trim()) continue;
    const fg = rgb(getComputedStyle(el).color), b = bg(el);
    const l1 = lum(fg), l2 = lum(b);
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    if (ratio < 4.5) problems.push("contrast " + ratio.toFixed(2) + " of " + el.tagName.toLowerCase() + "." + el.className + " " + JSON.stringify(el.textContent.trim().slice(0, 30)));
  }
  return problems.join("; ");
}`

// shoot checks the layout of the current page at both sizes (and in dark
// mode) and saves its screenshots as <dir>/<name>-<width>[-dark].png.
func (tb *tab) shoot(dir, name string) {
	tb.t.Helper()
	type size struct {
		w, h   int64
		mobile bool
	}
	// A tab in the background gets no new frames, and a screenshot of it
	// waits for one.
	tb.step(name+" to the front", cdppage.BringToFront())
	for _, dark := range []bool{false, true} {
		scheme := "light"
		if dark {
			scheme = "dark"
		}
		tb.step(name+" "+scheme, chromedp.ActionFunc(func(ctx context.Context) error {
			return emulateScheme(ctx, scheme)
		}))
		for _, sz := range []size{{1280, 800, false}, {390, 844, true}} {
			opts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
			if sz.mobile {
				opts = append(opts, chromedp.EmulateMobile)
			}
			var problems string
			tb.step(fmt.Sprintf("%s viewport %d", name, sz.w), chromedp.EmulateViewport(sz.w, sz.h, opts...))
			tb.step(fmt.Sprintf("%s layout %d", name, sz.w), chromedp.Evaluate(layoutCheck(sz.w), &problems))
			if problems != "" {
				tb.t.Errorf("%s: page %s at %d px (%s): %s", tb.name, name, sz.w, scheme, problems)
			}
			if dark && sz.w != 1280 {
				continue // dark mode: one screenshot is enough to judge
			}
			var png []byte
			tb.step(fmt.Sprintf("%s screenshot %d %s", name, sz.w, scheme), chromedp.FullScreenshot(&png, 100))
			file := fmt.Sprintf("%s-%d.png", name, sz.w)
			if dark {
				file = fmt.Sprintf("%s-%d-dark.png", name, sz.w)
			}
			if err := os.WriteFile(filepath.Join(dir, file), png, 0o644); err != nil {
				tb.t.Fatal(err)
			}
		}
	}
	tb.run(chromedp.ActionFunc(func(ctx context.Context) error { return emulateScheme(ctx, "light") }),
		chromedp.EmulateViewport(1280, 800, chromedp.EmulateScale(1)))
}

// TestBrowserOperatorPage walks through a poison incident in Chromium: a
// command's page goes pending → running → completed live; a failing
// command appears in the poison list without a reload; its page shows it;
// a requeue appears live on another tab of that page; a bulk discard asks
// first; the recent commands page counts and charts the hour; the queues
// view pauses the queue, a command issued then waits and its cancel asks
// first; forged
// posts (without the CSRF token, from another site) are refused; a reader
// sees no controls. Every page is checked for
// console errors, sideways scrolling at 390 px, a header of at most two
// rows and contrast, in light and dark mode, and photographed.
func TestBrowserConsole(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	dir := artifactsDir(t)
	// One handler at a time, so that a command can be seen waiting.
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), Config: cmdq.Config{PoisonCeiling: 1, Concurrency: 1}, Setup: registerDemo})

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1280, 800),
	)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Run(browser); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}

	// Issuing goes through the API, as a front end would.
	issueFailing := func() string {
		t.Helper()
		id := uuid.NewString()
		r := do(t, http.MethodPost, srv.URL+"/v1/commands", apitest.IssuerToken,
			`{"id":"`+id+`","type":"demo.fail","params":{"times":10}}`)
		if r.code != http.StatusAccepted {
			t.Fatalf("issue: %d %s", r.code, r.body)
		}
		return id
	}
	poisonEntry := func(id string) int {
		return do(t, http.MethodGet, srv.URL+"/v1/poison/"+id, apitest.OperatorToken, "").code
	}

	// ---- the operator logs in ----
	op := newTab(t, browser, "operator")
	op.run(chromedp.Navigate(srv.URL+"/ui/"), chromedp.WaitVisible(`input[name=token]`, chromedp.ByQuery))
	op.shoot(dir, "login")
	// The layout check finds what it looks for: a too-wide element and
	// grey text on black.
	var problems string
	op.run(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(1), chromedp.EmulateMobile),
		chromedp.Evaluate(`(() => { const d = document.createElement("div"); d.className = "probe"; d.textContent = "wide grey"; d.style.width = "600px"; d.style.color = "#555"; d.style.background = "#000"; document.body.append(d); return true; })()`, nil),
		chromedp.Evaluate(layoutCheck(390), &problems),
		chromedp.Evaluate(`document.querySelector(".probe").remove(); true`, nil),
		chromedp.EmulateViewport(1280, 800, chromedp.EmulateScale(1)))
	if !strings.Contains(problems, "scrollWidth") || !strings.Contains(problems, `div.probe "wide grey"`) {
		t.Fatalf("the layout check misses a 600 px element or grey on black: %q", problems)
	}
	// The console capture sees errors, and the page's CSP refuses inline
	// script (the browser reports the refusal as an error).
	op.eval(`console.error("cmdq-console-probe"); const s = document.createElement("script"); s.textContent = "window.cmdqInline = 1"; document.body.append(s); true`, nil)
	waitFor(t, 10*time.Second, "the console probe and the CSP refusal are recorded", func() bool {
		errs := strings.Join(op.consoleErrors(), "\n")
		return strings.Contains(errs, "cmdq-console-probe") && strings.Contains(errs, "Content Security Policy")
	})
	var inline bool
	op.eval(`window.cmdqInline === 1`, &inline)
	if inline {
		t.Fatal("an inline script ran despite the CSP")
	}
	// Those two were on purpose; later ones are not.
	op.forget("cmdq-console-probe")
	op.forget("Content Security Policy")
	op.run(chromedp.SendKeys(`input[name=token]`, apitest.OperatorToken, chromedp.ByQuery),
		chromedp.Submit(`input[name=token]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#live`, chromedp.ByQuery))
	if txt := op.text(); !strings.Contains(txt, "Processor") || !strings.Contains(txt, "0 poisoned commands") {
		t.Fatalf("overview after login:\n%s", txt)
	}

	// ---- a command's page goes pending → running → completed live ----
	issueSleep := func(ms int) string {
		t.Helper()
		id := uuid.NewString()
		r := do(t, http.MethodPost, srv.URL+"/v1/commands", apitest.IssuerToken, fmt.Sprintf(`{"id":"%s","type":"demo.sleep","params":{"ms":%d}}`, id, ms))
		if r.code != http.StatusAccepted {
			t.Fatalf("issue: %d %s", r.code, r.body)
		}
		return id
	}
	blocker := issueSleep(6000) // takes the only handler slot
	waitState(t, srv, blocker, cmdqtype.StateRunning, 30*time.Second)
	watched := issueSleep(2500)
	op.run(chromedp.Navigate(srv.URL+"/ui/commands/"+watched), chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	op.mark()
	// Record every state the page shows, as it shows it.
	op.eval(`window.cmdqStates = [document.getElementById("status").textContent.trim()];
new MutationObserver(() => { const s = document.getElementById("status"); if (s && s.textContent.trim() !== window.cmdqStates.at(-1)) window.cmdqStates.push(s.textContent.trim()); })
  .observe(document.getElementById("live"), {childList: true, subtree: true, characterData: true}); true`, nil)
	op.waitJS("the page follows its live feed", `/^Updated \d+ s ago · live$/.test(document.getElementById("updated").textContent)`, 20*time.Second)
	op.waitJS("the command completes on the page", `window.cmdqStates.at(-1) === "completed"`, 60*time.Second)
	var states []string
	op.eval(`window.cmdqStates`, &states)
	if op.reloaded() {
		t.Fatal("the command page was reloaded to follow the command")
	}
	// pending, then running (at once from the processor's in-flight set:
	// "running (stored: pending)"; after ~1 s from the started event),
	// then completed.
	if len(states) < 3 || states[0] != "pending" || !strings.HasPrefix(states[1], "running") || states[len(states)-1] != "completed" {
		t.Fatalf("the page showed %q, want pending, running…, completed", states)
	}
	for _, st := range states[1 : len(states)-1] {
		if !strings.HasPrefix(st, "running") {
			t.Fatalf("the page showed %q, want pending, running…, completed", states)
		}
	}
	t.Logf("the command page showed %q live", states)

	// ---- a failing command appears in the poison list without a reload ----
	op.run(chromedp.Navigate(srv.URL+"/ui/poison"), chromedp.WaitVisible(`#live`, chromedp.ByQuery))
	op.mark()
	first := issueFailing()
	op.waitJS("the poisoned command appears in the list", `[...document.querySelectorAll("tr.entry code")].some(c => c.textContent === "`+first+`")`, 30*time.Second)
	if op.reloaded() {
		t.Fatal("the poison list was reloaded to show the new entry")
	}
	op.waitJS("the freshness line", `/^Updated \d+ s ago · refreshes every 5 s$/.test(document.getElementById("updated").textContent)`, 10*time.Second)
	second, third := issueFailing(), issueFailing()
	op.waitJS("three entries", `document.querySelectorAll("tr.entry").length === 3`, 30*time.Second)
	op.shoot(dir, "poison-list")

	// ---- the overview counts them ----
	op.run(chromedp.Navigate(srv.URL+"/ui/"), chromedp.WaitVisible(`#live`, chromedp.ByQuery))
	if txt := op.text(); !strings.Contains(txt, "3 poisoned commands") || !strings.Contains(txt, "demo.fail") {
		t.Fatalf("overview:\n%s", txt)
	}
	op.shoot(dir, "overview")

	// ---- open the first one ----
	op.run(chromedp.Navigate(srv.URL+"/ui/poison"), chromedp.WaitVisible(`tr.entry`, chromedp.ByQuery),
		chromedp.Click(`a[href="/ui/commands/`+first+`"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	txt := op.text()
	for _, want := range []string{"poisoned", "demo.fail", `"times": 10`, "attempts exhausted", "demo.fail: planned failure 1 of 10", "Requeue", "Discard…"} {
		if !strings.Contains(txt, want) {
			t.Errorf("command page lacks %q:\n%s", want, txt)
		}
	}
	op.shoot(dir, "command")

	// A second tab on the same page sees the requeue without reloading.
	watcher := newTab(t, op.ctx, "watcher")
	watcher.run(chromedp.Navigate(srv.URL+"/ui/commands/"+first), chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	watcher.mark()

	// ---- requeue from the command page ----
	op.run(chromedp.Click(`form[action$="/requeue"] button`, chromedp.ByQuery), chromedp.WaitVisible(`p.flash`, chromedp.ByQuery))
	var flash string
	op.eval(`document.querySelector("p.flash").textContent`, &flash)
	if !strings.Contains(flash, "Requeued at ") || !strings.Contains(flash, " now.") {
		t.Errorf("flash after requeue: %q", flash)
	}
	watcher.waitJS("requeued appears in the timeline", `[...document.querySelectorAll("tr.event .badge")].some(b => b.textContent === "requeued")`, 30*time.Second)
	if watcher.reloaded() {
		t.Fatal("the command page was reloaded to show the requeue")
	}
	// With a ceiling of 1 it fails again at once and is poisoned again.
	watcher.waitJS("it is poisoned again", `[...document.querySelectorAll("tr.event .badge")].map(b => b.textContent).join(",").endsWith("requeued,started,failed,poisoned")`, 30*time.Second)
	// A reload does not repeat the flash message.
	op.run(chromedp.Reload(), chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	var flashes int
	op.eval(`document.querySelectorAll("p.flash").length`, &flashes)
	if flashes != 0 {
		t.Error("the flash message came back on reload")
	}

	// ---- the single discard asks first ----
	op.run(chromedp.Navigate(srv.URL+"/ui/poison/"+second+"/discard"), chromedp.WaitVisible(`form[action$="/discard"]`, chromedp.ByQuery))
	if txt := op.text(); !strings.Contains(txt, "Discard this poison entry?") || !strings.Contains(txt, "cannot be undone") {
		t.Fatalf("discard confirmation:\n%s", txt)
	}
	op.shoot(dir, "confirm-discard")
	op.run(chromedp.Click(`a.button[href="/ui/poison"]`, chromedp.ByQuery), chromedp.WaitVisible(`tr.entry`, chromedp.ByQuery))
	if code := poisonEntry(second); code != http.StatusOK {
		t.Fatalf("Cancel on the confirmation: the entry answers %d", code)
	}

	// ---- forged posts are refused ----
	// Same origin, with the session cookie, without the CSRF token.
	op.expect("/ui/poison/" + second + "/discard")
	var forged int
	op.run(chromedp.Evaluate(`fetch("/ui/poison/`+second+`/discard", {method: "POST", body: new URLSearchParams({type: ""})}).then(r => r.status)`, &forged,
		func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if forged != http.StatusForbidden {
		t.Errorf("a POST without the CSRF token answered %d, want 403", forged)
	}
	// From another site (another origin; same site on 127.0.0.1), a form
	// that posts itself with a made-up token.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><form id=f method=post action="%s/ui/poison/%s/discard"><input name=csrf value=guess></form><script>document.getElementById("f").submit()</script>`, srv.URL, second)
	}))
	t.Cleanup(evil.Close)
	attacker := newTab(t, op.ctx, "attacker")
	attacker.run(chromedp.Navigate(evil.URL), chromedp.WaitVisible(`p.err`, chromedp.ByQuery))
	if txt := attacker.text(); !strings.Contains(txt, "Cross-origin request refused") {
		t.Errorf("the cross-site form post got:\n%s", txt)
	}
	if code := poisonEntry(second); code != http.StatusOK {
		t.Fatalf("after forged posts the entry answers %d, want 200 (still poisoned)", code)
	}

	// ---- bulk discard with confirmation ----
	op.run(chromedp.Navigate(srv.URL+"/ui/poison"), chromedp.WaitVisible(`tr.entry`, chromedp.ByQuery))
	op.waitJS("three entries", `document.querySelectorAll("tr.entry").length === 3`, 30*time.Second)
	op.run(chromedp.Click(`input[data-select-all]`, chromedp.ByQuery))
	var ticked int
	op.eval(`document.querySelectorAll("input[name=id]:checked").length`, &ticked)
	if ticked != 3 {
		t.Fatalf("select all ticked %d boxes, want 3", ticked)
	}
	op.run(chromedp.Click(`button[name=do][value=discard]`, chromedp.ByQuery), chromedp.WaitVisible(`form[action$="/bulk/run"]`, chromedp.ByQuery))
	if txt := op.text(); !strings.Contains(txt, "Discard 3 poison entries?") {
		t.Fatalf("bulk confirmation:\n%s", txt)
	}
	for _, id := range []string{first, second, third} {
		if code := poisonEntry(id); code != http.StatusOK {
			t.Fatalf("the bulk confirmation page changed %s: %d", id, code)
		}
	}
	op.shoot(dir, "confirm-bulk")
	op.run(chromedp.Click(`form[action$="/bulk/run"] button[type=submit]`, chromedp.ByQuery), chromedp.WaitVisible(`p.flash`, chromedp.ByQuery))
	op.eval(`document.querySelector("p.flash").textContent`, &flash)
	if !strings.HasPrefix(flash, "Discarded 3 of 3 at ") {
		t.Errorf("flash after bulk discard: %q", flash)
	}
	for _, id := range []string{first, second, third} {
		if code := poisonEntry(id); code != http.StatusNotFound {
			t.Errorf("after the bulk discard %s answers %d, want 404", id, code)
		}
	}
	op.shoot(dir, "poison-after-bulk")

	// ---- the recent commands: counts per state, outcomes per minute ----
	op.run(chromedp.Navigate(srv.URL+"/ui/commands"), chromedp.WaitVisible(`svg`, chromedp.ByQuery))
	var tabs []string
	op.eval(`[...document.querySelectorAll("nav.tabs a")].map(a => a.textContent.replace(/\s+/g, " ").trim())`, &tabs)
	if len(tabs) != 8 || tabs[0] != "all 5" || tabs[4] != "completed 2" || tabs[6] != "discarded 3" || tabs[7] != "cancelled 0" {
		t.Errorf("state counts of the last hour: %q, want all 5, completed 2, discarded 3", tabs)
	}
	var charts []string
	op.eval(`[...document.querySelectorAll("figure.chart")].map(f => f.querySelector("figcaption").textContent.trim() + " / " + f.querySelectorAll("rect").length)`, &charts)
	if len(charts) != 3 || !strings.HasPrefix(charts[0], "Completed: 2") || !strings.HasPrefix(charts[2], "Poisoned: 4") || strings.HasSuffix(charts[0], "/ 0") {
		t.Errorf("charts: %q", charts)
	}
	op.run(chromedp.Click(`nav.tabs a[href$="state=discarded"]`, chromedp.ByQuery), chromedp.WaitVisible(`tr.command`, chromedp.ByQuery))
	var rows int
	op.eval(`document.querySelectorAll("tr.command").length`, &rows)
	if rows != 3 {
		t.Errorf("the discarded filter lists %d commands, want 3", rows)
	}
	op.run(chromedp.Navigate(srv.URL+"/ui/commands"), chromedp.WaitVisible(`svg`, chromedp.ByQuery))
	op.shoot(dir, "commands")

	// ---- the queues view: a pause, a command that waits, its cancel asks first ----
	op.run(chromedp.Navigate(srv.URL+"/ui/queues"), chromedp.WaitVisible(`tr.queue`, chromedp.ByQuery),
		chromedp.Click(`form[action$="/queues/commands/pause"] button`, chromedp.ByQuery), chromedp.WaitVisible(`p.flash`, chromedp.ByQuery))
	if txt := op.text(); !strings.Contains(txt, "Queue commands was paused at") || !strings.Contains(txt, "Resume") {
		t.Fatalf("queues after the pause:\n%s", txt)
	}
	op.shoot(dir, "queues")
	waiting := issueFailing() // the queue is paused: it waits, pending
	op.run(chromedp.Navigate(srv.URL+"/ui/commands/"+waiting), chromedp.WaitVisible(`#cancel`, chromedp.ByQuery),
		chromedp.Click(`#cancel`, chromedp.ByQuery), chromedp.WaitVisible(`form[action$="/cancel"]`, chromedp.ByQuery))
	if txt := op.text(); !strings.Contains(txt, "Cancel this command?") || !strings.Contains(txt, "cannot be undone") {
		t.Fatalf("cancel confirmation:\n%s", txt)
	}
	op.shoot(dir, "confirm-cancel")
	op.run(chromedp.Click(`form[action$="/cancel"] button`, chromedp.ByQuery), chromedp.WaitVisible(`p.flash`, chromedp.ByQuery))
	waitState(t, srv, waiting, cmdqtype.StateCancelled, 30*time.Second)
	op.run(chromedp.Navigate(srv.URL+"/ui/queues"), chromedp.WaitVisible(`tr.queue`, chromedp.ByQuery),
		chromedp.Click(`form[action$="/queues/commands/resume"] button`, chromedp.ByQuery), chromedp.WaitVisible(`p.flash`, chromedp.ByQuery))

	// ---- an error page ----
	op.expect("/ui/commands/00000000-0000-4000-8000-000000000000")
	op.run(chromedp.Navigate(srv.URL+"/ui/commands/00000000-0000-4000-8000-000000000000"), chromedp.WaitVisible(`p.err`, chromedp.ByQuery))
	op.shoot(dir, "error")

	// ---- a reader sees no controls ----
	fourth := issueFailing()
	waitState(t, srv, fourth, cmdqtype.StatePoisoned, 30*time.Second)
	// The operator logs out (the session ends on the server), and a reader
	// logs in in the same browser.
	op.run(chromedp.Navigate(srv.URL+"/ui/"), chromedp.WaitVisible(`#live`, chromedp.ByQuery),
		chromedp.Click(`form[action$="/logout"] button`, chromedp.ByQuery), chromedp.WaitVisible(`input[name=token]`, chromedp.ByQuery))
	reader := newTab(t, browser, "reader")
	reader.run(chromedp.Navigate(srv.URL+"/ui/login"), chromedp.WaitVisible(`input[name=token]`, chromedp.ByQuery),
		chromedp.SendKeys(`input[name=token]`, apitest.ReaderToken, chromedp.ByQuery),
		chromedp.Submit(`input[name=token]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#live`, chromedp.ByQuery))
	var controls []string
	reader.eval(`[...document.querySelectorAll("a[href*='/poison'], form[action*='/poison'], button")].map(e => e.outerHTML.slice(0, 80)).filter(h => !h.includes("Log out") && !h.includes(">Open<"))`, &controls)
	if len(controls) != 0 {
		t.Errorf("the reader's overview has controls: %q", controls)
	}
	reader.run(chromedp.Navigate(srv.URL+"/ui/commands/"+fourth), chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	reader.eval(`[...document.querySelectorAll("a[href*='/poison'], form[action*='/poison']")].map(e => e.outerHTML.slice(0, 80))`, &controls)
	if len(controls) != 0 || strings.Contains(reader.text(), "Requeue") {
		t.Errorf("the reader's command page has controls: %q", controls)
	}
	reader.shoot(dir, "command-reader")
	// A reader's forged requeue (with the reader's own CSRF token) is refused.
	reader.expect("/ui/poison/" + fourth + "/requeue")
	reader.run(chromedp.Evaluate(`fetch("/ui/poison/`+fourth+`/requeue", {method: "POST", body: new URLSearchParams({csrf: document.querySelector("input[name=csrf]").value})}).then(r => r.status)`, &forged,
		func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if forged != http.StatusForbidden {
		t.Errorf("a reader's requeue answered %d, want 403", forged)
	}
	if code := poisonEntry(fourth); code != http.StatusOK {
		t.Fatalf("after the reader's requeue the entry answers %d", code)
	}

	for _, tb := range []*tab{op, watcher, reader} {
		if errs := tb.consoleErrors(); len(errs) > 0 {
			t.Errorf("%s tab: console errors:\n%s", tb.name, strings.Join(errs, "\n"))
		}
	}
}

// emulateScheme sets prefers-color-scheme ("light" or "dark").
func emulateScheme(ctx context.Context, scheme string) error {
	return emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}).Do(ctx)
}
