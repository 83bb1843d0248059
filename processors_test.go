package cmdq_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
)

// TestProcessors: a running processor is listed by every Client on the
// store from its heartbeat row (name, host, PID, queues, concurrency,
// last seen), as Local by its own Client with its live state; a row not
// rewritten for three of its intervals is listed as gone, one older than
// ProcessorForgetAfter is left out and deleted by the running processor's
// clean-up; a clean stop deletes the processor's row. Both stores.
func TestProcessors(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		// Rows of processors that stopped without deleting theirs: one
		// gone for 5 minutes (three 1-minute intervals missed), one for
		// two hours.
		log, err := record.Open(ctx, s.st, layout.Names{Prefix: s.prefix}, record.Options{})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		for _, b := range []shared.Beat{
			{ID: "pdead5min", Name: "old-worker", Host: "elsewhere", PID: 7, State: "working", InFlight: 3, Queues: []string{"commands"}, Started: now.Add(-time.Hour), Seen: now.Add(-5 * time.Minute), Every: time.Minute},
			{ID: "pdead2h", Name: "older-worker", Host: "elsewhere", State: "idle", Seen: now.Add(-2 * time.Hour), Every: time.Minute},
		} {
			if _, err := log.WriteBeat(ctx, b); err != nil {
				t.Fatal(err)
			}
		}

		cfg := fast()
		cfg.Worker, cfg.Concurrency, cfg.HeartbeatInterval = "w-heart", 3, 100*time.Millisecond
		worker := newClient(t, s, cfg)
		if err := cmdq.Register(worker, func(_ context.Context, g greet, _ *cmdq.Attempt) error {
			if g.Name == "bad" {
				return cmdq.Permanent(errors.New("greet: no such person"))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := worker.Start(ctx); err != nil {
			t.Fatal(err)
		}
		good, err := worker.Issue(ctx, greet{Name: "ann"})
		if err != nil {
			t.Fatal(err)
		}
		bad, err := worker.Issue(ctx, greet{Name: "bad"})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{good.ID, bad.ID} {
			if _, err := worker.Wait(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		reader := newClient(t, s, fast()) // another process's view: no handlers

		host, _ := os.Hostname()
		var ps []cmdq.ProcessorInfo
		waitUntil(t, 30*time.Second, "the processor lists itself and the old row is cleaned up", func() bool {
			if ps, err = reader.Processors(ctx); err != nil {
				t.Fatal(err)
			}
			beats, err := log.ReadBeats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return len(ps) == 2 && !slices.ContainsFunc(beats, func(b shared.Beat) bool { return b.ID == "pdead2h" }) &&
				ps[0].Totals.Poisoned == 1 && ps[0].Totals.Completed == 1 // the beat after both were counted (a count grows just after its outcome is stored: Wait may return first)
		})
		live, gone := ps[0], ps[1]
		if live.Name != "w-heart" || live.Host != host || live.PID != os.Getpid() || live.Gone || live.Local ||
			live.Concurrency != 3 || !slices.Equal(live.Queues, []string{cmdq.DefaultQueue}) || live.Started.IsZero() ||
			time.Since(live.LastSeen) > time.Minute || live.IntervalMS != 100 || live.State == "" || live.State == "gone" {
			t.Errorf("the running processor is listed as %+v", live)
		}
		if live.Totals != (cmdq.OutcomeCounts{Completed: 1, Poisoned: 1}) || live.LastFailure == nil || live.LastFailure.CommandID != bad.ID ||
			!live.LastFailure.Poisoned || live.LastFailure.Error != "permanent: greet: no such person" || live.LastFailure.Type != "greet" {
			t.Errorf("the running processor reports totals %+v and last failure %+v, want 1 completed, 1 poisoned (%s)", live.Totals, live.LastFailure, bad.ID)
		}
		if gone.ID != "pdead5min" || !gone.Gone || gone.State != "gone" || gone.Name != "old-worker" || gone.InFlight != 3 {
			t.Errorf("the processor that stopped 5 minutes ago is listed as %+v, want gone", gone)
		}
		mine, err := worker.Processors(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(mine) != 2 || !mine[0].Local || mine[0].ID != live.ID || mine[0].State != string(worker.Health().State) && mine[0].State == "" {
			t.Errorf("the worker's own Client lists %+v, want itself first, Local", mine)
		}

		if err := worker.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if ps, err = reader.Processors(ctx); err != nil {
			t.Fatal(err)
		}
		if len(ps) != 1 || ps[0].ID != "pdead5min" {
			t.Errorf("after a clean stop the processors are %+v, want only the gone one", ps)
		}
	})
}

// TestNoHeartbeat: with NoHeartbeat a running processor writes no row.
func TestNoHeartbeat(t *testing.T) {
	s := openStore(t, "embedded")
	ctx := ctxT(t)
	cfg := fast()
	cfg.HeartbeatInterval = cmdq.NoHeartbeat
	c := newClient(t, s, cfg)
	if err := cmdq.Register(c, func(context.Context, greet, *cmdq.Attempt) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.Issue(ctx, greet{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StateCompleted {
		t.Fatalf("wait: %v %v", st.State, err)
	}
	ps, err := c.Processors(ctx)
	if err != nil || len(ps) != 0 {
		t.Fatalf("Processors with NoHeartbeat: %+v, %v; want none", ps, err)
	}
	if _, err := cmdq.New(s.st, cmdq.Config{HeartbeatInterval: -2 * time.Second}); err == nil {
		t.Error("a negative HeartbeatInterval other than NoHeartbeat was accepted")
	}
}
