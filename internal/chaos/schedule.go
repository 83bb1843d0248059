package chaos

import (
	"encoding/json"
	"math/rand/v2"
	"time"
)

// Scheduled commands in the chaos runs: a share of the commands is issued
// with a delay, and the not-early invariant holds the run to "due means
// due": none starts before its runAt, whatever kills and faults do, and
// each ends as designed or, when due after the run, still scheduled.

// stillScheduled is the delay of the commands meant to outlive the run:
// they end scheduled (pending, runAt ahead, never started). A day: with an
// hour, the one-hour soak's first such commands came due a few seconds
// before its check, after its processes had stopped, and were reported
// stranded.
const stillScheduled = 24 * time.Hour

// schedule gives a share (0..1) of cmds a delay: 0.5-8 s, or for one in
// twenty stillScheduled. Their bodies carry it ("delay").
func schedule(rng *rand.Rand, cmds []*command, share float64) {
	for _, c := range cmds {
		if share <= 0 || rng.Float64() >= share {
			continue
		}
		c.Delay = 500*time.Millisecond + time.Duration(rng.Int64N(int64(7500*time.Millisecond)))
		if rng.IntN(20) == 0 {
			c.Delay = stillScheduled
		}
		c.Delay = c.Delay.Truncate(time.Millisecond)
		c.body, _ = json.Marshal(map[string]any{"id": c.ID, "type": c.Type, "params": json.RawMessage(c.Params), "delay": c.Delay.String()})
	}
}

// checkSchedule checks not-early for command c (accepted) with history h
// and journalled executions xs.
func checkSchedule(r *Report, add func(inv, id, format string, args ...any), c *command, h *history, xs []*execution) {
	if c.Delay <= 0 {
		return
	}
	r.Scheduled++
	var created *event
	for i := range h.Events {
		if h.Events[i].Kind == "created" {
			created = &h.Events[i]
		}
	}
	if created == nil || created.RunAt.IsZero() || h.RunAt.IsZero() {
		add(InvNotEarly, c.ID, "%s %s was issued with a delay of %s but has no runAt stored (row %s, created event %v)", c.Type, c.Params, c.Delay, h.RunAt, created)
		return
	}
	runAt := created.RunAt // the row's RunAt moves on with retries
	if runAt.Before(created.Time.Add(c.Delay-time.Second)) || runAt.After(created.Time.Add(c.Delay+time.Second)) {
		add(InvNotEarly, c.ID, "%s %s issued with a delay of %s at %s has runAt %s", c.Type, c.Params, c.Delay, created.Time.Format(time.RFC3339Nano), runAt.Format(time.RFC3339Nano))
	}
	for _, e := range h.Events {
		if e.Kind == "started" && e.Time.Before(runAt) {
			add(InvNotEarly, c.ID, "%s %s started at %s (%s attempt %d), before its runAt %s", c.Type, c.Params, e.Time.Format(time.RFC3339Nano), e.Worker, e.Attempt, runAt.Format(time.RFC3339Nano))
		}
	}
	for _, x := range xs {
		if x.BeginT.Before(runAt) {
			add(InvNotEarly, c.ID, "%s %s: a handler began at %s, before its runAt %s: %s", c.Type, c.Params, x.BeginT.Format(time.RFC3339Nano), runAt.Format(time.RFC3339Nano), x)
		}
	}
	if c.Delay >= stillScheduled && h.Status == "pending" && (h.Attempts != 0 || len(xs) > 0) {
		add(InvNotEarly, c.ID, "%s %s is due in an hour but started (%d attempts, %d executions)", c.Type, c.Params, h.Attempts, len(xs))
	}
}
