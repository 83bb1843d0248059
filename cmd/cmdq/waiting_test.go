package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/azurite"
)

// waitingLine returns the waiting line of `cmdq status ID` (without its
// label), failing the test when there is none.
func waitingLine(t *testing.T, env []string, id string) string {
	t.Helper()
	r := mustRun(t, env, "status", id)
	m := regexp.MustCompile(`(?m)^waiting +(.*)$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("cmdq status %s has no waiting line:\n%s", id, r.stdout)
	}
	return m[1]
}

// TestCLISaysWhyItWaits: on Azurite, a web tier (serve --no-processor)
// and, later, a worker that polls once a minute and hears no wake-ups;
// `cmdq status` says why each command waits, through the server and
// through the store directly (its own Client): no processor polls its
// queue; scheduled (its time, how long until then, and run-now); its
// queue paused (by whom and since when, as `queue ls` says; and how to
// resume it), which `send --wait` also says on stderr; due, issued after
// the worker's poll (a processor takes it at its next poll).
func TestCLISaysWhyItWaits(t *testing.T) {
	t.Parallel()
	prefix := randomPrefix()
	web := startServe(t, serveOpts{azure: true, args: []string{"--no-processor", "--prefix", prefix}})
	server := []string{"CMDQ_SERVER=" + web.URL}
	store := []string{"CMDQ_STORE=azure", "CMDQ_PREFIX=" + prefix, "CMDQ_AZURE_CONNECTION_STRING=" + azurite.ConnectionString(t)}
	both := func(id, want string) {
		t.Helper()
		for _, env := range [][]string{server, store} {
			if got := waitingLine(t, env, id); got != want {
				t.Errorf("cmdq status (%s):\n got waiting  %s\nwant waiting  %s", env[0], got, want)
			}
		}
	}

	alone := sendID(t, server, "demo.echo")
	both(alone, `no processor polls queue "commands" (no live heartbeat names it); it starts when one does (start one: cmdq worker, or cmdq serve)`)

	later := sendID(t, server, "demo.echo", "--in", "1h")
	scheduled := regexp.MustCompile(`^scheduled for \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z \(in (59m\d+s|1h); cmdq run-now ` + later + ` makes it due now\)$`)
	if got := waitingLine(t, server, later); !scheduled.MatchString(got) {
		t.Errorf("cmdq status of a command scheduled an hour ahead: waiting  %s\nwant it to match %s", got, scheduled)
	}

	mustRun(t, server, "queue", "pause", "commands")
	var qs []cmdq.QueueInfo
	if err := json.Unmarshal([]byte(mustRun(t, server, "queue", "ls", "--json").stdout), &qs); err != nil || len(qs) == 0 || qs[0].Name != "commands" || !qs[0].Paused {
		t.Fatalf("queue ls --json: %+v %v, want commands paused", qs, err)
	}
	paused := sendID(t, server, "demo.echo")
	both(paused, `its queue "commands" is paused (by `+qs[0].By+` since `+qs[0].Since.UTC().Format(timeLayout)+`); it starts when the queue is resumed (cmdq queue resume commands)`)
	if qs[0].By != "api:anonymous" {
		t.Errorf("paused by %q, want api:anonymous (the API without tokens)", qs[0].By)
	}
	r := runCmdq(t, 30*time.Second, server, "send", "demo.echo", "--wait", "--timeout", "3s")
	note := `cmdq: waiting: its queue "commands" is paused (by api:anonymous since ` + qs[0].Since.UTC().Format(timeLayout) + `); it starts when the queue is resumed (cmdq queue resume commands)` + "\n"
	if r.code != 1 || !uuidLine.MatchString(strings.SplitN(r.stdout, "\n", 2)[0]) || !strings.HasPrefix(r.stderr, note) || strings.Count(r.stderr, "cmdq: waiting:") != 1 {
		t.Errorf("send --wait into the paused queue: exit %d\nstdout %q\nstderr %q\nwant the ID, then on stderr once:\n%s", r.code, r.stdout, r.stderr, note)
	}
	mustRun(t, server, "queue", "resume", "commands")

	// A worker that polls once a minute and hears no wake-ups: once it
	// has polled (taking what was due), a command issued is due until its
	// next poll, a minute later.
	w := startShapeWorker(t, prefix, "slow-poller", "--no-doorbell", "--min-poll-interval", "1m", "--max-poll-interval", "1m")
	waitFor(t, 30*time.Second, "the worker is listed and has polled", func() bool {
		ps := processorsOf(t, web.URL) // the web tier's list of processors, read afresh
		return len(ps) == 1 && ps[0].Name == "slow-poller" && w.metric(t, "cmdq_polls_total") >= 1
	})
	due := sendID(t, server, "demo.echo")
	both(due, `due; a processor of queue "commands" takes it at its next poll (a handler already running shows as running after about 1 s)`)
}

// slotOrRetry is the command type of TestCLISaysWhyItWaitsForASlotOrRetry's
// server: its first attempt fails when Fail (the next is an hour later);
// it runs until the test ends when Hold.
type slotOrRetry struct {
	Fail bool `json:"fail"`
	Hold bool `json:"hold"`
}

func (slotOrRetry) CommandType() string { return "test.wait" }

// TestCLISaysWhyItWaitsForASlotOrRetry: against a server whose handler
// the test controls (one slot; a retry an hour after a failure), `cmdq
// status` says that a command whose first attempt failed is retrying (its
// next attempt, when, and run-now), and that one issued while the slot is
// taken waits for a slot; `send --wait` says so after 2 s.
func TestCLISaysWhyItWaitsForASlotOrRetry(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := apitest.Start(t, apitest.Options{Config: cmdq.Config{Concurrency: 1}, Setup: func(c *cmdq.Client) error {
		return cmdq.RegisterWith(c, func(ctx context.Context, j slotOrRetry, a *cmdq.Attempt) error {
			if j.Fail && a.Number() == 1 {
				return errors.New("test.wait: planned failure of attempt 1")
			}
			if j.Hold {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}, cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: time.Hour, Max: time.Hour, Jitter: cmdq.NoJitter}})
	}})
	t.Cleanup(func() { close(release) })
	server := []string{"CMDQ_SERVER=" + srv.URL}

	flaky := sendID(t, server, "test.wait", "--params", `{"fail":true}`)
	waitState(t, srv.URL, "", flaky, "retrying", 30*time.Second)
	retrying := regexp.MustCompile(`^retrying: attempt 2 at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z \(in (59m\d+s|1h); cmdq run-now ` + flaky + ` makes it due now\)$`)
	if got := waitingLine(t, server, flaky); !retrying.MatchString(got) {
		t.Errorf("cmdq status of a command retrying in an hour: waiting  %s\nwant it to match %s", got, retrying)
	}

	busy := sendID(t, server, "test.wait", "--params", `{"hold":true}`)
	waitFor(t, 30*time.Second, "the handler runs", func() bool { _, ok := srv.Client.Running(busy); return ok })
	queued := sendID(t, server, "test.wait")
	const slot = `every processor of queue "commands" is busy; it starts when a handler slot frees`
	if got := waitingLine(t, server, queued); got != slot {
		t.Errorf("cmdq status with the only slot taken:\n got waiting  %s\nwant waiting  %s", got, slot)
	}
	r := runCmdq(t, 30*time.Second, server, "send", "test.wait", "--wait", "--timeout", "5s")
	if r.code != 1 || strings.Count(r.stderr, "cmdq: waiting: ") != 1 || !strings.HasPrefix(r.stderr, "cmdq: waiting: "+slot+"\n") {
		t.Errorf("send --wait with the only slot taken: exit %d, stderr %q; want the slot note once (after 2 s), then the timeout", r.code, r.stderr)
	}
}

// TestWaitingText: the words of each reason, on the status line, the
// progress line (a few words) and in the notes of send --wait: a lasting
// reason at once, due or a slot only when it lasts, a schedule or retry
// only when it is more than the delay ahead, each once.
func TestWaitingText(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)
	since := time.Date(2026, 11, 28, 13, 2, 11, 0, time.UTC)
	st := func(state cmdq.State, attempts int, w cmdq.Waiting) cmdq.Status {
		return cmdq.Status{ID: "0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10", Queue: "commands", State: state, Attempts: attempts, Waiting: &w}
	}
	for _, c := range []struct {
		st          cmdq.Status
		text, short string
	}{
		{st(cmdq.StateScheduled, 0, cmdq.Waiting{Reason: cmdq.WaitScheduled, Until: now.Add(59*time.Minute + 30*time.Second)}),
			"scheduled for 2026-11-28 14:59:30.000Z (in 59m30s; cmdq run-now 0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10 makes it due now)", "scheduled, due in 59m30s"},
		{st(cmdq.StateRetrying, 1, cmdq.Waiting{Reason: cmdq.WaitRetrying, Until: now.Add(2*time.Hour + 30*time.Minute)}),
			"retrying: attempt 2 at 2026-11-28 16:30:00.000Z (in 2h30m; cmdq run-now 0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10 makes it due now)", "attempt 1 failed; next in 2h30m"},
		{deferredSt(st(cmdq.StateRetrying, 3, cmdq.Waiting{Reason: cmdq.WaitDeferred, Until: now.Add(30 * time.Second)}), 2),
			"deferred by its handler (RetryAfter): attempt 4 at 2026-11-28 14:00:30.000Z (in 30s; 2 deferrals, which do not count toward the poison ceiling; cmdq run-now 0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10 makes it due now)", "attempt 3 deferred; next in 30s"},
		{st(cmdq.StatePending, 0, cmdq.Waiting{Reason: cmdq.WaitPaused, By: "ops:alice", Since: since}),
			`its queue "commands" is paused (by ops:alice since 2026-11-28 13:02:11.000Z); it starts when the queue is resumed (cmdq queue resume commands)`, "its queue is paused by ops:alice"},
		{st(cmdq.StatePending, 0, cmdq.Waiting{Reason: cmdq.WaitPaused}),
			`its queue "commands" is paused; it starts when the queue is resumed (cmdq queue resume commands)`, "its queue is paused"},
		{st(cmdq.StatePending, 0, cmdq.Waiting{Reason: cmdq.WaitNoProcessor}),
			`no processor polls queue "commands" (no live heartbeat names it); it starts when one does (start one: cmdq worker, or cmdq serve)`, "no processor polls its queue"},
		{st(cmdq.StatePending, 0, cmdq.Waiting{Reason: cmdq.WaitSlot}),
			`every processor of queue "commands" is busy; it starts when a handler slot frees`, "every processor of its queue is busy"},
		{st(cmdq.StateRetrying, 2, cmdq.Waiting{Reason: cmdq.WaitDue}),
			`due; a processor of queue "commands" takes it at its next poll (a handler already running shows as running after about 1 s)`, "due: taken at a processor's next poll"},
		{st(cmdq.StatePending, 0, cmdq.Waiting{Reason: "later\x1b[2J"}), `later\x1b[2J`, `later\x1b[2J`},
	} {
		if got := waitingText(c.st, now); got != c.text {
			t.Errorf("%s: waitingText\n got %s\nwant %s", c.st.Waiting.Reason, got, c.text)
		}
		if got := waitingShort(c.st, now); got != c.short {
			t.Errorf("%s: waitingShort %q, want %q", c.st.Waiting.Reason, got, c.short)
		}
	}
	if got := waitingText(cmdq.Status{State: cmdq.StatePending}, now); got != "" {
		t.Errorf("waitingText of a command waiting for nothing: %q", got)
	}

	// The notes.
	var out syncBuffer
	n := &waitNotes{w: &out, delay: 20 * time.Millisecond}
	n.update(st(cmdq.StateScheduled, 0, cmdq.Waiting{Reason: cmdq.WaitScheduled, Until: time.Now().Add(10 * time.Millisecond)})) // due within the delay: no note
	n.update(st(cmdq.StatePending, 0, cmdq.Waiting{Reason: cmdq.WaitDue}))
	n.update(cmdq.Status{State: cmdq.StateRunning}) // taken before the delay: no note
	n.update(st(cmdq.StatePending, 0, cmdq.Waiting{Reason: cmdq.WaitPaused, By: "ops:alice"}))
	n.update(st(cmdq.StatePending, 0, cmdq.Waiting{Reason: cmdq.WaitPaused, By: "ops:alice"})) // the same: said once
	n.update(st(cmdq.StatePending, 0, cmdq.Waiting{Reason: cmdq.WaitSlot}))
	waitFor(t, 10*time.Second, "the slot note", func() bool { return strings.Contains(out.String(), "busy") })
	n.stop()
	want := `cmdq: waiting: its queue "commands" is paused (by ops:alice); it starts when the queue is resumed (cmdq queue resume commands)` + "\n" +
		`cmdq: waiting: every processor of queue "commands" is busy; it starts when a handler slot frees` + "\n"
	if got := out.String(); got != want {
		t.Errorf("notes:\n%s\nwant:\n%s", got, want)
	}
}

// deferredSt returns st with n deferrals.
func deferredSt(st cmdq.Status, n int) cmdq.Status {
	st.Deferrals = n
	return st
}

// TestAttemptsTextDeferred: the status line counts the deferrals among
// the attempts, and says nothing of them when there are none.
func TestAttemptsTextDeferred(t *testing.T) {
	t.Parallel()
	if got := attemptsText(cmdq.Status{Attempts: 7, Deferrals: 6, Step: 2}); got != "attempts 7 (6 deferred), step 2" {
		t.Errorf("attemptsText with deferrals: %q", got)
	}
	if got := attemptsText(cmdq.Status{Attempts: 2}); got != "attempts 2" {
		t.Errorf("attemptsText without: %q", got)
	}
}
