package model

import (
	"errors"
	"fmt"
	"time"
)

// Scheduled commands and run-now (docs/lifecycle.md, "Scheduled
// commands").

// MaxScheduleAhead is documented in package cmdq.
const MaxScheduleAhead = 2 * 365 * 24 * time.Hour

// StateScheduled is documented in package cmdq.
const StateScheduled State = "scheduled"

// Sentinel errors of scheduling (documented in package cmdq).
var (
	ErrInvalidSchedule = errors.New("cmdq: invalid schedule")
	ErrNotWaiting      = errors.New("cmdq: command is not waiting for its time")
)

// MaxClockSkew is documented in package cmdq.
const MaxClockSkew = 2 * time.Second

// Scheduled reports whether a command in status s is scheduled at now:
// pending with a RunAt after now.
func (s Status) Scheduled(now time.Time) bool {
	return s.State == StatePending && s.RunAt.After(now)
}

// AsOf returns s as a reader sees it at now: State StateScheduled while it
// is pending with a RunAt after now (docs/lifecycle.md, "Scheduled
// commands"). The stored state stays pending; nothing is written when the
// time comes.
func (s Status) AsOf(now time.Time) Status {
	if s.Scheduled(now) {
		s.State = StateScheduled
	}
	return s
}

// Stored returns the state as stored: StatePending for StateScheduled
// (which is derived), s itself otherwise.
func (s State) Stored() State {
	if s == StateScheduled {
		return StatePending
	}
	return s
}

// ValidSchedule checks Raw.RunAt and Raw.Delay at now and returns the
// run-at time they ask for (zero: none). Both set, a negative delay, or a
// time more than MaxScheduleAhead after now give an error wrapping
// ErrInvalidSchedule that says what to send instead. A RunAt at or before
// now is kept: the command is due at once.
func ValidSchedule(r Raw, now time.Time) (time.Time, error) {
	switch {
	case !r.RunAt.IsZero() && r.Delay != 0:
		return time.Time{}, fmt.Errorf("%w: both a run-at time (%s) and a delay (%s) were given; give one of them", ErrInvalidSchedule, r.RunAt.UTC().Format(time.RFC3339), r.Delay)
	case r.Delay < 0:
		return time.Time{}, fmt.Errorf("%w: the delay %s is negative; give a delay of 0 or more (such as 90s), or a run-at time", ErrInvalidSchedule, r.Delay)
	case r.Delay > MaxScheduleAhead:
		return time.Time{}, fmt.Errorf("%w: the delay %s is more than %d days; schedule at most 2 years ahead", ErrInvalidSchedule, r.Delay, MaxScheduleAhead/(24*time.Hour))
	case r.Delay > 0:
		return now.Add(r.Delay), nil
	case r.RunAt.IsZero():
		return time.Time{}, nil
	case r.RunAt.Year() < 1 || r.RunAt.Year() > 9999:
		return time.Time{}, fmt.Errorf("%w: the run-at time's year %d is outside 1-9999", ErrInvalidSchedule, r.RunAt.Year())
	case r.RunAt.Sub(now) > MaxScheduleAhead:
		return time.Time{}, fmt.Errorf("%w: the run-at time %s is more than 2 years ahead (%d days); schedule at most 2 years ahead", ErrInvalidSchedule, r.RunAt.UTC().Format(time.RFC3339), MaxScheduleAhead/(24*time.Hour))
	}
	return r.RunAt, nil
}
