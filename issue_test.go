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
