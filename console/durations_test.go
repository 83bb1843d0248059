package console

import (
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// The timeline's durations: each attempt from its start to its outcome,
// each step from the previous step or the attempt's start, an attempt
// still running to now, and the total from created to the final event.
func TestTimelineDurations(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	evs := []cmdq.Event{
		{Seq: 1, Kind: cmdq.EventCreated, Time: at(0)},
		{Seq: 2, Kind: cmdq.EventStarted, Time: at(100), Attempt: 1},
		{Seq: 3, Kind: cmdq.EventStepCompleted, Time: at(450), Attempt: 1, Step: 1},
		{Seq: 4, Kind: cmdq.EventFailed, Time: at(1304), Attempt: 1},
		{Seq: 5, Kind: cmdq.EventStarted, Time: at(2300), Attempt: 2},
		{Seq: 6, Kind: cmdq.EventStepCompleted, Time: at(2400), Attempt: 2, Step: 2},
		{Seq: 7, Kind: cmdq.EventStepCompleted, Time: at(65400), Attempt: 2, Step: 3},
		{Seq: 8, Kind: cmdq.EventCompleted, Time: at(65500), Attempt: 2},
	}
	rows := timelineRows(evs, false, at(99999))
	want := []string{"", "", "step took 350 ms", "attempt 1 took 1.204 s", "", "step took 100 ms", "step took 1 min 3 s", "attempt 2 took 1 min 3 s"}
	for i, r := range rows {
		if r.Took != want[i] {
			t.Errorf("row %d (%s): took %q, want %q", i, r.Kind, r.Took, want[i])
		}
	}
	st := cmdq.Status{State: cmdq.StateCompleted, CreatedAt: at(0), UpdatedAt: at(70000)}
	if tot := totalOf(st, evs, at(99999)); !tot.Final || tot.D != 65500*time.Millisecond || tot.To != "completed" || fmtDur(tot.D) != "1 min 5 s" {
		t.Errorf("total %+v (%s), want 1 min 5 s to completed", tot, fmtDur(tot.D))
	}

	// Running: the open attempt's start says how long so far; the total
	// runs to now.
	running := evs[:6]
	rows = timelineRows(running, true, at(12300))
	if rows[4].Took != "running for 10.0 s" {
		t.Errorf("running attempt: %q, want running for 10.0 s", rows[4].Took)
	}
	if rows[1].Took != "" {
		t.Errorf("the finished attempt's start says %q", rows[1].Took)
	}
	st = cmdq.Status{State: cmdq.StateRunning, CreatedAt: at(0)}
	if tot := totalOf(st, running, at(12300)); tot.Final || tot.D != 12300*time.Millisecond {
		t.Errorf("total while running %+v, want 12.3 s so far", tot)
	}
	// An attempt with no started event (a cancel before the start) has no
	// attempt duration.
	rows = timelineRows([]cmdq.Event{{Kind: cmdq.EventCreated, Time: at(0)}, {Kind: cmdq.EventPoisoned, Attempt: 1, Time: at(5)}}, false, at(10))
	if rows[1].Took != "" {
		t.Errorf("poisoned without a start: %q", rows[1].Took)
	}
	for d, w := range map[time.Duration]string{-time.Second: "0 ms", 999 * time.Millisecond: "999 ms", 59940 * time.Millisecond: "59.9 s",
		3*time.Hour + 5*time.Minute: "3 h 5 min", 50 * time.Hour: "2 d 2 h"} {
		if got := fmtDur(d); got != w {
			t.Errorf("fmtDur(%s) = %q, want %q", d, got, w)
		}
	}
}
