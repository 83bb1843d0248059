package cmdq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// TestRunFor: a time-boxed run through the client returns in time with what
// it did.
func TestRunFor(t *testing.T) {
	t.Parallel()
	s := openStore(t, "embedded")
	ctx := ctxT(t)
	c := newClient(t, s, fast())
	if _, err := c.RunFor(ctx, time.Second); !errors.Is(err, cmdq.ErrNoHandlers) {
		t.Fatalf("RunFor without handlers: %v", err)
	}
	if err := cmdq.Register(c, func(context.Context, greet, *cmdq.Attempt) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.Issue(ctx, greet{Name: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	sum, err := c.RunFor(ctx, 2*time.Second)
	if err != nil || sum.Completed != 3 || time.Since(start) > 2*time.Second {
		t.Fatalf("RunFor: %+v %v after %s", sum, err, time.Since(start))
	}
	if st := c.Stats(); st.Completed != 3 || st.Running {
		t.Fatalf("stats after RunFor %+v", st)
	}
}

// TestDeleteStorage: the prefix's queues and tables go, another prefix's
// stay, and the client works again afterwards.
func TestDeleteStorage(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newClient(t, s, cmdq.Config{})
		res, err := c.Issue(ctx, resize{URL: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Issue(ctx, greet{Name: "y"}); err != nil {
			t.Fatal(err)
		}
		other, err := cmdq.New(s.st, cmdq.Config{Prefix: s.prefix + "x"}) // shares the "<prefix>" start
		if err != nil {
			t.Fatal(err)
		}
		kept, err := other.Issue(ctx, greet{Name: "z"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteStorage(ctx); err != nil {
			t.Fatal(err)
		}
		if qs, err := s.st.Queues(ctx, s.prefix+"-"); err != nil || len(qs) != 0 {
			t.Fatalf("queues left %q %v", qs, err)
		}
		ts, err := s.st.Tables(ctx, s.prefix)
		dayTable := s.prefix + "xcommands" + time.Now().UTC().Format("20060102") // the other prefix's day table
		if err != nil || !slices.Equal(ts, []string{s.prefix + "xcommands", dayTable, s.prefix + "xpoison"}) {
			t.Fatalf("tables left %q %v; want only the other prefix's", ts, err)
		}
		if _, err := other.Get(ctx, kept.ID); err != nil {
			t.Fatalf("the other prefix's command: %v", err)
		}
		if s.driver == "azure" {
			return // Azure refuses the deleted names for about 30 s
		}
		if _, err := c.Get(ctx, res.ID); !errors.Is(err, cmdq.ErrNotFound) {
			t.Fatalf("Get after DeleteStorage: %v", err)
		}
		if _, err := c.Issue(ctx, greet{Name: "again"}); err != nil {
			t.Fatalf("Issue after DeleteStorage: %v", err)
		}
	})
}
