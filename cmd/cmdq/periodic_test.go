package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

// TestCLIUniqueAndPeriodic runs `cmdq send --unique` and `cmdq periodic
// ls` against a real server started with --periodic (embedded store and
// Azurite): the same type and key within the window print the first
// command's ID and say it is a duplicate, whatever the params; a window of
// 0 or a key without a window is refused with a clear error and stores
// nothing; periodic ls lists the server's schedule with a last tick that
// has a command and its next tick; periodic show lists its latest ticks
// newest first; periodic trigger issues a tick now, the same --at again
// issues nothing, an unknown name exits 1 and a missing one 2; on Azure
// trigger works on the store directly too (the command rebuilt from the
// schedule's stored row).
func TestCLIUniqueAndPeriodic(t *testing.T) {
	t.Parallel()
	for _, az := range []bool{false, true} {
		name := "embedded"
		if az {
			name = "azure"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			prefix := randomPrefix()
			srv := startServe(t, serveOpts{azure: az, args: []string{"--periodic", `heartbeat;@every 1s;demo.echo;{"beat":true}`, "--prefix", prefix}})
			env := []string{"CMDQ_SERVER=" + srv.URL}

			first := sendID(t, env, "demo.echo", "--params", `{"n":1}`, "--unique", "order-42", "--unique-window", "1h")
			r := mustRun(t, env, "send", "demo.echo", "--params", `{"n":2}`, "--unique", "order-42", "--unique-window", "1h")
			if got := strings.TrimSpace(r.stdout); got != first {
				t.Fatalf("the duplicate printed %q, want the first command's ID %s", got, first)
			}
			if !strings.Contains(r.stderr, "duplicate") || !strings.Contains(r.stderr, "order-42") {
				t.Fatalf("the duplicate's stderr %q does not say it is a duplicate of order-42", r.stderr)
			}
			for _, bad := range [][]string{
				{"--unique", "order-43", "--unique-window", "0s"},
				{"--unique", "order-43"},
				{"--unique", "order-43", "--unique-window", "-1h"},
			} {
				r = runCmdq(t, 30*time.Second, env, append([]string{"send", "demo.echo"}, bad...)...)
				if r.code != 1 || !strings.Contains(r.stderr, "unique") || r.stdout != "" {
					t.Fatalf("send %v: exit %d, stdout %q, stderr %q: want exit 1 naming the unique window, nothing printed", bad, r.code, r.stdout, r.stderr)
				}
			}

			var ps []cmdq.PeriodicInfo
			waitFor(t, 30*time.Second, "periodic ls shows the heartbeat's last tick with its command", func() bool {
				ps = nil
				out := mustRun(t, env, "periodic", "ls", "--json").stdout
				if err := json.Unmarshal([]byte(out), &ps); err != nil {
					t.Fatalf("periodic ls --json %q: %v", out, err)
				}
				return len(ps) == 1 && ps[0].LastTick != nil && !ps[0].LastTick.Missed
			})
			p := ps[0]
			if p.Name != "heartbeat" || p.Spec != "@every 1s" || p.Type != "demo.echo" || !p.Local || p.NextTick.IsZero() {
				t.Fatalf("periodic ls: %+v", p)
			}
			if st := statusOf(t, env, p.LastTick.ID); st.Type != "demo.echo" || !strings.HasPrefix(st.CorrelationID, "periodic:heartbeat@") {
				t.Fatalf("the last tick's command: %+v", st)
			}
			table := mustRun(t, env, "periodic", "ls").stdout
			for _, want := range []string{"NAME", "NEXT TICK", "heartbeat", "@every 1s", "demo.echo", "commands"} {
				if !strings.Contains(table, want) {
					t.Fatalf("periodic ls printed %q, missing %q", table, want)
				}
			}

			var info cmdq.PeriodicInfo
			out := mustRun(t, env, "periodic", "show", "heartbeat", "--ticks", "3", "--json").stdout
			if err := json.Unmarshal([]byte(out), &info); err != nil {
				t.Fatalf("periodic show --json %q: %v", out, err)
			}
			if n := len(info.RecentTicks); n < 1 || n > 3 || info.LastTick == nil || info.RecentTicks[0].ID != info.LastTick.ID {
				t.Fatalf("periodic show --ticks 3: %d ticks, last %+v: want 1 to 3, the newest the last tick", n, info.LastTick)
			}
			for i := 1; i < len(info.RecentTicks); i++ {
				if !info.RecentTicks[i].At.Before(info.RecentTicks[i-1].At) {
					t.Fatalf("periodic show: ticks not newest first: %+v", info.RecentTicks)
				}
			}
			table = mustRun(t, env, "periodic", "show", "heartbeat").stdout
			for _, want := range []string{"spec:", "@every 1s", "next tick:", "TICK", "COMMAND", "STATE"} {
				if !strings.Contains(table, want) {
					t.Fatalf("periodic show printed %q, missing %q", table, want)
				}
			}

			var tick cmdq.TickInfo
			out = mustRun(t, env, "periodic", "trigger", "heartbeat", "--json").stdout
			if err := json.Unmarshal([]byte(out), &tick); err != nil {
				t.Fatalf("periodic trigger --json %q: %v", out, err)
			}
			if tick.ID == "" || tick.Duplicate || tick.State != cmdq.StatePending {
				t.Fatalf("periodic trigger: %+v, want a new pending tick", tick)
			}
			if st := statusOf(t, env, tick.ID); st.Type != "demo.echo" || st.CorrelationID != "periodic:heartbeat@"+tick.At.UTC().Format(time.RFC3339Nano) {
				t.Fatalf("the triggered tick's command: %+v", st)
			}
			again := mustRun(t, env, "periodic", "trigger", "heartbeat", "--at", tick.At.Format(time.RFC3339Nano)).stdout
			if !strings.Contains(again, tick.ID) || !strings.Contains(again, "nothing new issued") {
				t.Fatalf("the same trigger again printed %q, want the first tick's command %s and that nothing new was issued", again, tick.ID)
			}
			r = runCmdq(t, 30*time.Second, env, "periodic", "trigger", "nosuch")
			if r.code != 1 || !strings.Contains(r.stderr, "no periodic schedule") {
				t.Fatalf("trigger of an unknown schedule: exit %d, stderr %q: want exit 1 saying there is no such schedule", r.code, r.stderr)
			}
			r = runCmdq(t, 30*time.Second, env, "periodic", "show")
			if r.code != exitUsage || !strings.Contains(r.stderr, "schedule's name") {
				t.Fatalf("periodic show without a name: exit %d, stderr %q: want exit %d asking for the schedule's name", r.code, r.stderr, exitUsage)
			}
			if az {
				storeEnv := []string{"CMDQ_AZURE_CONNECTION_STRING=" + azurite.ConnectionString(t)}
				out := mustRun(t, storeEnv, "periodic", "trigger", "heartbeat", "--store", "azure", "--prefix", prefix).stdout
				if !strings.Contains(out, "heartbeat triggered at") {
					t.Fatalf("trigger on the store printed %q", out)
				}
				id := strings.TrimSpace(out[strings.LastIndex(out, " "):])
				if st := statusOf(t, env, id); st.Type != "demo.echo" || !strings.HasPrefix(st.CorrelationID, "periodic:heartbeat@") {
					t.Fatalf("the tick triggered on the store: %+v", st)
				}
			}
		})
	}
}

// TestCLIPeriodicBadSpec: serve and worker refuse a malformed --periodic
// (a cron spec that does not parse, a missing type) before they start,
// saying what to give.
func TestCLIPeriodicBadSpec(t *testing.T) {
	t.Parallel()
	store := []string{"--store", "embedded", "--data", t.TempDir()}
	for _, bad := range []string{"beat;61 * * * *;demo.echo", "beat;@every 1s", "beat;@every soon;demo.echo", "beat;@hourly;demo.echo;[1]"} {
		r := runCmdq(t, 30*time.Second, nil, append([]string{"worker", "--periodic", bad}, store...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "--periodic") {
			t.Fatalf("worker --periodic %q: exit %d, stderr %q", bad, r.code, r.stderr)
		}
	}
}

// worker is a `cmdq worker` process.
type worker struct {
	cmd  *exec.Cmd
	done chan struct{}
	logs *syncBuffer
}

// startWorker starts `cmdq worker` with args and waits until it logs that
// it runs.
func startWorker(t *testing.T, env []string, args ...string) *worker {
	t.Helper()
	w := &worker{cmd: exec.Command(binPath, append([]string{"worker", "--log-format", "json"}, args...)...), done: make(chan struct{}), logs: &syncBuffer{}}
	w.cmd.Env = cleanEnv(env...)
	pr, pw := io.Pipe()
	w.cmd.Stderr = pw
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	go func() { _ = w.cmd.Wait(); _ = pw.Close(); close(w.done) }()
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			_, _ = w.logs.Write([]byte(sc.Text() + "\n"))
			if !once && strings.Contains(sc.Text(), "cmdq worker: running") {
				once = true
				close(running)
			}
		}
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		<-w.done
		if t.Failed() {
			t.Logf("cmdq worker %d stderr:\n%s", w.cmd.Process.Pid, w.logs.String())
		}
	})
	select {
	case <-running:
	case <-w.done:
		t.Fatalf("cmdq worker exited before running:\n%s", w.logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("cmdq worker did not run within 60 s:\n%s", w.logs.String())
	}
	return w
}

// TestPeriodicThreeProcesses: three `cmdq worker` processes on Azurite run
// the same every-2-seconds periodic command for a minute — one of them
// SIGKILLed after 20 s and started again — and exactly one command exists
// per tick: the commands' ticks are every even second from the first
// worker's start to the last one's stop, none twice, none missing.
func TestPeriodicThreeProcesses(t *testing.T) {
	t.Parallel()
	prefix := randomPrefix()
	conn := azurite.ConnectionString(t)
	env := []string{"CMDQ_AZURE_CONNECTION_STRING=" + conn}
	args := []string{"--store", "azure", "--prefix", prefix, "--periodic", `beat;@every 2s;demo.echo;{"beat":1}`, "--max-poll-interval", "5s"}
	start := time.Now()
	var ws []*worker
	for i := range 3 {
		ws = append(ws, startWorker(t, env, append(args, "--worker-id", "proc-"+string(rune('a'+i)))...))
	}
	time.Sleep(20 * time.Second) // the schedule runs: the test's subject is a minute of ticks
	_ = ws[1].cmd.Process.Signal(syscall.SIGKILL)
	<-ws[1].done
	ws[1] = startWorker(t, env, append(args, "--worker-id", "proc-b2")...)
	time.Sleep(40 * time.Second)
	stopAt := time.Now()
	for _, w := range ws {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range ws {
		<-w.done
	}

	st, err := azure.Open(context.Background(), azure.Config{ConnectionString: conn})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cmdq.New(st, cmdq.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	page, err := c.ListCommands(context.Background(), cmdq.CommandQuery{Type: "demo.echo", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	byTick := map[time.Time][]string{}
	var ticks []time.Time
	for _, s := range page.Commands {
		at, ok := strings.CutPrefix(s.CorrelationID, "periodic:beat@")
		if !ok {
			t.Fatalf("command %s has correlation ID %q", s.ID, s.CorrelationID)
		}
		tick, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			t.Fatal(err)
		}
		if len(byTick[tick]) == 0 {
			ticks = append(ticks, tick)
		}
		byTick[tick] = append(byTick[tick], s.ID)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	if len(ticks) == 0 {
		t.Fatal("no periodic command was issued")
	}
	for _, tk := range ticks {
		if ids := byTick[tk]; len(ids) != 1 {
			t.Fatalf("the tick at %s has %d commands: %v", tk, len(ids), ids)
		}
		if tk.Unix()%2 != 0 || tk.Nanosecond() != 0 {
			t.Fatalf("tick %s is not an even second", tk)
		}
	}
	// Every even second from the first tick issued to the stop has its
	// command (a tick at the stop may be there too). From the first tick,
	// not from when the processes were spawned: under load a worker
	// scheduled its first tick 1.5 s after its spawn, and a tick before a
	// scheduler starts is not its to issue; a late start still fails the
	// count below.
	for tk := ticks[0]; !tk.After(stopAt.Add(-2 * time.Second)); tk = tk.Add(2 * time.Second) {
		if len(byTick[tk.UTC()]) != 1 {
			t.Fatalf("no command for the tick at %s (ticks %s … %s, %d of them)", tk.UTC(), ticks[0], ticks[len(ticks)-1], len(ticks))
		}
	}
	if len(ticks) < 28 || ticks[0].Before(start.Truncate(2*time.Second).Add(-2*time.Second)) {
		t.Fatalf("%d ticks from %s, want about 30 from the start at %s", len(ticks), ticks[0], start)
	}
	t.Logf("%d ticks, %d commands, from %s to %s", len(ticks), len(page.Commands), ticks[0], ticks[len(ticks)-1])
}
