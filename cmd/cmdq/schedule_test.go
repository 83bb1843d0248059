package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
)

// TestCLIScheduled runs `cmdq send --in/--at`, `cmdq status` and `cmdq
// run-now` against a real server (embedded store and Azurite): a command
// sent with --in 3s is scheduled (status says when it is due) and
// completes, starting no earlier than its runAt; one sent --at an hour
// ahead is made due by run-now and completes; run-now of it again, and of
// an unknown command, exits 1; each bad schedule exits 2 or 1 with a
// message saying what to give, and stores nothing.
func TestCLIScheduled(t *testing.T) {
	t.Parallel()
	for _, azure := range []bool{false, true} {
		name := "embedded"
		if azure {
			name = "azure"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := startServe(t, serveOpts{azure: azure})
			env := []string{"CMDQ_SERVER=" + srv.URL}

			soon := sendID(t, env, "demo.echo", "--in", "3s")
			r := mustRun(t, env, "status", soon)
			if !strings.Contains(r.stdout, "scheduled") || !strings.Contains(r.stdout, "due") || !strings.Contains(r.stdout, "run-now "+soon) {
				t.Fatalf("status of a scheduled command:\n%s", r.stdout)
			}
			sched := statusOf(t, env, soon)
			if sched.State != cmdq.StateScheduled || sched.RunAt.IsZero() {
				t.Fatalf("status --json: %+v", sched)
			}
			waitState(t, srv.URL, "", soon, "completed", 30*time.Second)
			c, err := client.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			evs, err := c.Events(context.Background(), soon)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				if e.Kind == cmdq.EventStarted && e.Time.Before(sched.RunAt) {
					t.Fatalf("started at %s, before its runAt %s", e.Time, sched.RunAt)
				}
			}

			at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
			later := sendID(t, env, "demo.echo", "--at", at)
			if st := statusOf(t, env, later); st.State != cmdq.StateScheduled || st.RunAt.Format(time.RFC3339) != at {
				t.Fatalf("sent --at %s: %+v", at, st)
			}
			if r := mustRun(t, env, "run-now", later); strings.TrimSpace(r.stdout) != later+" is due now" {
				t.Fatalf("run-now printed %q", r.stdout)
			}
			waitState(t, srv.URL, "", later, "completed", 30*time.Second)
			r = runCmdq(t, 30*time.Second, env, "run-now", later, "7f0c2a9e-3b1d-4c8e-9f6a-1d2e3f4a5b6c")
			if r.code != 1 || !strings.Contains(r.stderr, "completed") || !strings.Contains(r.stderr, "no command with this ID") || strings.Contains(r.stderr, "…") {
				t.Fatalf("run-now of a completed and an unknown command: exit %d, stderr %q", r.code, r.stderr)
			}

			before := queueDepth(t, env)
			for _, bad := range []struct {
				args []string
				says string
			}{
				{[]string{"--at", "tomorrow"}, "RFC 3339"},
				{[]string{"--at", time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04:05") + "+24:00"}, "RFC 3339"},
				{[]string{"--at", time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04:05") + ",5Z"}, "RFC 3339"},
				{[]string{"--in", "-5s"}, "negative"},
				{[]string{"--in", "5s", "--at", at}, "one of them"},
				{[]string{"--in", "5"}, "duration"},
				{[]string{"--at", time.Now().Add(3 * 365 * 24 * time.Hour).UTC().Format(time.RFC3339)}, "2 years"},
			} {
				r := runCmdq(t, 30*time.Second, env, append([]string{"send", "demo.echo"}, bad.args...)...)
				if r.code == 0 || !strings.Contains(r.stderr, bad.says) {
					t.Fatalf("send %v: exit %d, stderr %q, want an error that says %q", bad.args, r.code, r.stderr, bad.says)
				}
			}
			if after := queueDepth(t, env); after != before {
				t.Fatalf("%d messages queued before the bad sends, %d after", before, after)
			}
		})
	}
}

// queueDepth returns the depth of queue commands (`cmdq queue ls --json`).
func queueDepth(t *testing.T, env []string) int {
	t.Helper()
	var qs []cmdq.QueueInfo
	out := mustRun(t, env, "queue", "ls", "--json").stdout
	if err := json.Unmarshal([]byte(out), &qs); err != nil || len(qs) != 1 {
		t.Fatalf("queue ls --json %q: %v", out, err)
	}
	return qs[0].Depth
}

// TestServeRetriesOnTime is the case: on a `cmdq serve` that has
// been idle so long that its poller waits the full MaxPollInterval (1
// minute, the default) between dequeues, a demo.fail {"times":2} command
// completes well before that poll (about 5 s after it was issued; the test
// allows 20 s, a third of the poll interval, so that a loaded machine
// does not fail it): its retries (their backoff a few seconds) start when their
// delay ends because the processor wakes itself, not at its next poll a
// minute later. (The command is handed to the processor
// without a dequeue and without waking the poller; only the self-wake can
// start the retries in time.) The server's --min-poll-interval is the
// minute too: its poller waits the full minute from its first empty poll
// on, instead of after the ~100 s of doubling from 100 ms that the default
// takes to get there, and no poll can come sooner even if something woke
// the poller.
func TestServeRetriesOnTime(t *testing.T) {
	t.Parallel()
	for _, azure := range []bool{false, true} {
		name := "embedded"
		if azure {
			name = "azure"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := startServe(t, serveOpts{azure: azure, args: []string{"--min-poll-interval", "1m"}})
			env := []string{"CMDQ_SERVER=" + srv.URL}
			waitFor(t, 4*time.Minute, "the poller waits the full minute", func() bool {
				return pollInterval(t, srv.URL) >= time.Minute.Seconds()
			})
			id := sendID(t, env, "demo.fail", "--params", `{"times":2}`)
			waitState(t, srv.URL, "", id, "completed", time.Minute)
			c, err := client.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			evs, err := c.Events(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			created, completed := evs[0].Time, evs[len(evs)-1].Time
			if evs[len(evs)-1].Kind != cmdq.EventCompleted || evs[len(evs)-1].Attempt != 3 {
				t.Fatalf("events %+v, want completed in attempt 3", evs)
			}
			if took := completed.Sub(created); took > 20*time.Second {
				t.Fatalf("issued %s, completed %s: %s, want well within the minute of the idle poll (20 s)", created, completed, took)
			}
		})
	}
}

// pollInterval reads cmdq_poll_interval_seconds{queue="commands"} from
// the server's /metrics (0 when absent).
func pollInterval(t *testing.T, base string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, `cmdq_poll_interval_seconds{queue="commands"} `) {
			v, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return v
		}
	}
	return 0
}
