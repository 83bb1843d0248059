package cmdq_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
)

// TestTriggerPeriodic: a schedule stored by another process (not
// registered here) is triggered from its stored row: the command is the
// schedule's type with its parameters, its correlation ID the tick's,
// and the same trigger time again issues nothing (Duplicate, the same
// ID); a schedule this process runs is triggered with its own command; an
// unknown schedule is ErrNotFound, a row stored without parameters
// ErrNoScheduleParams naming the process that stored it, a trigger time
// too old ErrInvalidSchedule. GetPeriodic lists the spec's latest ticks,
// newest first, with their states. Both stores.
func TestTriggerPeriodic(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.Worker = "elsewhere"
		other := newClient(t, s, cfg)
		if err := other.Periodic("report.nightly", "0 3 * * *", greet{Name: "nightly"}, cmdq.CatchUp(cmdq.NoCatchUp)); err != nil {
			t.Fatal(err)
		}
		if err := other.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := other.Stop(ctx); err != nil {
			t.Fatal(err)
		}

		here := newClient(t, s, fast())
		if err := here.Periodic("local.every", "@every 1h", greet{Name: "local"}, cmdq.CatchUp(cmdq.NoCatchUp)); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		tick, err := here.TriggerPeriodic(ctx, "report.nightly", "test")
		if err != nil {
			t.Fatalf("trigger a schedule stored by another process: %v", err)
		}
		if tick.Duplicate || tick.State != cmdq.StatePending || tick.At.Before(before.Add(-time.Second)) || tick.At.After(time.Now().Add(time.Second)) {
			t.Fatalf("tick %+v, want a new pending tick at about now", tick)
		}
		st, params, err := here.GetParams(ctx, tick.ID)
		if err != nil {
			t.Fatal(err)
		}
		var g greet
		if err := json.Unmarshal(params, &g); err != nil || g.Name != "nightly" || st.Type != "greet" || st.Queue != "commands" {
			t.Fatalf("the triggered command: %+v params %s", st, params)
		}
		if want := "periodic:report.nightly@" + tick.At.UTC().Format(time.RFC3339Nano); st.CorrelationID != want {
			t.Fatalf("correlation ID %q, want %q", st.CorrelationID, want)
		}
		// Posted twice: the same trigger time issues nothing new.
		again, err := here.TriggerPeriodicAt(ctx, "report.nightly", "test", tick.At)
		if err != nil || again.ID != tick.ID || !again.Duplicate {
			t.Fatalf("the same trigger again: %+v %v, want Duplicate of %s", again, err, tick.ID)
		}
		// A schedule registered here: its own command.
		lt, err := here.TriggerPeriodic(ctx, "local.every", "test")
		if err != nil || lt.ID == tick.ID {
			t.Fatalf("trigger a local schedule: %+v %v", lt, err)
		}
		if _, params, err := here.GetParams(ctx, lt.ID); err != nil || !strings.Contains(string(params), `"local"`) {
			t.Fatalf("the local trigger's params %s %v", params, err)
		}

		if _, err := here.TriggerPeriodic(ctx, "no.such", "test"); !errors.Is(err, cmdq.ErrNotFound) {
			t.Fatalf("an unknown schedule: %v, want ErrNotFound", err)
		}
		if _, err := here.TriggerPeriodicAt(ctx, "report.nightly", "test", time.Now().Add(-2*cmdq.MaxTriggerAge)); !errors.Is(err, cmdq.ErrInvalidSchedule) {
			t.Fatalf("a trigger time too old: %v, want ErrInvalidSchedule", err)
		}
		if _, err := here.TriggerPeriodic(ctx, "9bad", "test"); !errors.Is(err, cmdq.ErrInvalidSchedule) {
			t.Fatalf("a malformed name: %v, want ErrInvalidSchedule", err)
		}
		// A row as older versions stored it: no parameters.
		tb, err := s.st.Table(ctx, s.prefix+"commands")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := shared.New(tb, time.Now).StoreSchedule(ctx, shared.Schedule{Name: "legacy", Spec: "@daily", Type: "greet", Queue: "commands"}, "old-proc-7"); err != nil {
			t.Fatal(err)
		}
		_, err = here.TriggerPeriodic(ctx, "legacy", "test")
		if !errors.Is(err, cmdq.ErrNoScheduleParams) || !strings.Contains(err.Error(), "old-proc-7") || !strings.Contains(err.Error(), "restart") {
			t.Fatalf("a row without parameters: %v, want ErrNoScheduleParams naming old-proc-7 and a restart", err)
		}
		infos, err := here.ListPeriodic(ctx)
		if err != nil {
			t.Fatal(err)
		}
		can := map[string]bool{}
		for _, in := range infos {
			can[in.Name] = in.CanTrigger
		}
		if !can["report.nightly"] || !can["local.every"] || can["legacy"] {
			t.Fatalf("CanTrigger %v, want report.nightly and local.every only", can)
		}

		// The latest ticks of an every-second schedule's spec, newest
		// first: every one missed (nothing ran it), a second apart.
		if _, err := shared.New(tb, func() time.Time { return time.Now().Add(-time.Minute) }).StoreSchedule(ctx,
			shared.Schedule{Name: "beat", Spec: "@every 1s", Type: "greet", Queue: "commands", Params: json.RawMessage(`{}`)}, "old-proc-7"); err != nil {
			t.Fatal(err)
		}
		info, err := here.GetPeriodic(ctx, "beat", 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.RecentTicks) != 5 || info.LastTick == nil || info.LastTick.ID != info.RecentTicks[0].ID || !info.CanTrigger {
			t.Fatalf("GetPeriodic: %+v", info)
		}
		for i, tk := range info.RecentTicks {
			if !tk.Missed || i > 0 && info.RecentTicks[i-1].At.Sub(tk.At) != time.Second {
				t.Fatalf("recent ticks %+v, want 5 missed ticks a second apart, newest first", info.RecentTicks)
			}
		}
		if _, err := here.GetPeriodic(ctx, "no.such", 5); !errors.Is(err, cmdq.ErrNotFound) {
			t.Fatalf("GetPeriodic of an unknown schedule: %v", err)
		}
	})
}
