package console

import (
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// Durations on a command's page: how long each attempt, each step and the
// whole command took, from the timeline's own event times (no storage
// call beyond the page's one query of the events).

// timelineRow is one event of a command's timeline with what it took.
type timelineRow struct {
	cmdq.Event
	// Took is the event's duration as the page writes it ("attempt took
	// 1.204 s", "step took 350 ms", "running for 12 s"); "" for none.
	Took string
	// TookTitle says what Took measures (its hover text).
	TookTitle string
}

// commandTotal is a command's total time on its page: from its created
// event (else CreatedAt) to its final event, or to now.
type commandTotal struct {
	D     time.Duration
	Final bool   // ended at the final event; else it is so far
	To    string // the final event's kind ("completed"), when Final
}

// outcomeKinds end an attempt (with the attempt's number on the event).
var outcomeKinds = map[cmdq.EventKind]bool{
	cmdq.EventCompleted: true, cmdq.EventFailed: true, cmdq.EventPoisoned: true,
	cmdq.EventLeaseLost: true, cmdq.EventDeferred: true,
}

// timelineRows returns evs with their durations: an attempt's outcome
// (completed, failed, poisoned, lease lost, deferred) with the time since
// its started event; a completed step with the time since the attempt's
// previous step, or its start; the started event of an attempt still
// running (running true: the command's state is running) with the time
// since it started, to now. An outcome whose attempt has no started event
// (a cancel before the start) has none.
func timelineRows(evs []cmdq.Event, running bool, now time.Time) []timelineRow {
	out := make([]timelineRow, len(evs))
	started := map[int]time.Time{}  // attempt → its started event's time
	lastMark := map[int]time.Time{} // attempt → its start or its last step
	open := -1                      // the row of the latest started event without an outcome
	for i, e := range evs {
		out[i].Event = e
		switch {
		case e.Kind == cmdq.EventStarted:
			started[e.Attempt], lastMark[e.Attempt] = e.Time, e.Time
			open = i
		case e.Kind == cmdq.EventStepCompleted:
			if t, ok := lastMark[e.Attempt]; ok {
				out[i].Took, out[i].TookTitle = "step took "+fmtDur(e.Time.Sub(t)), "since the attempt's previous step, or its start"
			}
			lastMark[e.Attempt] = e.Time
		case outcomeKinds[e.Kind]:
			if t, ok := started[e.Attempt]; ok {
				out[i].Took, out[i].TookTitle = fmt.Sprintf("attempt %d took %s", e.Attempt, fmtDur(e.Time.Sub(t))), "from the attempt's start to its outcome"
			}
			if open >= 0 && out[open].Attempt == e.Attempt {
				open = -1
			}
		case e.Kind == cmdq.EventCancelled || e.Kind == cmdq.EventRequeued || e.Kind == cmdq.EventDiscarded:
			open = -1
		}
	}
	if running && open >= 0 {
		out[open].Took, out[open].TookTitle = "running for "+fmtDur(now.Sub(out[open].Time)), "from the attempt's start to now"
	}
	return out
}

// totalOf returns a command's total time: from its created event (else
// st.CreatedAt) to its final event (else st.UpdatedAt) when it ended, or
// to now.
func totalOf(st cmdq.Status, evs []cmdq.Event, now time.Time) commandTotal {
	from := st.CreatedAt
	for _, e := range evs {
		if e.Kind == cmdq.EventCreated {
			from = e.Time
			break
		}
	}
	if !st.State.Final() {
		return commandTotal{D: now.Sub(from)}
	}
	to, kind := st.UpdatedAt, string(st.State)
	for i := len(evs) - 1; i >= 0; i-- {
		if k := evs[i].Kind; k == cmdq.EventCompleted || k == cmdq.EventPoisoned || k == cmdq.EventDiscarded || k == cmdq.EventCancelled {
			to, kind = evs[i].Time, string(k)
			break
		}
	}
	return commandTotal{D: to.Sub(from), Final: true, To: kind}
}

// fmtDur writes a duration for a person: "0 ms", "350 ms", "1.204 s",
// "59.9 s", "3 min 4 s", "2 h 5 min", "3 d 4 h" (a negative one, from
// clocks apart, as 0 ms).
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return "0 ms"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d/time.Millisecond)
	case d < 10*time.Second:
		return fmt.Sprintf("%.3f s", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", d/time.Minute, d%time.Minute/time.Second)
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", d/time.Hour, d%time.Hour/time.Minute)
	}
	return fmt.Sprintf("%d d %d h", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
}
