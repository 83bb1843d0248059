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
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	s := openStore(t, "embedded")
	_, err := cmdq.New(s.st, cmdq.Config{Prefix: "Bad-Prefix", BatchSize: 99, MaxParamsBytes: -1, Observers: []cmdq.Observer{nil}})
	if !errors.Is(err, cmdq.ErrInvalidConfig) {
		t.Fatalf("New: %v", err)
	}
	for _, want := range []string{"Prefix", "BatchSize", "MaxParamsBytes", "Observers[0]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
	// The prefix is validated in one place: one problem, not one per
	// component that uses it.
	if n := strings.Count(err.Error(), "Bad-Prefix"); n != 1 {
		t.Errorf("the prefix is reported %d times: %v", n, err)
	}
	if _, err := cmdq.New(nil, cmdq.Config{}); !errors.Is(err, cmdq.ErrInvalidConfig) {
		t.Fatalf("New(nil): %v", err)
	}
}

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

// TestRequeueWhilePoisonedAttemptEnds: a command requeued while the
// attempt that poisoned it is still ending (here its Observer is slow:
// the outcome is recorded, the message not yet deleted) starts at once.
// Before, the ending attempt still held the command, so the requeued
// message was taken for a second one and left hidden for a whole lease
// (seen beside a CPU hog, where the poisoned attempt's message delete
// came after the requeue).
func TestRequeueWhilePoisonedAttemptEnds(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		started := make(chan struct{})
		release := make(chan struct{})
		var blocked atomic.Bool
		cfg := fast()
		cfg.MinPollInterval, cfg.MaxPollInterval, cfg.PollJitter = time.Hour, time.Hour, -1
		cfg.Concurrency = 4
		cfg.Observers = []cmdq.Observer{cmdq.ObserverFunc(func(o cmdq.Observation) {
			if o.Kind == cmdq.ObservedPoisoned && blocked.CompareAndSwap(false, true) {
				// A slow observer: the poisoned attempt is not over until
				// the requeued command has started (or the test gave up).
				select {
				case <-started:
				case <-release:
				}
			}
		})}
		c := newClient(t, s, cfg)
		t.Cleanup(func() { close(release) })
		var runs atomic.Int32
		if err := cmdq.Register(c, func(ctx context.Context, cmd greet, run *cmdq.Attempt) error {
			if runs.Add(1) == 1 {
				return cmdq.Permanent(errors.New("not configured"))
			}
			close(started)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, greet{Name: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StatePoisoned {
			t.Fatalf("first attempt: %+v %v", st, err)
		}
		if err := c.Requeue(ctx, res.ID, "ops"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-time.After(20 * time.Second): // the lease is 30 s; the next poll an hour away
			t.Fatalf("the requeued command did not start while the poisoning attempt was ending (observer blocked: %v)", blocked.Load())
		}
		if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("after requeue: %+v %v", st, err)
		}
	})
}

// TestRequeueWakesProcessor: a requeued command starts at once, although
// the processor would not poll again for an hour, and although the
// poisoning attempt's failed event named a retry an hour ahead (the retry
// policy's delay, computed before the error turned out permanent): a
// requeue makes the command due now. Before that fix the requeued message
// was put back until the stale retry time (with the default policy 1 s
// after a first attempt, up to 5 minutes after later ones).
func TestRequeueWakesProcessor(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.MinPollInterval, cfg.MaxPollInterval, cfg.PollJitter = time.Hour, time.Hour, -1
		c := newClient(t, s, cfg)
		var fixed atomic.Bool
		started := make(chan time.Time, 4)
		if err := cmdq.RegisterWith(c, func(ctx context.Context, cmd greet, run *cmdq.Attempt) error {
			started <- time.Now()
			if !fixed.Load() {
				return cmdq.Permanent(errors.New("not configured"))
			}
			return nil
		}, cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: time.Hour, Max: time.Hour, Jitter: cmdq.NoJitter}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, greet{Name: "x"}) // the issue wakes the processor
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StatePoisoned {
			t.Fatalf("first attempt: %+v %v", st, err)
		}
		<-started
		fixed.Store(true)
		requeued := time.Now()
		if err := c.Requeue(ctx, res.ID, "ops"); err != nil {
			t.Fatal(err)
		}
		if st, err := c.Get(ctx, res.ID); err != nil || st.RunAt.After(time.Now()) {
			t.Fatalf("after the requeue the command is due at %s (%v), want now: %+v", st.RunAt, err, st)
		}
		select {
		case at := <-started:
			t.Logf("%s: requeued command started %s after the requeue", s.driver, at.Sub(requeued))
		case <-time.After(30 * time.Second): // the next poll, and the stale retry time, are an hour away
			t.Fatal("the requeued command did not start: the requeue did not wake the processor, or its message was put back until the stale retry time")
		}
		if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("after requeue: %+v %v", st, err)
		}
		evs, _ := c.Events(ctx, res.ID)
		for _, e := range evs {
			if e.Kind == cmdq.EventRequeued && e.By != "ops" {
				t.Fatalf("requeued by %q, want ops", e.By)
			}
		}
	})
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
