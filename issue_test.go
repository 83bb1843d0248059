package cmdq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// TestIssueRegisterWait: the common path on both drivers: register, start,
// issue with an ID (idempotent), wait, read the events, count live.
func TestIssueRegisterWait(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		var completed atomic.Int64
		cfg := fast()
		cfg.WaitPollInterval, cfg.WaitMaxPollInterval = time.Minute, time.Minute
		cfg.Observers = []cmdq.Observer{countCompleted{n: &completed}}
		c := newClient(t, s, cfg)
		if err := cmdq.Register(c, func(ctx context.Context, cmd greet, run *cmdq.Attempt) error {
			if cmd.Name == "" {
				return cmdq.Permanent(errors.New("no name"))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cmdq.Register(c, func(context.Context, resize, *cmdq.Attempt) error { return nil }); !errors.Is(err, cmdq.ErrStarted) {
			t.Fatalf("Register after Start: %v", err)
		}
		id := cmdq.NewID()
		res, err := c.Issue(ctx, greet{Name: "Ada"}, cmdq.CommandID(id))
		if err != nil || res.ID != id || res.Existing {
			t.Fatalf("Issue: %+v %v", res, err)
		}
		// Wait polls once a minute here: only the in-process outcome
		// ends it in time.
		st, err := c.Wait(ctx, id)
		if err != nil || st.State != cmdq.StateCompleted || st.Attempts != 1 {
			t.Fatalf("Wait: %+v %v", st, err)
		}
		again, err := c.Issue(ctx, greet{Name: "Ada"}, cmdq.CommandID(id))
		if err != nil || !again.Existing {
			t.Fatalf("re-issue: %+v %v", again, err)
		}
		if _, err := c.Issue(ctx, greet{Name: "Bob"}, cmdq.CommandID(id)); !errors.Is(err, cmdq.ErrIDConflict) {
			t.Fatalf("other params, same ID: %v", err)
		}
		evs, err := c.Events(ctx, id)
		if err != nil || !slices.Equal(kinds(evs), []cmdq.EventKind{cmdq.EventCreated, cmdq.EventStarted, cmdq.EventCompleted}) {
			t.Fatalf("events %v %v", kinds(evs), err)
		}
		bad, err := c.Issue(ctx, greet{})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.Wait(ctx, bad.ID); err != nil || st.State != cmdq.StatePoisoned {
			t.Fatalf("permanent error: %+v %v", st, err)
		}
		if !c.Stats().Running {
			t.Fatalf("stats %+v while processing", c.Stats())
		}
		if h := c.Health(); !h.Healthy() {
			t.Fatalf("health %+v", h)
		}
		m, err := c.Statuses(ctx, id, bad.ID, cmdq.NewID())
		if err != nil || len(m) != 2 || m[id].State != cmdq.StateCompleted || m[bad.ID].State != cmdq.StatePoisoned {
			t.Fatalf("Statuses: %v %v", m, err)
		}
		page, err := c.ListCommands(ctx, cmdq.CommandQuery{State: cmdq.StatePoisoned})
		if err != nil || len(page.Commands) != 1 || page.Commands[0].ID != bad.ID {
			t.Fatalf("ListCommands: %+v %v", page, err)
		}
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		// After Stop every count is final (live ones may trail the
		// stored outcome by a moment).
		if st := c.Stats(); st.Running || st.Completed != 1 || st.Poisoned != 1 || completed.Load() != 1 {
			t.Fatalf("stats after Stop %+v, observer saw %d completions", st, completed.Load())
		}
	})
}

// countCompleted counts completions.
type countCompleted struct{ n *atomic.Int64 }

func (o countCompleted) Observe(ob cmdq.Observation) {
	if ob.Kind == cmdq.ObservedCompleted {
		o.n.Add(1)
	}
}

// TestIssueMany: a batch of commands, one with its own ID; on the embedded
// store the batch is one commit.
func TestIssueMany(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newClient(t, s, cmdq.Config{})
		if _, err := c.Issue(ctx, greet{Name: "warm"}); err != nil { // creates the tables and queue
			t.Fatal(err)
		}
		const n = 100
		cmds := make([]cmdq.Command, n)
		for i := range cmds {
			cmds[i] = greet{Name: fmt.Sprint(i)}
		}
		id := cmdq.NewID()
		cmds[7] = cmdq.WithOptions(cmds[7], cmdq.CommandID(id))
		var before uint64
		emb, isEmbedded := s.st.(*embedded.Store)
		if isEmbedded {
			before = emb.Stats().Commits
		}
		results, err := c.IssueMany(ctx, cmds...)
		if err != nil || len(results) != n || results[7].ID != id {
			t.Fatalf("IssueMany: %d results, %v", len(results), err)
		}
		if isEmbedded {
			if commits := emb.Stats().Commits - before; commits != 1 {
				t.Errorf("%d commits for a batch of %d commands, want 1", commits, n)
			}
		}
		ids := make([]string, n)
		for i, r := range results {
			ids[i] = r.ID
		}
		m, err := c.Statuses(ctx, ids...)
		if err != nil || len(m) != n {
			t.Fatalf("Statuses: %d of %d, %v", len(m), n, err)
		}
		if d, _ := c.QueueDepth(ctx, cmdq.DefaultQueue); d != n+1 {
			t.Fatalf("queue holds %d messages, want %d", d, n+1)
		}
		_, err = c.IssueMany(ctx, greet{Name: "ok"}, cmdq.WithOptions(greet{Name: "bad"}, cmdq.CommandID("not-a-uuid")))
		if !errors.Is(err, cmdq.ErrInvalidID) || !strings.Contains(err.Error(), "command 1 (greet)") {
			t.Fatalf("IssueMany with a bad ID: %v", err)
		}
		// IDs issued before, and IDs repeated in the batch, are issued as
		// Issue would: the same command again is Existing, other params
		// under a taken ID conflict.
		other := cmdq.NewID()
		again, err := c.IssueMany(ctx,
			cmdq.WithOptions(greet{Name: "7"}, cmdq.CommandID(id)),     // results[7] before
			cmdq.WithOptions(greet{Name: "z"}, cmdq.CommandID(other)),  // new
			cmdq.WithOptions(greet{Name: "z"}, cmdq.CommandID(other)),  // the same again
			cmdq.WithOptions(greet{Name: "zz"}, cmdq.CommandID(other)), // other params
		)
		if !errors.Is(err, cmdq.ErrIDConflict) || !strings.Contains(err.Error(), "command 3 (greet)") || strings.Contains(err.Error(), "command 2 (greet)") {
			t.Fatalf("IssueMany with repeated IDs: %v", err)
		}
		if !again[0].Existing || again[1].Existing || !again[2].Existing || again[1].ID != other {
			t.Fatalf("IssueMany with repeated IDs: %+v", again)
		}
	})
}

// TestRecoveryDelay: a re-issue of a pending, never-started command is a
// recovery enqueue whose message is delayed (docs/lifecycle.md, "Duplicate
// messages"): by the type's lease plus Processor.StartedWriteDelay for a
// type the client knows, by Config.RecoveryDelay for one it does not. The
// store is the embedded one without its combined issue-and-enqueue
// (testenv.Counting), so a re-issue enqueues again as on Azure.
func TestRecoveryDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		register bool
		recovery time.Duration // Config.RecoveryDelay
		min, max time.Duration // when the second message may become visible
	}{
		// 2 s lease + 100 ms, well below the 1 min RecoveryDelay.
		{"registered type: its lease", true, time.Minute, 2100 * time.Millisecond, 20 * time.Second},
		// 3 s, well below the default 30 s.
		{"unknown type: Config.RecoveryDelay", false, 3 * time.Second, 3 * time.Second, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			s := openStore(t, "embedded")
			s.st = testenv.NewCounting(s.st)
			c := newClient(t, s, cmdq.Config{RecoveryDelay: tc.recovery, StartedWriteDelay: 100 * time.Millisecond})
			typ := "other.thing"
			if tc.register {
				typ = greet{}.CommandType()
				if err := cmdq.RegisterWith(c, func(context.Context, greet, *cmdq.Attempt) error { return nil }, cmdq.HandlerOptions{Lease: 2 * time.Second}); err != nil {
					t.Fatal(err)
				}
			}
			raw := cmdq.Raw{ID: cmdq.NewID(), Type: typ, Params: []byte(`{"name":"a"}`)}
			if _, err := c.IssueRaw(ctx, raw); err != nil {
				t.Fatal(err)
			}
			q, err := s.st.Queue(ctx, s.prefix+"-"+cmdq.DefaultQueue)
			if err != nil {
				t.Fatal(err)
			}
			if msgs, err := q.Dequeue(ctx, 32, time.Minute); err != nil || len(msgs) != 1 {
				t.Fatalf("after the issue: %d messages, %v; want the issue's", len(msgs), err)
			}
			before := time.Now()
			if res, err := c.IssueRaw(ctx, raw); err != nil || !res.Existing {
				t.Fatalf("re-issue: %+v, %v", res, err)
			}
			deadline := time.Now().Add(tc.max + 10*time.Second)
			for {
				msgs, err := q.Dequeue(ctx, 32, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if len(msgs) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the re-issue's message is not visible %s after it", time.Since(before))
				}
				time.Sleep(20 * time.Millisecond) // poll interval of the condition
			}
			if d := time.Since(before); d < tc.min || d > tc.max {
				t.Fatalf("the re-issue's message became visible %s after it, want between %s and %s", d, tc.min, tc.max)
			}
		})
	}
}

// sleepUntil waits until t: what a test observes at a point in time
// (not a synchronisation).
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// TestScheduledDelay: a command issued with a delay of 3 s is scheduled
// (its status carries runAt, read by this Client and by another process)
// until then, and its handler starts after runAt, never before: the
// started event's time and the handler's own clock are at or after it.
func TestScheduledDelay(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newTuned(t, s.st, s.prefix, fast(), tuning.Switches{})
		starts := recordStarts(t, c)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		// Issued with a delay of 3 s and read at 1 s: scheduled, to this
		// process, another one and a listing. When the reads end after
		// runAt (a loaded machine) the command may be pending by then:
		// issued again with twice the delay, up to 24 s.
		var res cmdq.Result
		var st cmdq.Status
		for delay := 3 * time.Second; ; delay *= 2 {
			before := time.Now()
			var err error
			res, err = c.Issue(ctx, greet{Name: "later"}, cmdq.After(delay))
			if err != nil {
				t.Fatal(err)
			}
			sleepUntil(before.Add(delay / 3))
			st, err = c.Get(ctx, res.ID)
			if err != nil {
				t.Fatal(err)
			}
			bad := ""
			if st.State != cmdq.StateScheduled {
				bad = fmt.Sprintf("at %s the command is %s, want scheduled", delay/3, st.State)
			} else if d := st.RunAt.Sub(st.CreatedAt); d < delay-time.Millisecond || d > delay+time.Millisecond {
				t.Fatalf("runAt %s is %s after createdAt %s, want %s", st.RunAt, d, st.CreatedAt, delay)
			} else if ost, err := newTuned(t, otherProcess(t, s), s.prefix, cmdq.Config{}, tuning.Switches{}).Get(ctx, res.ID); err != nil || ost.State != cmdq.StateScheduled || !ost.RunAt.Equal(st.RunAt) {
				bad = fmt.Sprintf("another process reads %+v %v, want scheduled with runAt %s", ost, err, st.RunAt)
			} else if page, err := c.ListCommands(ctx, cmdq.CommandQuery{State: cmdq.StateScheduled}); err != nil || len(page.Commands) != 1 || page.Commands[0].ID != res.ID {
				bad = fmt.Sprintf("listing scheduled commands: %+v %v, want the one", page.Commands, err)
			}
			if bad == "" {
				break
			}
			if !time.Now().After(before.Add(delay)) || delay >= 24*time.Second {
				t.Fatal(bad)
			}
			t.Logf("%s, read after runAt (a loaded machine): again with a delay of %s", bad, 2*delay)
		}
		done, err := c.Wait(ctx, res.ID)
		if err != nil || done.State != cmdq.StateCompleted {
			t.Fatalf("wait: %+v %v", done, err)
		}
		if !done.RunAt.IsZero() {
			t.Fatalf("the completed status has runAt %s, want none (a final command is due for nothing)", done.RunAt)
		}
		evs, err := c.Events(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if evs[0].Kind != cmdq.EventCreated || !evs[0].RunAt.Equal(st.RunAt) {
			t.Fatalf("created event %+v, want runAt %s", evs[0], st.RunAt)
		}
		for _, ev := range evs {
			if ev.Kind == cmdq.EventStarted && ev.Time.Before(st.RunAt) {
				t.Fatalf("started at %s, before runAt %s", ev.Time, st.RunAt)
			}
		}
		got := starts.of(res.ID)
		if len(got) != 1 || got[0].Before(st.RunAt) {
			t.Fatalf("the handler began at %v, want once, at or after %s", got, st.RunAt)
		}
	})
}

// TestScheduledBadInput: a run-at time more than 2 years ahead, a negative
// delay, and a run-at time together with a delay are refused with
// ErrInvalidSchedule, and nothing is stored.
func TestScheduledBadInput(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newTuned(t, s.st, s.prefix, fast(), tuning.Switches{})
		cases := []struct {
			name string
			raw  cmdq.Raw
		}{
			{"3 years ahead", cmdq.Raw{Type: "greet", RunAt: time.Now().Add(3 * 365 * 24 * time.Hour)}},
			{"negative delay", cmdq.Raw{Type: "greet", Delay: -time.Second}},
			{"both", cmdq.Raw{Type: "greet", RunAt: time.Now().Add(time.Hour), Delay: time.Hour}},
			{"delay over 2 years", cmdq.Raw{Type: "greet", Delay: 3 * 365 * 24 * time.Hour}},
		}
		for _, tc := range cases {
			tc.raw.ID = cmdq.NewID()
			if _, err := c.IssueRaw(ctx, tc.raw); !errors.Is(err, cmdq.ErrInvalidSchedule) {
				t.Fatalf("%s: %v, want ErrInvalidSchedule", tc.name, err)
			}
			if _, err := c.Get(ctx, tc.raw.ID); !errors.Is(err, cmdq.ErrNotFound) {
				t.Fatalf("%s: the command was stored (%v)", tc.name, err)
			}
		}
		if _, err := c.Issue(ctx, greet{}, cmdq.After(-time.Minute)); !errors.Is(err, cmdq.ErrInvalidSchedule) {
			t.Fatalf("After(-1m): %v, want ErrInvalidSchedule", err)
		}
		// A time in the past is due at once (its runAt kept).
		past := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
		res, err := c.Issue(ctx, greet{}, cmdq.At(past))
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.Get(ctx, res.ID); err != nil || st.State != cmdq.StatePending || !st.RunAt.Equal(past) {
			t.Fatalf("a command at a past time: %+v %v, want pending with runAt %s", st, err, past)
		}
	})
}

// TestScheduledCost: scheduled commands cost what plain ones do: the
// delay rides on the issue's enqueue, and each runs from what its issue's
// message carries (no point read): the calls are the issue's batch and
// enqueue, the dequeues, and each one's final batch and delete.
func TestScheduledCost(t *testing.T) {
	ctx := ctxT(t)
	env := testenv.Open(t, "embedded")
	counting := env.Store // counts every call (and takes the two-call path: issue batch, then enqueue)
	c := newTuned(t, counting, env.Prefix, fast(), tuning.Switches{})
	starts := recordStarts(t, c)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cmds := make([]cmdq.Command, 32)
	for i := range cmds {
		cmds[i] = cmdq.WithOptions(greet{Name: "batch"}, cmdq.After(time.Second))
	}
	counting.Reset()
	results, err := c.IssueMany(ctx, cmds...)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "32 completions", func() bool { return c.Stats().Completed == 32 })
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	counts := counting.Counts()
	if counts["Get"] != 0 {
		t.Fatalf("%d point reads (%s), want none: every scheduled command runs from its message", counts["Get"], counting)
	}
	if fp := c.Stats().FastPath; fp != 32 {
		t.Fatalf("fast path %d of 32", fp)
	}
	for _, r := range results {
		if got := starts.of(r.ID); len(got) != 1 {
			t.Fatalf("%s ran %d times", r.ID, len(got))
		}
	}
	t.Logf("32 scheduled commands: %s", counting)
}

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
