package cmdq_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// tickCommands returns the tick times of schedule name's commands (from
// their correlation IDs, "periodic:NAME@TICK"), sorted, failing the test
// when two commands carry the same tick. It lists them through a new
// Client on s (a Client reuses its listing of the day tables for
// a minute).
func tickCommands(t *testing.T, s store, typ, name string) []time.Time {
	t.Helper()
	lc, err := cmdq.New(s.st, cmdq.Config{Prefix: s.prefix})
	if err != nil {
		t.Fatal(err)
	}
	page, err := lc.ListCommands(ctxT(t), cmdq.CommandQuery{Type: typ, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[time.Time]string{}
	var ticks []time.Time
	for _, st := range page.Commands {
		at, ok := strings.CutPrefix(st.CorrelationID, "periodic:"+name+"@")
		if !ok {
			continue
		}
		tick, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			t.Fatalf("command %s: correlation ID %q: %v", st.ID, st.CorrelationID, err)
		}
		if other, dup := seen[tick]; dup {
			t.Fatalf("two commands for the tick at %s: %s and %s", tick, other, st.ID)
		}
		seen[tick] = st.ID
		ticks = append(ticks, tick)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	return ticks
}

// waitTicks polls storage until schedule name has a tick command at or
// after at, and returns the ticks' times.
func waitTicks(t *testing.T, s store, typ, name string, at time.Time) []time.Time {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ticks := tickCommands(t, s, typ, name)
		if len(ticks) > 0 && !ticks[len(ticks)-1].Before(at) {
			return ticks
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tick commands of %s after 60 s, want one at or after %s: %v", len(ticks), name, at, ticks)
		}
		time.Sleep(100 * time.Millisecond) // polling storage for the ticks' commands
	}
}

// TestPeriodicThreeClients: three Clients, as three processes on one
// store (each its own handle), run the same every-second schedule: each
// tick has exactly one command, and the ticks are every whole second
// without a gap, whoever issued them. Both stores.
func TestPeriodicThreeClients(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		var clients []*cmdq.Client
		for i := range 3 {
			st := s.st
			if i > 0 {
				st = otherProcess(t, s)
			}
			cfg := fast()
			cfg.Worker = "proc-" + string(rune('a'+i))
			c := newTuned(t, st, s.prefix, cfg, tuning.Switches{})
			// CatchUp 5: a goroutine stalled by a loaded machine still
			// issues the ticks it slept through.
			if err := c.Periodic("heartbeat", "@every 1s", greet{Name: "tick"}, cmdq.CatchUp(5)); err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		ctx := ctxT(t)
		for _, c := range clients {
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// Ticks for 5 s after all three run (on a loaded machine the
		// first Client can issue several before the last one starts).
		started := time.Now()
		waitTicks(t, s, "greet", "heartbeat", started.Truncate(time.Second).Add(5*time.Second))
		for _, c := range clients {
			if err := c.Stop(ctx); err != nil {
				t.Fatal(err)
			}
		}
		ticks := tickCommands(t, s, "greet", "heartbeat")
		for i, tk := range ticks {
			if tk.Nanosecond() != 0 {
				t.Fatalf("tick %s is not a whole second", tk)
			}
			if i > 0 && tk.Sub(ticks[i-1]) != time.Second {
				t.Fatalf("ticks %s and %s are not one second apart (a tick missed, or ticks not aligned): %v", ticks[i-1], tk, ticks)
			}
		}
		if last := ticks[len(ticks)-1]; last.Before(started.Truncate(time.Second).Add(5 * time.Second)) {
			t.Fatalf("last tick %s, want one at least 5 s after the start %s", last, started)
		}
		infos, err := clients[1].ListPeriodic(ctx)
		if err != nil || len(infos) != 1 {
			t.Fatalf("ListPeriodic: %+v %v", infos, err)
		}
		in := infos[0]
		if in.Name != "heartbeat" || in.Spec != "@every 1s" || in.Type != "greet" || in.Queue != "commands" || !in.Local || in.CatchUp != 5 || in.Since.IsZero() {
			t.Fatalf("ListPeriodic: %+v", in)
		}
		if in.LastTick == nil || in.NextTick.IsZero() || !in.NextTick.After(in.LastTick.At) {
			t.Fatalf("ListPeriodic ticks: last %+v next %s", in.LastTick, in.NextTick)
		}
	})
}

// TestPeriodicCatchUp: ticks missed while no Client ran the schedule are
// issued on start, the latest CatchUp of them (default 1, NoCatchUp
// none); a start that finds them issued adds nothing (one failed batch
// and one point read per tick looked at); a new schedule catches up no
// tick from before it was first stored. A moved clock makes the ticks be
// missed. Both stores.
func TestPeriodicCatchUp(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		clock := &testClock{now: time.Now().UTC().Truncate(time.Minute).Add(30 * time.Second)}
		cs := testenv.NewCounting(s.st)
		start := func(opts ...cmdq.PeriodicOption) *cmdq.Client {
			t.Helper()
			c := newTuned(t, cs, s.prefix, fast(), tuning.Switches{Now: clock.Now})
			if err := c.Periodic("report", "* * * * *", greet{Name: "report"}, opts...); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			return c
		}
		stop := func(c *cmdq.Client) {
			t.Helper()
			if err := c.Stop(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// First registration: no tick before it is caught up.
		stop(start(cmdq.CatchUp(3)))
		if got := tickCommands(t, s, "greet", "report"); len(got) != 0 {
			t.Fatalf("a new schedule caught up %v, want nothing", got)
		}
		// Down for 5 minutes: the latest 3 ticks are issued on start.
		clock.Add(5 * time.Minute)
		c := start(cmdq.CatchUp(3))
		stop(c)
		got := tickCommands(t, s, "greet", "report")
		want := []time.Time{clock.Now().Truncate(time.Minute).Add(-2 * time.Minute), clock.Now().Truncate(time.Minute).Add(-time.Minute), clock.Now().Truncate(time.Minute)}
		if !equalTimes(got, want) {
			t.Fatalf("catch-up of 3: ticks %v, want %v", got, want)
		}
		// Started again at the same time: the ticks exist, nothing new,
		// one failed batch and one point read per tick looked at.
		cs.Reset()
		stop(start(cmdq.CatchUp(3)))
		if got := tickCommands(t, s, "greet", "report"); len(got) != 3 {
			t.Fatalf("a second start added ticks: %v", got)
		}
		counts := cs.Counts()
		if counts["Batch"] != 3 || counts["Get"] != 4 || counts["Enqueue"] != 0 {
			t.Fatalf("a start that finds its 3 ticks issued: %s, want Batch=3 Get=4 (the schedule row's read and the 3 failed batches with their reads), no enqueue", cs)
		}
		// Down for 10 minutes, default catch-up: the latest tick only.
		clock.Add(10 * time.Minute)
		stop(start())
		got = tickCommands(t, s, "greet", "report")
		if len(got) != 4 || !got[3].Equal(clock.Now().Truncate(time.Minute)) {
			t.Fatalf("default catch-up: ticks %v, want one more at %s", got, clock.Now().Truncate(time.Minute))
		}
		// NoCatchUp: nothing.
		clock.Add(10 * time.Minute)
		stop(start(cmdq.CatchUp(cmdq.NoCatchUp)))
		if got := tickCommands(t, s, "greet", "report"); len(got) != 4 {
			t.Fatalf("NoCatchUp issued ticks: %v", got)
		}
	})
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// TestPeriodicInvalid: malformed specs and names, a nil command, a bad
// catch-up and a repeated name fail with ErrInvalidSchedule and a message
// that says what to give; Periodic after Start fails with ErrStarted.
func TestPeriodicInvalid(t *testing.T) {
	t.Parallel()
	s := openStore(t, "embedded")
	c := newClient(t, s, fast())
	for _, tc := range []struct {
		name, spec string
		cmd        cmdq.Command
		opts       []cmdq.PeriodicOption
		says       string
	}{
		{"bad.spec", "* * *", greet{}, nil, "cron expression"},
		{"bad.field", "61 * * * *", greet{}, nil, "cron expression"},
		{"bad.descriptor", "@fortnightly", greet{}, nil, "descriptor"},
		{"bad.every", "@every soon", greet{}, nil, "not a duration"},
		{"short.every", "@every 10ms", greet{}, nil, "under 1s"},
		{"empty", "", greet{}, nil, "empty spec"},
		{"9bad-name", "@hourly", greet{}, nil, "schedule name"},
		{"nil.cmd", "@hourly", nil, nil, "nil command"},
		{"catchup", "@hourly", greet{}, []cmdq.PeriodicOption{cmdq.CatchUp(cmdq.MaxCatchUp + 1)}, "CatchUp"},
		{"catchup0", "@hourly", greet{}, []cmdq.PeriodicOption{cmdq.CatchUp(0)}, "CatchUp"},
	} {
		err := c.Periodic(tc.name, tc.spec, tc.cmd, tc.opts...)
		if !errors.Is(err, cmdq.ErrInvalidSchedule) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Periodic(%q, %q): %v, want ErrInvalidSchedule saying %q", tc.name, tc.spec, err, tc.says)
		}
	}
	if err := c.Periodic("ok", "0 */2 * * * *", greet{}); err != nil {
		t.Fatalf("a six-field spec: %v", err)
	}
	if err := c.Periodic("ok", "@daily", greet{}); !errors.Is(err, cmdq.ErrInvalidSchedule) {
		t.Fatalf("a repeated name: %v", err)
	}
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Periodic("late", "@daily", greet{}); !errors.Is(err, cmdq.ErrStarted) {
		t.Fatalf("Periodic after Start: %v, want ErrStarted", err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestPeriodicRunFor: a schedule ticks during RunFor's time box, and the
// next RunFor's catch-up issues the ticks that fell between the two runs
// (a moved clock makes them fall there), and the processor of the box
// handles tick commands. Embedded store.
func TestPeriodicRunFor(t *testing.T) {
	t.Parallel()
	s := openStore(t, "embedded")
	ctx := ctxT(t)
	base := time.Now().UTC()
	clock := &testClock{now: base}
	var handled atomic.Int64
	c := newTuned(t, s.st, s.prefix, fast(), tuning.Switches{Now: func() time.Time { return clock.Now().Add(time.Since(base)) }})
	if err := cmdq.Register(c, func(context.Context, greet, *cmdq.Attempt) error { handled.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.Periodic("pulse", "@every 1s", greet{Name: "pulse"}, cmdq.CatchUp(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunFor(ctx, 3500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	first := tickCommands(t, s, "greet", "pulse")
	if len(first) < 2 {
		t.Fatalf("%d ticks during a 3.5 s RunFor of an every-second schedule, want at least 2: %v", len(first), first)
	}
	// A minute between the runs: the next run catches up the latest 3.
	clock.Add(time.Minute)
	if _, err := c.RunFor(ctx, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	after := tickCommands(t, s, "greet", "pulse")
	gap := 0
	for _, tk := range after {
		if tk.After(first[len(first)-1].Add(5*time.Second)) && !tk.After(clock.Now().Add(time.Since(base))) {
			gap++
		}
	}
	if gap < 3 {
		t.Fatalf("after a minute's gap the second RunFor issued %d ticks past the first run's, want at least the 3 caught up: %v", gap, after)
	}
	if handled.Load() == 0 {
		t.Fatal("RunFor handled none of the ticks' commands")
	}
}
