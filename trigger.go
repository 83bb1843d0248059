package cmdq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// ErrNoScheduleParams: TriggerPeriodic of a schedule that this process
// does not run and whose stored row holds no parameters (stored by a
// version from before schedules stored them, or too large for the row).
// Trigger it from a process that runs it, or restart one such process
// once to store them. The HTTP API answers 409.
var ErrNoScheduleParams = errors.New("cmdq: the schedule's stored row holds no parameters")

// MaxTriggerAge is how far before now a trigger time given to
// TriggerPeriodicAt may be (1 hour): long enough for a confirmation page
// or a retried request, short enough to stay a trigger "now".
const MaxTriggerAge = time.Hour

// TriggerPeriodic issues the command of periodic schedule name now, as
// if a tick fell at this moment (t: now, at millisecond precision): its
// ID is the tick's (derived from name and t, as a scheduled tick's) and
// its correlation ID "periodic:NAME@T". by names who triggered it, for
// the log. It is TriggerPeriodicAt with a zero at; see there.
func (c *Client) TriggerPeriodic(ctx context.Context, name, by string) (TickInfo, error) {
	return c.TriggerPeriodicAt(ctx, name, by, time.Time{})
}

// TriggerPeriodicAt issues the command of periodic schedule name as the
// tick of time at (zero: now; truncated to milliseconds, UTC): its ID
// derives from name and at as a scheduled tick's does, its correlation ID
// is "periodic:NAME@AT". The same name and at again issue nothing and
// return the same tick with Duplicate set: a trigger retried or posted
// twice with the time the first returned runs once. at may be at most
// MaxTriggerAge before now and MaxClockSkew after it (ErrInvalidSchedule
// otherwise).
//
// The command is this process's registered one (Client.Periodic) when it
// runs the schedule; otherwise it is built from the schedule's stored
// row: its type, queue and parameters (which processes store since this
// version). Errors: ErrInvalidSchedule for a malformed name or time,
// ErrNotFound when neither this process nor the store knows the schedule,
// ErrNoScheduleParams when only an old row without parameters does (the
// error names the process that stored it), and the errors of Issue.
//
// Cost: one issue (a batch and an enqueue; a failed batch and a point
// read for a repeated trigger); plus, for a schedule this process does not
// run, one query of the schedules' rows (partition ~periodic) first.
// Nothing else changes: the schedule's own ticks go on as before.
func (c *Client) TriggerPeriodicAt(ctx context.Context, name, by string, at time.Time) (TickInfo, error) {
	if err := model.ValidateType(name); err != nil {
		return TickInfo{}, fmt.Errorf("%w: name %q: a schedule name is 1-%d characters: a letter, then letters, digits, '.', '_' or '-'", ErrInvalidSchedule, name, model.MaxPeriodicNameLength)
	}
	now := layout.Millis(c.now())
	if at.IsZero() {
		at = now
	}
	at = layout.Millis(at)
	if at.Before(now.Add(-MaxTriggerAge)) || at.After(now.Add(MaxClockSkew)) {
		return TickInfo{}, fmt.Errorf("%w: trigger time %s is more than %s before now (%s) or after it: give the time a trigger returned within the last %s, or none for now",
			ErrInvalidSchedule, at.Format(time.RFC3339Nano), MaxTriggerAge, now.Format(time.RFC3339Nano), MaxTriggerAge)
	}
	cmd, err := c.scheduleCommand(ctx, name)
	if err != nil {
		return TickInfo{}, err
	}
	id := layout.TickID(name, at)
	res, err := c.issuer().IssueDerived(ctx, cmd, id, tickCorrelation(name, at))
	if err != nil && !(errors.Is(err, ErrEnqueueFailed) && res.ID != "") {
		return TickInfo{}, fmt.Errorf("cmdq: trigger periodic %s: %w", name, err)
	}
	tick := TickInfo{At: at, ID: id, State: StatePending, Duplicate: res.Existing}
	if res.Existing {
		if st, gerr := c.Get(ctx, id); gerr == nil {
			tick.State = st.State
		}
	}
	ev := c.cfg.Logger.Info()
	if res.Existing {
		ev = c.cfg.Logger.Debug()
	}
	ev.Str("periodic", name).Str("command", id).Str("by", by).Bool("duplicate", res.Existing).Msg("cmdq: periodic schedule triggered")
	return tick, err
}

// scheduleCommand returns the command a trigger of schedule name issues:
// the registered one, else one built from the stored row.
func (c *Client) scheduleCommand(ctx context.Context, name string) (issuer.Command, error) {
	c.mu.Lock()
	i := slices.IndexFunc(c.schedules, func(s *schedule) bool { return s.name == name })
	var cmd Command
	if i >= 0 {
		cmd = c.schedules[i].cmd
	}
	c.mu.Unlock()
	if cmd != nil {
		return cmd, nil
	}
	r, err := c.reader(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := r.ReadSchedules(ctx)
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		if row.Name != name {
			continue
		}
		if row.Params == nil {
			who := "a process that runs it"
			if row.UpdatedBy != "" {
				who = "process " + layout.Truncate(row.UpdatedBy, 128) + " (or another that runs it)"
			}
			return nil, fmt.Errorf("%w: schedule %s was stored by a version that kept no parameters in its row; trigger it from %s, or restart one process that runs it once so that it stores them", ErrNoScheduleParams, name, who)
		}
		return storedCommand{typ: row.Type, queue: row.Queue, params: row.Params}, nil
	}
	return nil, fmt.Errorf("%w: no periodic schedule %s is registered here or stored (GET /v1/periodic lists them)", ErrNotFound, name)
}

// storedCommand is a schedule's command rebuilt from its stored row: its
// type, queue and JSON parameters.
type storedCommand struct {
	typ, queue string
	params     json.RawMessage
}

func (s storedCommand) CommandType() string            { return s.typ }
func (s storedCommand) MarshalJSON() ([]byte, error)   { return s.params, nil }
func (s storedCommand) CommandOptions() CommandOptions { return CommandOptions{Queue: s.queue} }
