package cmdq_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// TestDeclaredRouting: a type that declares its queue is routed there by an
// issuing-only client with no handler and no wiring; a worker client
// takes the declared options as its defaults.
func TestDeclaredRouting(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		front := newClient(t, s, cmdq.Config{})
		res, err := front.Issue(ctx, resize{URL: "a.png"})
		if err != nil || res.Queue != "images" {
			t.Fatalf("Issue: %+v %v", res, err)
		}
		if n, err := front.QueueDepth(ctx, "images"); err != nil || n != 1 {
			t.Fatalf("images queue holds %d (%v), want 1", n, err)
		}
		if n, _ := front.QueueDepth(ctx, cmdq.DefaultQueue); n != 0 {
			t.Fatalf("default queue holds %d, want 0", n)
		}
		// By type name: routed once declared.
		if err := cmdq.Declare[resize](front); err != nil {
			t.Fatal(err)
		}
		raw, err := front.IssueRaw(ctx, cmdq.Raw{Type: "images.resize", Params: []byte(`{"url":"b.png"}`)})
		if err != nil || raw.Queue != "images" {
			t.Fatalf("IssueRaw: %+v %v", raw, err)
		}

		worker := newClient(t, s, fast())
		var ran atomic.Int64
		if err := cmdq.Register(worker, func(context.Context, resize, *cmdq.Attempt) error { ran.Add(1); return nil }); err != nil {
			t.Fatal(err)
		}
		def, _ := worker.Lookup("images.resize")
		if o := def.Options; o.Queue != "images" || o.Lease != 2*time.Minute || o.PoisonCeiling != 3 {
			t.Fatalf("registered options %+v, want the declared ones", def.Options)
		}
		if err := worker.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{res.ID, raw.ID} {
			if st, err := worker.Wait(ctx, id); err != nil || st.State != cmdq.StateCompleted || st.Queue != "images" {
				t.Fatalf("Wait %s: %+v %v", id, st, err)
			}
		}
		if ran.Load() != 2 {
			t.Fatalf("handler ran %d times, want 2", ran.Load())
		}
	})
}

// TestDeclaredParamsChecked: params issued by type name (IssueRaw, as the
// HTTP API and the CLI do) must decode into the Go type the Client
// registered or declared; bad ones fail with ErrInvalidParams, naming the
// field, and nothing is stored. Types the Client does not know are not
// checked; typed Issue needs no check.
func TestDeclaredParamsChecked(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		front := newClient(t, s, fast())
		if err := cmdq.Declare[resize](front); err != nil {
			t.Fatal(err)
		}
		id := cmdq.NewID()
		_, err := front.IssueRaw(ctx, cmdq.Raw{ID: id, Type: "images.resize", Params: []byte(`{"url":42}`)})
		if !errors.Is(err, cmdq.ErrInvalidParams) || !strings.Contains(err.Error(), "url") {
			t.Fatalf("IssueRaw with a number for url: %v, want ErrInvalidParams naming url", err)
		}
		if _, err := front.Get(ctx, id); !errors.Is(err, cmdq.ErrNotFound) {
			t.Fatalf("the refused command was stored: %v", err)
		}
		_, err = front.IssueRaw(ctx, cmdq.Raw{Type: "images.resize", Params: []byte(`{"url":"a.png","width":1}`)})
		if !errors.Is(err, cmdq.ErrInvalidParams) || !strings.Contains(err.Error(), "width") {
			t.Fatalf("IssueRaw with an unknown field: %v, want ErrInvalidParams naming width", err)
		}
		if _, err := front.IssueRaw(ctx, cmdq.Raw{Type: "images.resize", Params: []byte(`{"url":"a.png"}`)}); err != nil {
			t.Fatalf("IssueRaw with good params: %v", err)
		}
		if _, err := front.IssueRaw(ctx, cmdq.Raw{Type: "other.type", Params: []byte(`{"anything":1}`)}); err != nil {
			t.Fatalf("IssueRaw of a type the Client does not know: %v", err)
		}
		if _, err := front.Issue(ctx, resize{URL: "b.png"}); err != nil {
			t.Fatalf("typed Issue: %v", err)
		}
	})
}

// TestDeclareWithKeepsEveryOption: a type declared with options (not
// registered) keeps every one of them, as Lookup shows.
func TestDeclareWithKeepsEveryOption(t *testing.T) {
	t.Parallel()
	c := newClient(t, openStore(t, "embedded"), fast())
	opts := cmdq.CommandOptions{Queue: "mail", PoisonCeiling: 4, Lease: 45 * time.Second, Timeout: 5 * time.Minute,
		Retention: cmdq.Retention{Completed: 2 * time.Hour, Discarded: 3 * time.Hour}, MaxConcurrency: 3,
		GlobalConcurrency: 2, MaxDeferrals: 7, Rate: cmdq.Rate{Limit: 5, Per: time.Second}}
	if err := cmdq.DeclareWith[greet](c, opts); err != nil {
		t.Fatal(err)
	}
	info, ok := c.Lookup("greet")
	if !ok || info.Handled {
		t.Fatalf("Lookup: %+v %v, want a declared type", info, ok)
	}
	got := info.Options
	if got.Queue != opts.Queue || got.PoisonCeiling != opts.PoisonCeiling || got.Lease != opts.Lease || got.Timeout != opts.Timeout ||
		got.Retention != opts.Retention || got.MaxConcurrency != opts.MaxConcurrency || got.GlobalConcurrency != opts.GlobalConcurrency ||
		got.MaxDeferrals != opts.MaxDeferrals || got.Rate != opts.Rate {
		t.Fatalf("declared options %+v came back as %+v", opts, got)
	}
}
