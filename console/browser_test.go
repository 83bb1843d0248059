package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// demoHold runs until the test releases its Key (release), failing its
// first attempt when FailFirst: a command held in its first second
// (running, its started event not yet written) as long as the test needs.
type demoHold struct {
	Key       string `json:"key"`
	FailFirst bool   `json:"failFirst"`
}

func (demoHold) CommandType() string { return "demo.hold" }

// holds are the release channels of demo.hold commands, by key.
var holds = struct {
	sync.Mutex
	m map[string]chan struct{}
}{m: map[string]chan struct{}{}}

// holdChan returns the release channel of key.
func holdChan(key string) chan struct{} {
	holds.Lock()
	defer holds.Unlock()
	ch, ok := holds.m[key]
	if !ok {
		ch = make(chan struct{})
		holds.m[key] = ch
	}
	return ch
}

// release lets the demo.hold commands of key complete.
func release(key string) { close(holdChan(key)) }

// registerDemo registers demo.sleep, demo.fail (poisoned after one
// attempt) and demo.hold (three attempts), retried after about a second,
// as serve does.
func registerDemo(c *cmdq.Client) error {
	opts := cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: time.Second, Max: time.Second, Multiplier: 1}}
	if err := cmdq.RegisterWith(c, func(ctx context.Context, cmd demoHold, run *cmdq.Attempt) error {
		if cmd.FailFirst && run.Number() == 1 {
			return fmt.Errorf("demo.hold: planned failure of attempt 1")
		}
		select {
		case <-holdChan(cmd.Key):
			return nil
		case <-ctx.Done():
			return fmt.Errorf("demo.hold: interrupted: %w", ctx.Err())
		}
	}, cmdq.HandlerOptions{Retry: opts.Retry, PoisonCeiling: 3}); err != nil {
		return err
	}
	failOpts := opts
	failOpts.PoisonCeiling = 1
	if err := cmdq.RegisterWith(c, func(ctx context.Context, cmd demoSleep, _ *cmdq.Attempt) error {
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
	return cmdq.RegisterWith(c, func(_ context.Context, cmd demoFail, run *cmdq.Attempt) error {
		if run.Number() <= cmd.Times {
			return fmt.Errorf("demo.fail: planned failure %d of %d", run.Number(), cmd.Times)
		}
		return nil
	}, failOpts)
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
func waitState(t *testing.T, srv *apitest.Server, id string, state cmdq.State, timeout time.Duration) {
	t.Helper()
	var last cmdq.State
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

// shootTime adds up the time the scenario spends in shoot.
var shootTime time.Duration

// docsShots are the pages whose 1280×800 light screenshots (PNG, the
// viewport only) go to $CMDQ_DOCS_SCREENSHOTS when it is set, by file
// name: how docs/img/ is made (see docs/dashboard.md).
var docsShots = map[string]string{"overview": "overview.png", "commands": "commands.png", "poison-entry": "poison-entry.png",
	"command-running-pending": "command-running.png", "poison-list": "poison-list.png",
	"periodic": "periodic.png", "periodic-schedule": "periodic-schedule.png", "periodic-trigger": "periodic-trigger.png",
	"command-durations": "command-durations.png", "confirm-bulk": "bulk-confirm.png"}

// docsPhoneShots are the pages whose 390×844 light screenshots go to
// $CMDQ_DOCS_SCREENSHOTS, as docsShots.
var docsPhoneShots = map[string]string{"periodic-schedule": "periodic-phone.png", "command-durations": "command-durations-phone.png", "command": "command-phone.png"}

// waitURL waits until the tab has loaded a page whose URL contains part
// (after a click or a form submission navigates it; evaluations fail
// while the page changes, and are tried again).
func (tb *tab) waitURL(part string) {
	tb.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ok bool
		ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
		err := chromedp.Run(ctx, chromedp.Evaluate(`location.href.includes(`+strconvQuote(part)+`) && document.readyState === "complete"`, &ok))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			tb.t.Fatalf("%s: no page with %q in its URL loaded (last error %v)\npage: %s", tb.name, part, err, tb.where())
		}
		time.Sleep(50 * time.Millisecond) // poll interval while the page changes
	}
}

// textOf returns the trimmed text of the first element sel matches.
func (tb *tab) textOf(sel string) string {
	tb.t.Helper()
	var s string
	tb.eval(`(document.querySelector(`+strconvQuote(sel)+`) || {textContent: ""}).textContent.replace(/\s+/g, " ").trim()`, &s)
	return s
}

// strconvQuote quotes s as a JavaScript string.
func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// layout runs the layout check on the current page at its current size
// and scheme.
func (tb *tab) layout(what string) {
	tb.t.Helper()
	var vw int64
	var problems string
	tb.eval(`window.innerWidth`, &vw)
	tb.eval(layoutCheck(vw), &problems)
	if problems != "" {
		tb.t.Errorf("%s: %s at %d px: %s", tb.name, what, vw, problems)
	}
}

// shoot checks the layout of the current page at both sizes, in light and
// dark mode (and runs the extra checks, JavaScript expressions that
// return "" or the problems they found, at each), and saves its
// screenshots as <dir>/<name>-<width>[-dark].png: 1280 and 390 light,
// 1280 dark.
func (tb *tab) shoot(dir, name string, extra ...string) {
	tb.t.Helper()
	began := time.Now()
	defer func() { shootTime += time.Since(began) }()
	type size struct {
		w, h   int64
		mobile bool
	}
	// A tab in the background gets no new frames, and a screenshot of it
	// waits for one.
	tb.step(name+" to the front", cdppage.BringToFront())
	for _, sz := range []size{{1280, 800, false}, {390, 844, true}} {
		opts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
		if sz.mobile {
			opts = append(opts, chromedp.EmulateMobile)
		}
		tb.step(fmt.Sprintf("%s viewport %d", name, sz.w), chromedp.EmulateViewport(sz.w, sz.h, opts...))
		for _, scheme := range []string{"light", "dark"} {
			tb.step(name+" "+scheme, chromedp.ActionFunc(func(ctx context.Context) error { return emulateScheme(ctx, scheme) }))
			for _, js := range append([]string{layoutCheck(sz.w)}, extra...) {
				var problems string
				tb.step(fmt.Sprintf("%s check %d", name, sz.w), chromedp.Evaluate(js, &problems))
				if problems != "" {
					tb.t.Errorf("%s: page %s at %d px (%s): %s", tb.name, name, sz.w, scheme, problems)
				}
			}
			if scheme == "dark" && sz.w != 1280 {
				continue // dark mode: one screenshot is enough to judge
			}
			var png []byte
			tb.step(fmt.Sprintf("%s screenshot %d %s", name, sz.w, scheme), chromedp.FullScreenshot(&png, 100))
			file := fmt.Sprintf("%s-%d.png", name, sz.w)
			if scheme == "dark" {
				file = fmt.Sprintf("%s-%d-dark.png", name, sz.w)
			}
			if err := os.WriteFile(filepath.Join(dir, file), png, 0o644); err != nil {
				tb.t.Fatal(err)
			}
			if docs := os.Getenv("CMDQ_DOCS_SCREENSHOTS"); docs != "" && docsPhoneShots[name] != "" && sz.w == 390 && scheme == "light" {
				var shot []byte
				tb.step(name+" docs phone screenshot", chromedp.CaptureScreenshot(&shot))
				if err := os.WriteFile(filepath.Join(docs, docsPhoneShots[name]), shot, 0o644); err != nil {
					tb.t.Fatal(err)
				}
			}
			if docs := os.Getenv("CMDQ_DOCS_SCREENSHOTS"); docs != "" && docsShots[name] != "" && sz.w == 1280 && scheme == "light" {
				var shot []byte
				tb.step(name+" docs screenshot", chromedp.CaptureScreenshot(&shot))
				if err := os.WriteFile(filepath.Join(docs, docsShots[name]), shot, 0o644); err != nil {
					tb.t.Fatal(err)
				}
			}
		}
	}
	tb.run(chromedp.ActionFunc(func(ctx context.Context) error { return emulateScheme(ctx, "light") }),
		chromedp.EmulateViewport(1280, 800, chromedp.EmulateScale(1)))
}

// summaryCheck is the JavaScript that checks a command page's summary:
// every label at the left edge and narrower than half the list, the
// status on one or two lines (the layout that broke while a command ran
// before its started event was written: labels pushed right, "(stored:
// pending)" one letter per line).
const summaryCheck = `(() => {
  const dl = document.querySelector("dl.summary");
  if (!dl) return "no summary";
  const r = dl.getBoundingClientRect(), cs = getComputedStyle(dl), problems = [];
  const left = r.left + parseFloat(cs.paddingLeft) + parseFloat(cs.borderLeftWidth);
  for (const dt of dl.querySelectorAll("dt")) {
    const b = dt.getBoundingClientRect();
    if (Math.abs(b.left - left) > 2) problems.push("label " + JSON.stringify(dt.textContent) + " starts " + Math.round(b.left - left) + " px right of the edge");
    if (b.width > r.width / 2) problems.push("label column " + Math.round(b.width) + " px of " + Math.round(r.width));
  }
  const st = document.getElementById("status"), lh = parseFloat(getComputedStyle(st).lineHeight) || 22;
  if (st.getBoundingClientRect().height > 2.5 * lh) problems.push("the status takes " + Math.round(st.getBoundingClientRect().height) + " px");
  const stored = st.querySelector(".stored");
  if (stored && stored.getBoundingClientRect().height > 1.6 * lh) problems.push("(stored: …) wraps");
  return problems.join("; ");
})()`

// TestBrowserConsole walks through an incident in Chromium: a command's
// page goes pending → running → completed live; commands caught running
// before their started event ("running (stored: pending)", "running
// (stored: retrying)") keep the summary's layout; failing commands appear
// in the poison list without a reload; a poison entry's page shows the
// entry and leads to the command; a requeue appears live in another tab
// and the message after it follows the live state; discards and bulk
// discards ask first; forged posts (without the CSRF token, from another
// site) are refused; the overview lists the processor, the throughput and
// the recent failures; the commands page charts the range, its latency
// and its breakdowns, and filters; the theme and auto-refresh controls
// work and are remembered; the queues view pauses the queue, a command
// issued then waits and its cancel asks first; unknown pages keep the
// navigation; a reader sees no controls. Every page is checked for console
// errors, sideways scrolling, a header of at most two rows and contrast,
// at 1280×800 and 390×844 in light and dark mode, and photographed.
func TestBrowserConsole(t *testing.T) {
	t.Parallel()
	began := time.Now()
	chromium := chromiumPath(t)
	dir := artifactsDir(t)
	// One handler at a time, so that a command can be seen waiting; the
	// started event written only with the outcome, so that a running
	// command shows "running (stored: …)" for as long as it is held; a
	// heartbeat every 2 s for the overview.
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), Setup: registerDemo,
		Config: cmdq.Config{Concurrency: 1, StartedWriteDelay: time.Hour, HeartbeatInterval: 2 * time.Second, Worker: "browser-test"}})

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(browserDataDir(t)),
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
	issueJSON := func(typ, params string) string {
		t.Helper()
		id := uuid.NewString()
		r := do(t, http.MethodPost, srv.URL+"/v1/commands", apitest.IssuerToken, `{"id":"`+id+`","type":"`+typ+`","params":`+params+`}`)
		if r.code != http.StatusAccepted {
			t.Fatalf("issue: %d %s", r.code, r.body)
		}
		return id
	}
	issueFailing := func() string { t.Helper(); return issueJSON("demo.fail", `{"times":10}`) }
	issueSleep := func(ms int) string { t.Helper(); return issueJSON("demo.sleep", fmt.Sprintf(`{"ms":%d}`, ms)) }
	poisonEntry := func(id string) int {
		return do(t, http.MethodGet, srv.URL+"/v1/poison/"+id, apitest.OperatorToken, "").code
	}
	// running waits until this server's processor runs attempt n of id.
	running := func(id string, n int) {
		t.Helper()
		waitFor(t, 30*time.Second, fmt.Sprintf("attempt %d of %s runs", n, id), func() bool {
			f, ok := srv.Client.Running(id)
			return ok && f.Attempt == n
		})
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
	if txt := op.text(); !strings.Contains(txt, "Processors") || !strings.Contains(txt, "0 poisoned commands") {
		t.Fatalf("overview after login:\n%s", txt)
	}

	// ---- a command caught in its first second, and one in its retry ----
	// A held command takes the only handler slot: running, its started
	// event not written ("running (stored: pending)").
	blocker := issueJSON("demo.hold", `{"key":"blocker"}`)
	running(blocker, 1)
	runner := newTab(t, browser, "runner")
	runner.run(chromedp.Navigate(srv.URL+"/ui/commands/"+blocker), chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	if got := runner.textOf("#status"); got != "running (stored: pending)" {
		t.Fatalf("the held command's status: %q", got)
	}
	runner.shoot(dir, "command-running-pending", summaryCheck)

	// A command's page goes pending → running → completed without a
	// reload: it waits behind the held one.
	watched := issueSleep(1500)
	// (A tab in the background runs no refresh: the operator's comes to
	// the front.)
	op.run(cdppage.BringToFront(), chromedp.Navigate(srv.URL+"/ui/commands/"+watched), chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	op.mark()
	// Record every state the page shows, as it shows it.
	op.eval(`window.cmdqStates = [document.getElementById("status").textContent.trim()];
new MutationObserver(() => { const s = document.getElementById("status"); if (s && s.textContent.trim() !== window.cmdqStates.at(-1)) window.cmdqStates.push(s.textContent.trim()); })
  .observe(document.getElementById("live"), {childList: true, subtree: true, characterData: true}); true`, nil)
	op.waitJS("the page follows its live feed", `/^Updated \d+ s ago · live/.test(document.getElementById("updated").textContent)`, 20*time.Second)
	release("blocker")
	op.waitJS("the command completes on the page", `window.cmdqStates.at(-1) === "completed"`, 60*time.Second)
	var states []string
	op.eval(`window.cmdqStates`, &states)
	if op.reloaded() {
		t.Fatal("the command page was reloaded to follow the command")
	}
	// pending, then running (from the processor's in-flight set: "running
	// (stored: pending)"), then completed.
	if len(states) < 3 || states[0] != "pending" || !strings.HasPrefix(states[1], "running") || states[len(states)-1] != "completed" {
		t.Fatalf("the page showed %q, want pending, running…, completed", states)
	}
	for _, st := range states[1 : len(states)-1] {
		if !strings.HasPrefix(st, "running") {
			t.Fatalf("the page showed %q, want pending, running…, completed", states)
		}
	}
	t.Logf("the command page showed %q live", states)

	// The second attempt of a command whose first failed: "running
	// (stored: retrying)".
	retried := issueJSON("demo.hold", `{"key":"retried","failFirst":true}`)
	running(retried, 2)
	runner.run(chromedp.Navigate(srv.URL+"/ui/commands/"+retried), chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	if got := runner.textOf("#status"); got != "running (stored: retrying)" {
		t.Fatalf("the retried command's status: %q", got)
	}
	runner.shoot(dir, "command-running-retrying", summaryCheck)
	// The list shows it running, since when, with its parameters.
	runner.run(chromedp.Navigate(srv.URL+"/ui/commands?type=demo.hold"), chromedp.WaitVisible(`tr.command`, chromedp.ByQuery))
	var row string
	runner.eval(`[...document.querySelectorAll("tr.command")].find(r => r.textContent.includes("`+retried+`")).innerText`, &row)
	if !strings.Contains(row, "running") || !strings.Contains(row, "since ") || !strings.Contains(row, `"failFirst":true`) {
		t.Errorf("the commands list shows the retried command as %q", row)
	}
	release("retried")
	waitState(t, srv, retried, cmdq.StateCompleted, 30*time.Second)

	// ---- failing commands appear in the poison list without a reload ----
	op.run(cdppage.BringToFront(), chromedp.Navigate(srv.URL+"/ui/poison"), chromedp.WaitVisible(`#live`, chromedp.ByQuery))
	op.mark()
	first := issueFailing()
	op.waitJS("the poisoned command appears in the list", `[...document.querySelectorAll("tr.entry code")].some(c => c.textContent === "`+first+`")`, 30*time.Second)
	if op.reloaded() {
		t.Fatal("the poison list was reloaded to show the new entry")
	}
	op.waitJS("the freshness line", `/^Updated \d+ s ago · refreshes every 5 s$/.test(document.getElementById("updated").textContent)`, 10*time.Second)
	second, third := issueFailing(), issueFailing()
	op.waitJS("three entries", `document.querySelectorAll("tr.entry").length === 3`, 30*time.Second)
	var entryRow []string
	op.eval(`[...document.querySelectorAll("tr.entry")].find(r => r.textContent.includes("`+first+`")).querySelectorAll("td.attempts, td.lasterror, td.params").values().map(c => c.textContent.trim()).toArray()`, &entryRow)
	if len(entryRow) != 3 || entryRow[0] != "1" || entryRow[1] != "demo.fail: planned failure 1 of 10" || entryRow[2] != `{"times":10}` {
		t.Errorf("poison list row: %q, want attempts 1, the error without its prefix, the params", entryRow)
	}
	op.shoot(dir, "poison-list")

	// ---- the overview: the processor, the throughput, the failures ----
	op.run(chromedp.Navigate(srv.URL+"/ui/"), chromedp.WaitVisible(`#live`, chromedp.ByQuery))
	op.waitJS("the heartbeat reports the processor and its last failure", `document.querySelectorAll("tr.processor").length === 1 && document.querySelectorAll("tr.failure").length === 3 && document.getElementById("throughput").querySelectorAll(".num").length === 3`, 30*time.Second)
	if txt := op.text(); !strings.Contains(txt, "3 poisoned commands") || !strings.Contains(txt, "browser-test (this server)") || !strings.Contains(txt, first) {
		t.Fatalf("overview:\n%s", txt)
	}
	op.shoot(dir, "overview")

	// ---- a poison entry's page ----
	op.run(chromedp.Navigate(srv.URL+"/ui/poison"), chromedp.WaitVisible(`tr.entry`, chromedp.ByQuery),
		chromedp.Click(`a.entry-link[href="/ui/poison/`+first+`"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#last-error`, chromedp.ByQuery))
	txt := op.text()
	for _, want := range []string{"Poison entry " + first, "demo.fail", "attempts exhausted", "attempt 1 of at most 1 failed: demo.fail: planned failure 1 of 10", `{"times":10}`, "Requeue", "Discard…"} {
		if !strings.Contains(txt, want) {
			t.Errorf("poison entry page lacks %q:\n%s", want, txt)
		}
	}
	op.shoot(dir, "poison-entry")

	// ---- the command's page, from the entry ----
	op.run(chromedp.Click(`#command-link`, chromedp.ByQuery), chromedp.WaitVisible(`#status`, chromedp.ByQuery))
	txt = op.text()
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
	// With a ceiling of 1 it fails again at once and is poisoned again;
	// the message's "It is … now" follows the state the page shows.
	watcher.waitJS("it is poisoned again", `[...document.querySelectorAll("tr.event .badge")].map(b => b.textContent).join(",").endsWith("requeued,started,failed,poisoned")`, 30*time.Second)
	// The operator's tab, back in front, refreshes at once.
	op.run(cdppage.BringToFront())
	op.waitJS("the page shows it poisoned", `document.getElementById("status").dataset.state === "poisoned"`, 30*time.Second)
	op.eval(`document.querySelector("p.flash").textContent`, &flash)
	if !strings.HasSuffix(flash, "It is poisoned now.") {
		t.Errorf("the flash says %q while the page shows poisoned", flash)
	}
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

	// ---- the recent commands: counts, charts with axes, latency, breakdowns ----
	op.run(chromedp.Navigate(srv.URL+"/ui/commands"), chromedp.WaitVisible(`svg`, chromedp.ByQuery))
	var tabs []string
	op.eval(`[...document.querySelectorAll("nav.tabs a")].map(a => a.textContent.replace(/\s+/g, " ").trim())`, &tabs)
	// Two demo.hold, one demo.sleep (completed), three demo.fail (discarded).
	if len(tabs) != 8 || tabs[0] != "all 6" || tabs[4] != "completed 3" || tabs[6] != "discarded 3" || tabs[7] != "cancelled 0" {
		t.Errorf("state counts of the last hour: %q, want all 6, completed 3, discarded 3", tabs)
	}
	var charts []string
	op.eval(`[...document.querySelectorAll("figure.chart")].map(f => f.querySelector("figcaption").textContent.replace(/\s+/g, " ").trim() + " / " + f.querySelectorAll("rect").length + " / " + f.querySelector(".yaxis").textContent.trim().split(/\s+/)[0])`, &charts)
	if len(charts) != 4 || !strings.HasPrefix(charts[0], "Completed: 3") || !strings.HasPrefix(charts[2], "Poisoned: 4") || strings.Contains(charts[0], "/ 0 /") ||
		!strings.Contains(charts[3], "Latency, issue → start: p50 ") || strings.Contains(charts[3], "/ 0 /") {
		t.Errorf("charts: %q", charts)
	}
	var groups []string
	op.eval(`[...document.querySelectorAll("table.bytype tr.group")].map(r => r.cells[0].textContent + " " + r.cells[1].textContent)`, &groups)
	if !slices.Contains(groups, "demo.fail 3") || !slices.Contains(groups, "demo.hold 2") {
		t.Errorf("by type: %q", groups)
	}
	op.shoot(dir, "commands")
	// The state tabs filter; the type filter takes a prefix in any case;
	// the range links change the range.
	op.run(chromedp.Click(`nav.tabs a[href$="state=discarded"]`, chromedp.ByQuery))
	op.waitURL("state=discarded")
	var rows int
	op.eval(`document.querySelectorAll("tr.command").length`, &rows)
	if rows != 3 {
		t.Errorf("the discarded filter lists %d commands, want 3", rows)
	}
	op.run(chromedp.Navigate(srv.URL+"/ui/commands"), chromedp.WaitVisible(`#filter-type`, chromedp.ByQuery),
		chromedp.SendKeys(`#filter-type`, "DEMO.H", chromedp.ByQuery), chromedp.Submit(`#filter-type`, chromedp.ByQuery))
	op.waitURL("type=DEMO.H")
	op.eval(`document.querySelectorAll("tr.command").length`, &rows)
	if rows != 2 {
		t.Errorf("the type filter DEMO.H lists %d commands, want the 2 demo.hold", rows)
	}
	op.run(chromedp.Click(`nav.ranges a[href*="range=7d"]`, chromedp.ByQuery))
	op.waitURL("range=7d")
	if txt := op.textOf("#scope"); !strings.Contains(txt, "changed in the last 7 d") || !strings.Contains(txt, "“DEMO.H”") {
		t.Errorf("7-day view of DEMO.H: %q", txt)
	}

	// ---- theme and auto-refresh: chosen, applied at once, remembered ----
	op.run(chromedp.Navigate(srv.URL+"/ui/queues"), chromedp.WaitVisible(`tr.queue`, chromedp.ByQuery),
		chromedp.SetValue(`#pref-theme`, "dark", chromedp.ByQuery),
		chromedp.Evaluate(`document.getElementById("pref-theme").dispatchEvent(new Event("change")); true`, nil))
	op.waitJS("the dark theme applies at once", `document.documentElement.dataset.theme === "dark" && getComputedStyle(document.body).backgroundColor === "rgb(13, 17, 23)"`, 10*time.Second)
	op.run(chromedp.Click(`#pause`, chromedp.ByQuery))
	op.waitJS("the page says it is paused", `/auto-refresh paused$/.test(document.getElementById("updated").textContent)`, 10*time.Second)
	// Remembered: a reload renders both (the browser's scheme is light).
	op.waitJS("the preferences are stored", `fetch(location.href).then(r => r.text()).then(t => /data-theme="dark" data-refresh-pref="off"/.test(t))`, 10*time.Second)
	op.run(chromedp.Reload(), chromedp.WaitVisible(`tr.queue`, chromedp.ByQuery))
	op.waitJS("still dark and paused after a reload", `document.documentElement.dataset.theme === "dark" && /auto-refresh paused$/.test(document.getElementById("updated").textContent) && document.getElementById("pause").textContent === "Resume"`, 10*time.Second)
	op.layout("queues, dark theme chosen, light system")
	op.run(chromedp.Click(`#pause`, chromedp.ByQuery),
		chromedp.SetValue(`#pref-theme`, "system", chromedp.ByQuery),
		chromedp.Evaluate(`document.getElementById("pref-theme").dispatchEvent(new Event("change")); true`, nil))
	op.waitJS("back to the system's theme, refreshing", `!document.documentElement.dataset.theme && /refreshes every 5 s$/.test(document.getElementById("updated").textContent)`, 10*time.Second)
	op.waitJS("the preferences are stored", `fetch(location.href).then(r => r.text()).then(t => !/data-theme=/.test(t) && /data-refresh-pref="auto"/.test(t))`, 10*time.Second)

	// ---- the queues view: a pause, a command that waits, its cancel asks first ----
	op.run(chromedp.Click(`form[action$="/queues/commands/pause"] button`, chromedp.ByQuery), chromedp.WaitVisible(`p.flash`, chromedp.ByQuery))
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
	waitState(t, srv, waiting, cmdq.StateCancelled, 30*time.Second)
	op.run(chromedp.Navigate(srv.URL+"/ui/queues"), chromedp.WaitVisible(`tr.queue`, chromedp.ByQuery),
		chromedp.Click(`form[action$="/queues/commands/resume"] button`, chromedp.ByQuery), chromedp.WaitVisible(`p.flash`, chromedp.ByQuery))

	// ---- error pages keep the navigation ----
	op.expect("/ui/commands/00000000-0000-4000-8000-000000000000")
	op.run(chromedp.Navigate(srv.URL+"/ui/commands/00000000-0000-4000-8000-000000000000"), chromedp.WaitVisible(`p.err`, chromedp.ByQuery))
	op.shoot(dir, "error")
	op.expect("/ui/no/such/page")
	op.run(chromedp.Navigate(srv.URL+"/ui/no/such/page"), chromedp.WaitVisible(`p.err`, chromedp.ByQuery))
	var nav int
	op.eval(`document.querySelectorAll("nav.bar a[href='/ui/commands'], nav.bar a[href='/ui/poison']").length`, &nav)
	if nav != 2 {
		t.Errorf("the 404 page has %d of the Commands and Poison links, want 2", nav)
	}
	op.shoot(dir, "not-found")

	// ---- a reader sees no controls ----
	fourth := issueFailing()
	waitState(t, srv, fourth, cmdq.StatePoisoned, 30*time.Second)
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
	reader.eval(`[...document.querySelectorAll("a[href*='/poison'], form[action*='/poison'], button")].map(e => e.outerHTML.slice(0, 80)).filter(h => !h.includes("Log out") && !h.includes(">Open<") && !h.includes('id="pause"') && !h.includes('class="apply"'))`, &controls)
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

	for _, tb := range []*tab{op, runner, watcher, reader} {
		if errs := tb.consoleErrors(); len(errs) > 0 {
			t.Errorf("%s tab: console errors:\n%s", tb.name, strings.Join(errs, "\n"))
		}
	}
	t.Logf("the browser scenario took %s (%s of it checking and photographing pages)", time.Since(began).Round(100*time.Millisecond), shootTime.Round(100*time.Millisecond))
}

// emulateScheme sets prefers-color-scheme ("light" or "dark").
func emulateScheme(ctx context.Context, scheme string) error {
	return emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}).Do(ctx)
}
