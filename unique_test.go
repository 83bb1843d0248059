package cmdq_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// countCommands returns the number of commands of type typ stored under
// the client's prefix.
func countCommands(t *testing.T, c *cmdq.Client, typ string) int {
	t.Helper()
	page, err := c.ListCommands(ctxT(t), cmdq.CommandQuery{Type: typ, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Commands)
}

// TestUniqueKey: within its window a unique key returns the first command
// (Duplicate, the first ID, the first parameters) whatever the parameters
// or correlation ID, and nothing is written; another key, another type or
// the next window make a new command; IssueMany collapses a repeated key
// too. Both stores.
func TestUniqueKey(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		clock := &testClock{now: time.Now().UTC().Truncate(time.Hour).Add(10 * time.Minute)}
		c := newTuned(t, s.st, s.prefix, fast(), tuning.Switches{Now: clock.Now})
		first, err := c.Issue(ctx, greet{Name: "first"}, cmdq.UniqueKey("order-42", time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if first.Existing || first.Duplicate {
			t.Fatalf("first issue: %+v, want a new command", first)
		}
		clock.Add(49 * time.Minute) // the same hour's bucket
		dup, err := c.Issue(ctx, greet{Name: "other params"}, cmdq.UniqueKey("order-42", time.Hour), cmdq.CorrelationID("another"))
		if err != nil {
			t.Fatalf("duplicate with other params: %v (a unique duplicate is not an ID conflict)", err)
		}
		if !dup.Duplicate || !dup.Existing || dup.ID != first.ID {
			t.Fatalf("duplicate: %+v, want Duplicate with the first ID %s", dup, first.ID)
		}
		raw, err := c.IssueRaw(ctx, cmdq.Raw{Type: "greet", Params: []byte(`{"name":"raw"}`), UniqueKey: "order-42", UniqueWindow: time.Hour})
		if err != nil || !raw.Duplicate || raw.ID != first.ID {
			t.Fatalf("raw duplicate: %+v %v", raw, err)
		}
		_, params, err := c.GetParams(ctx, first.ID)
		if err != nil || string(params) != `{"name":"first"}` {
			t.Fatalf("params %s %v, want the first issue's", params, err)
		}
		otherKey, err := c.Issue(ctx, greet{Name: "first"}, cmdq.UniqueKey("order-43", time.Hour))
		if err != nil || otherKey.Duplicate || otherKey.ID == first.ID {
			t.Fatalf("another key: %+v %v, want a new command", otherKey, err)
		}
		otherType, err := c.IssueRaw(ctx, cmdq.Raw{Type: "greet2", UniqueKey: "order-42", UniqueWindow: time.Hour})
		if err != nil || otherType.Duplicate || otherType.ID == first.ID {
			t.Fatalf("another type: %+v %v, want a new command", otherType, err)
		}
		otherWindow, err := c.Issue(ctx, greet{Name: "first"}, cmdq.UniqueKey("order-42", 2*time.Hour))
		if err != nil || otherWindow.Duplicate || otherWindow.ID == first.ID {
			t.Fatalf("another window length: %+v %v, want a new command", otherWindow, err)
		}
		clock.Add(2 * time.Minute) // the next hour: a new window
		next, err := c.Issue(ctx, greet{Name: "next hour"}, cmdq.UniqueKey("order-42", time.Hour))
		if err != nil || next.Duplicate || next.Existing || next.ID == first.ID {
			t.Fatalf("after the window: %+v %v, want a new command", next, err)
		}
		again, err := c.Issue(ctx, greet{Name: "x"}, cmdq.UniqueKey("order-42", time.Hour))
		if err != nil || !again.Duplicate || again.ID != next.ID {
			t.Fatalf("in the next window: %+v %v, want the next window's command %s", again, err, next.ID)
		}
		many, err := c.IssueMany(ctx, cmdq.WithOptions(greet{Name: "m1"}, cmdq.UniqueKey("batch-1", time.Hour)),
			cmdq.WithOptions(greet{Name: "m2"}, cmdq.UniqueKey("batch-1", time.Hour)))
		if err != nil || many[0].Duplicate || !many[1].Duplicate || many[0].ID != many[1].ID {
			t.Fatalf("IssueMany with a repeated key: %+v %v", many, err)
		}
		if n := countCommands(t, c, "greet"); n != 5 { // order-42 ×2 windows, 2h window, order-43, batch-1
			t.Fatalf("%d greet commands stored, want 5", n)
		}
	})
}

// TestUniqueKeyInvalid: a window of 0, a negative or too long one, an
// empty or too long key and a key with an ID fail with ErrInvalidUnique,
// and nothing is stored.
func TestUniqueKeyInvalid(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newClient(t, s, fast())
		for name, opts := range map[string][]cmdq.IssueOption{
			"window 0":        {cmdq.UniqueKey("k", 0)},
			"negative window": {cmdq.UniqueKey("k", -time.Hour)},
			"short window":    {cmdq.UniqueKey("k", time.Millisecond)},
			"long window":     {cmdq.UniqueKey("k", cmdq.MaxUniqueWindow+time.Second)},
			"empty key":       {cmdq.UniqueKey("", time.Hour)},
			"long key":        {cmdq.UniqueKey(strings.Repeat("k", cmdq.MaxUniqueKeyLength+1), time.Hour)},
			"with an ID":      {cmdq.CommandID(cmdq.NewID()), cmdq.UniqueKey("k", time.Hour)},
		} {
			_, err := c.Issue(ctx, greet{Name: name}, opts...)
			if !errors.Is(err, cmdq.ErrInvalidUnique) {
				t.Errorf("%s: %v, want ErrInvalidUnique", name, err)
			}
		}
		if n := countCommands(t, c, "greet"); n != 0 {
			t.Fatalf("%d commands stored by bad unique issues, want 0", n)
		}
	})
}

// TestUniqueKeyCost: a unique command's first issue costs what a plain
// issue costs (one batch and one enqueue on the two-call path, Azure's),
// and a duplicate one failed batch and one point read: no message, no
// other write.
func TestUniqueKeyCost(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cs := testenv.NewCounting(s.st)
		c := newTuned(t, cs, s.prefix, fast(), tuning.Switches{})
		if _, err := c.Issue(ctx, greet{Name: "warm the day table"}); err != nil {
			t.Fatal(err)
		}
		cs.Reset()
		first, err := c.Issue(ctx, greet{Name: "a"}, cmdq.UniqueKey("cost", time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if got := cs.String(); got != "Batch=1 Enqueue=1" {
			t.Fatalf("first unique issue: %s, want Batch=1 Enqueue=1", got)
		}
		cs.Reset()
		dup, err := c.Issue(ctx, greet{Name: "b"}, cmdq.UniqueKey("cost", time.Hour))
		if err != nil || !dup.Duplicate || dup.ID != first.ID {
			t.Fatalf("duplicate: %+v %v", dup, err)
		}
		if got := cs.String(); got != "Batch=1 Get=1" {
			t.Fatalf("unique duplicate: %s, want Batch=1 Get=1 (the failed batch and the point read)", got)
		}
		if n := cs.Queued(t, s.prefix+"-commands"); n != 2 {
			t.Fatalf("%d messages queued, want 2 (the duplicate enqueues none)", n)
		}
	})
}
