package console_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// healthRow returns the value of the overview's health panel row label
// ("" when there is none).
func healthRow(p page, label string) (string, bool) {
	for _, dl := range elements(p.doc, "dl", func(n *html.Node) bool { return hasClass(n, "health") }) {
		for dt := dl.FirstChild; dt != nil; dt = dt.NextSibling {
			if dt.Type != html.ElementNode || dt.Data != "dt" || text(dt) != label {
				continue
			}
			for dd := dt.NextSibling; dd != nil; dd = dd.NextSibling {
				if dd.Type == html.ElementNode && dd.Data == "dd" {
					return text(dd), true
				}
			}
		}
	}
	return "", false
}

// TestConsoleOverviewDoorbells: on Azure (Azurite), where processes wake
// each other, the overview lists each processor's doorbell address
// (Wake-ups) and this server's in its health panel; on a server without
// a processor whose wake-ups a processor elsewhere does not ack (its
// advertised address reaches nothing), that processor is marked "not
// acked: its commands start at its next poll", a paragraph explains it,
// and the health panel lists the address.
func TestConsoleOverviewDoorbells(t *testing.T) {
	t.Parallel()
	env := testenv.Open(t, "azure")
	// The store itself: it holds the wake-ups' secret.
	worker := apitest.Start(t, apitest.Options{Store: env.Store.Store, Prefix: env.Prefix, Config: cmdq.Config{Worker: "ui-worker"}, Setup: func(c *cmdq.Client) error {
		return cmdq.Register(c, func(context.Context, resize, *cmdq.Attempt) error { return nil })
	}})
	// The processor's run opens its doorbell, then writes its heartbeat.
	var wake string
	var p page
	var rows []*html.Node
	waitFor(t, 30*time.Second, "the processor listens for wake-ups and is listed", func() bool {
		wake = worker.Client.Health().Wake
		p = newBrowser(t, worker.URL).get("/ui/").want(t, http.StatusOK)
		rows = elements(p.doc, "tr", func(n *html.Node) bool { return hasClass(n, "processor") })
		return wake != "" && len(rows) > 0
	})
	if len(rows) != 1 || cells(rows[0])[5] != wake || hasClass(rows[0], "unreachable") {
		t.Fatalf("processor rows %d, want one with its doorbell %s under Wake-ups:\n%s", len(rows), wake, text(p.doc))
	}
	if got, _ := healthRow(p, "Doorbell listens on"); got != wake {
		t.Fatalf("health panel: doorbell %q, want %s", got, wake)
	}
	if _, ok := healthRow(p, "Doorbells not acking"); ok || byID(p, "unreachable") != "" {
		t.Fatal("the overview names unreachable doorbells before any wake-up went unacked")
	}

	other := testenv.Open(t, "azure")
	front := apitest.Start(t, apitest.Options{Store: other.Store.Store, Prefix: other.Prefix})
	dead := apitest.DeadDoorbell(t)
	apitest.StartPeer(t, other.Store.Store, other.Prefix, "behind-a-firewall", dead)
	front.RingUntilUnreachable(t, dead)
	p = newBrowser(t, front.URL).get("/ui/").want(t, http.StatusOK)
	rows = elements(p.doc, "tr", func(n *html.Node) bool { return hasClass(n, "processor") })
	if len(rows) != 1 || !hasClass(rows[0], "unreachable") {
		t.Fatalf("processor rows %d, want behind-a-firewall marked unreachable:\n%s", len(rows), text(p.doc))
	}
	if c := cells(rows[0]); c[0] != "behind-a-firewall" || c[5] != dead+" not acked: its commands start at its next poll" {
		t.Fatalf("processor row %q, want its doorbell %s not acked", c, dead)
	}
	contains(t, p, "Wake-ups not acked by 1 processor: this server rang its doorbell and got no answer")
	if got, _ := healthRow(p, "Doorbells not acking"); got != dead {
		t.Fatalf("health panel: unreachable %q, want %s:\n%s", got, dead, text(p.doc))
	}
}
