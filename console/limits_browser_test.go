package console_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// limitedHold is demo.hold under a global concurrency limit of 1.
type limitedHold struct {
	Key string `json:"key"`
}

func (limitedHold) CommandType() string { return "demo.limited" }

// tenantHold is demo.hold limited to 1 at a time per tenant.
type tenantHold struct {
	Key    string `json:"key"`
	Tenant string `json:"tenant"`
}

func (tenantHold) CommandType() string { return "demo.tenant" }

func (h tenantHold) LimitKey() string { return h.Tenant }

// TestBrowserFlowControl: in a real browser (headless Chromium), with one
// command of a type limited to 1 running and another waiting, and a
// command behind the running head of its order key: the Queues page lists
// the limit, "1 of 1" in use and who holds the permit, with a link to the
// command it runs; the waiting command's page says it waits for a permit
// (1 of 1 held, by whom); the ordered one's page shows its order key and
// says it waits behind the head, linked. Released, all complete. The pages
// pass the layout checks and are photographed.
func TestBrowserFlowControl(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	dir := artifactsDir(t)
	run := uuid.NewString()[:8]
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), Setup: func(c *cmdq.Client) error {
		if err := registerDemo(c); err != nil {
			return err
		}
		if err := cmdq.RegisterWith(c, func(ctx context.Context, cmd tenantHold, _ *cmdq.Attempt) error {
			select {
			case <-holdChan(cmd.Key):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, cmdq.HandlerOptions{GlobalConcurrencyPerKey: 1}); err != nil {
			return err
		}
		return cmdq.RegisterWith(c, func(ctx context.Context, cmd limitedHold, _ *cmdq.Attempt) error {
			select {
			case <-holdChan(cmd.Key):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, cmdq.HandlerOptions{GlobalConcurrency: 1})
	}})
	issue := func(body string) string {
		t.Helper()
		id := uuid.NewString()
		if r := do(t, http.MethodPost, srv.URL+"/v1/commands", apitest.IssuerToken, `{"id":"`+id+`",`+body[1:]); r.code != http.StatusAccepted {
			t.Fatalf("issue %s: %d %s", body, r.code, r.body)
		}
		return id
	}
	holder := issue(fmt.Sprintf(`{"type":"demo.limited","params":{"key":"%s-a"}}`, run))
	waitRunning(t, srv, holder)
	waiter := issue(fmt.Sprintf(`{"type":"demo.limited","params":{"key":"%s-b"}}`, run))
	head := issue(fmt.Sprintf(`{"type":"demo.hold","params":{"key":"%s-c"},"orderKey":"account-%s"}`, run, run))
	waitRunning(t, srv, head)
	behind := issue(fmt.Sprintf(`{"type":"demo.sleep","params":{"ms":10},"orderKey":"account-%s"}`, run))
	tenant := issue(fmt.Sprintf(`{"type":"demo.tenant","params":{"key":"%s-d","tenant":"acme-%s"}}`, run, run))
	waitRunning(t, srv, tenant)

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
		chromedp.SendKeys(`input[name=token]`, apitest.ReaderToken, chromedp.ByQuery),
		chromedp.Submit(`input[name=token]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#live`, chromedp.ByQuery))

	op.run(chromedp.Navigate(srv.URL+"/ui/queues"), chromedp.WaitVisible(`tr.limit`, chromedp.ByQuery))
	row := op.textOf("tr.limit")
	if !strings.Contains(row, "demo.limited") || !strings.Contains(row, "1 of 1") || !strings.Contains(row, holder) {
		t.Fatalf("the Queues page's limit row says %q, want demo.limited, 1 of 1 in use, held for %s", row, holder)
	}
	var link bool
	op.eval(`!!document.querySelector('tr.limit a[href$="/commands/`+holder+`"]')`, &link)
	if !link {
		t.Fatal("the permit's command is not linked")
	}
	keyed := op.textOf("tr.limit:nth-child(2)")
	if !strings.Contains(keyed, "demo.tenant") || !strings.Contains(keyed, "at most 1 per key") || !strings.Contains(keyed, "acme-"+run+": 1 held") ||
		!strings.Contains(keyed, "(key acme-"+run+") → "+tenant) {
		t.Fatalf("the Queues page's per-key limit row says %q, want demo.tenant, at most 1 per key, acme-%s holding 1 for %s", keyed, run, tenant)
	}
	op.shoot(dir, "queues-global-limits")

	op.run(chromedp.Navigate(srv.URL+"/ui/commands/"+waiter), chromedp.WaitVisible(`#waiting`, chromedp.ByQuery))
	var reason string
	op.eval(`document.getElementById("waiting").dataset.reason`, &reason)
	if got := op.textOf("#waiting"); reason != "permit" || !strings.Contains(got, "waiting for a permit of demo.limited (1 of 1 held by ") {
		t.Fatalf("the waiting command's page says (%s) %q, want a wait for a permit, 1 of 1 held", reason, got)
	}
	op.shoot(dir, "command-waiting-permit", summaryCheck)

	op.run(chromedp.Navigate(srv.URL+"/ui/commands/"+behind), chromedp.WaitVisible(`#waiting`, chromedp.ByQuery))
	op.eval(`document.getElementById("waiting").dataset.reason`, &reason)
	if got := op.textOf("#waiting"); reason != "order" || !strings.Contains(got, "behind command "+head+" on order key account-"+run) {
		t.Fatalf("the ordered command's page says (%s) %q, want behind %s on its key", reason, got, head)
	}
	op.eval(`!!document.querySelector('#waiting a[href$="/commands/`+head+`"]')`, &link)
	if !link || !strings.Contains(op.textOf("#order-key"), "account-"+run) {
		t.Fatalf("the head is not linked (%v), or the order key is not shown: %q", link, op.textOf("#order-key"))
	}
	op.shoot(dir, "command-waiting-order", summaryCheck)

	for _, k := range []string{"-a", "-b", "-c", "-d"} {
		release(run + k)
	}
	for _, id := range []string{holder, waiter, head, behind, tenant} {
		waitState(t, srv, id, cmdq.StateCompleted, time.Minute)
	}
}

// waitRunning waits until the server's processor runs command id's
// handler.
func waitRunning(t *testing.T, srv *apitest.Server, id string) {
	t.Helper()
	waitFor(t, time.Minute, "command "+id+" runs", func() bool {
		_, ok := srv.Client.Running(id)
		return ok
	})
}
