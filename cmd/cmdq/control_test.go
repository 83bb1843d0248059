package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// TestCLICancelAndQueues runs `cmdq cancel` and `cmdq queue ls|pause|resume`
// against a real server (embedded store and Azurite): a running
// demo.sleep is cancelled (its handler stops: the command ends cancelled,
// not completed), a second cancel says it already was, a completed command
// cannot be cancelled (exit 1); a paused queue is listed as paused, a
// command sent into it stays pending until the queue is resumed, then
// completes; an unknown queue is not found.
func TestCLICancelAndQueues(t *testing.T) {
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

			sleeper := sendID(t, env, "demo.sleep", "--params", `{"ms":600000}`)
			waitState(t, srv.URL, "", sleeper, "running", 30*time.Second)
			r := mustRun(t, env, "cancel", sleeper)
			if strings.TrimSpace(r.stdout) != sleeper+" cancelled" {
				t.Fatalf("cancel printed %q", r.stdout)
			}
			if r = mustRun(t, env, "cancel", sleeper); strings.TrimSpace(r.stdout) != sleeper+" was already cancelled" {
				t.Fatalf("second cancel printed %q", r.stdout)
			}
			waitState(t, srv.URL, "", sleeper, "cancelled", 30*time.Second)
			st := statusOf(t, env, sleeper)
			if st.State != cmdq.StateCancelled {
				t.Fatalf("the cancelled sleeper is %s", st.State)
			}
			done := strings.Fields(mustRun(t, env, "send", "demo.echo", "--wait").stdout)[0]
			r = runCmdq(t, 30*time.Second, env, "cancel", done)
			if r.code != 1 || !strings.Contains(r.stderr, "completed") {
				t.Fatalf("cancel of a completed command: exit %d, stderr %q", r.code, r.stderr)
			}

			r = mustRun(t, env, "queue", "pause", "commands")
			if !strings.HasPrefix(r.stdout, "commands paused") {
				t.Fatalf("queue pause printed %q", r.stdout)
			}
			r = mustRun(t, env, "queue", "ls")
			if !strings.Contains(r.stdout, "commands") || !strings.Contains(r.stdout, "paused") {
				t.Fatalf("queue ls printed %q", r.stdout)
			}
			var qs []cmdq.QueueInfo
			if err := json.Unmarshal([]byte(mustRun(t, env, "queue", "ls", "--json").stdout), &qs); err != nil || len(qs) != 1 || !qs[0].Paused {
				t.Fatalf("queue ls --json: %+v %v", qs, err)
			}
			waiting := sendID(t, env, "demo.echo")
			if st := statusOf(t, env, waiting); st.State != cmdq.StatePending {
				t.Fatalf("a command sent into the paused queue is %s", st.State)
			}
			mustRun(t, env, "queue", "resume", "commands")
			waitState(t, srv.URL, "", waiting, "completed", 30*time.Second)
			r = runCmdq(t, 30*time.Second, env, "queue", "pause", "nobody-knows")
			if r.code != 1 || !strings.Contains(r.stderr, "no queue") || !strings.Contains(r.stderr, "cmdq queue ls") {
				t.Fatalf("pause of an unknown queue: exit %d, stderr %q", r.code, r.stderr)
			}
		})
	}
}

// TestCLIQueueOnStore: the queue and cancel commands on a store opened
// directly (--store embedded): a pause is stored and listed, a pending
// command is cancelled.
func TestCLIQueueOnStore(t *testing.T) {
	t.Parallel()
	store := []string{"--store", "embedded", "--data", t.TempDir()}
	id := sendID(t, nil, append([]string{"demo.echo"}, store...)...)
	mustRun(t, nil, append([]string{"queue", "pause", "commands"}, store...)...)
	var qs []cmdq.QueueInfo
	if err := json.Unmarshal([]byte(mustRun(t, nil, append([]string{"queue", "ls", "--json"}, store...)...).stdout), &qs); err != nil ||
		len(qs) != 1 || !qs[0].Paused || qs[0].Depth != 1 || !strings.HasPrefix(qs[0].By, "cli:") {
		t.Fatalf("queue ls --json on the store: %+v %v", qs, err)
	}
	if r := mustRun(t, nil, append([]string{"cancel", id}, store...)...); strings.TrimSpace(r.stdout) != id+" cancelled" {
		t.Fatalf("cancel printed %q", r.stdout)
	}
	if st := statusOf(t, nil, id, store...); st.State != cmdq.StateCancelled {
		t.Fatalf("after cancel: %s", st.State)
	}
}

// statusOf runs `cmdq status ID --json`.
func statusOf(t *testing.T, env []string, id string, args ...string) cmdq.Status {
	t.Helper()
	var st cmdq.Status
	out := mustRun(t, env, append([]string{"status", id, "--json"}, args...)...).stdout
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json %q: %v", out, err)
	}
	return st
}
