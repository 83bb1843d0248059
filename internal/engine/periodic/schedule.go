// Package periodic is the engine of cmdq's periodic commands: it parses a
// schedule (a cron expression with robfig/cron/v3's parser, a descriptor,
// or an interval), computes its ticks, and runs a scheduler that issues
// each tick's command when it is due. Several processes may run the same
// schedule: a tick's command ID derives from the schedule's name and the
// tick time (layout.TickID), so their issues collapse on the ID and
// exactly one command exists per tick, with no leader
// (docs/lifecycle.md, "Periodic commands").
package periodic

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// Schedule computes a periodic schedule's ticks. Tick times are the same
// in every process: cron ticks are whole seconds of the spec's time zone
// (UTC unless the spec starts with CRON_TZ=), and interval ticks are the
// multiples of the interval counted from the zero time (UTC), so "@every
// 2s" ticks at every even second and "@every 1h" on the hour, wherever
// and whenever the process started.
type Schedule interface {
	// Next returns the first tick after t, or the zero time when there is
	// none (within five years).
	Next(t time.Time) time.Time
}

// interval ticks every d, aligned to the zero time.
type interval time.Duration

func (d interval) Next(t time.Time) time.Time {
	return t.UTC().Truncate(time.Duration(d)).Add(time.Duration(d))
}

// parser reads cron expressions with an optional seconds field first, and
// descriptors (@hourly, @daily, @weekly, @monthly, @yearly, @every D).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// MinInterval is the shortest interval of "@every D" (1 s).
const MinInterval = time.Second

// Parse parses spec: a cron expression of five fields (minute hour
// day-of-month month day-of-week) or six (seconds first), in UTC unless it
// starts with CRON_TZ=Zone (or TZ=Zone); a descriptor (@yearly, @monthly,
// @weekly, @daily or @midnight, @hourly); or an interval, "@every D" with
// D a Go duration of at least 1 s. The error wraps
// model.ErrInvalidSchedule and says what the spec should look like.
func Parse(spec string) (Schedule, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, fmt.Errorf("%w: empty spec; give a cron expression (\"*/5 * * * *\", or six fields with seconds first), a descriptor (@hourly, @daily) or an interval (@every 30s)", model.ErrInvalidSchedule)
	}
	if rest, ok := strings.CutPrefix(s, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return nil, fmt.Errorf("%w: spec %q: the interval is not a duration (such as 2s, 15m or 1h30m): %w", model.ErrInvalidSchedule, spec, err)
		}
		if d < MinInterval {
			return nil, fmt.Errorf("%w: spec %q: the interval %s is under %s", model.ErrInvalidSchedule, spec, d, MinInterval)
		}
		return interval(d), nil
	}
	if !strings.HasPrefix(s, "CRON_TZ=") && !strings.HasPrefix(s, "TZ=") {
		s = "CRON_TZ=UTC " + s // not the process's local zone: every process must compute the same ticks
	}
	sch, err := parser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: spec %q: %w; give a cron expression (\"*/5 * * * *\", or six fields with seconds first: \"*/2 * * * * *\"), a descriptor (@hourly, @daily) or an interval (@every 30s)", model.ErrInvalidSchedule, spec, err)
	}
	return sch, nil
}

// lookback is the first span Last looks back over; it grows fourfold
// until it holds enough ticks.
const lookback = time.Minute

// Last returns up to n of s's latest ticks t with after < t ≤ now, oldest
// first.
func Last(s Schedule, n int, after, now time.Time) []time.Time {
	if n <= 0 || !now.After(after) {
		return nil
	}
	for w := lookback; ; w *= 4 {
		from := now.Add(-w)
		if !from.After(after) {
			from = after
		}
		ticks := between(s, n, from, now)
		if len(ticks) >= n || from.Equal(after) || w > 10*365*24*time.Hour {
			return ticks
		}
	}
}

// between returns up to n of s's latest ticks in (from, now], oldest first.
func between(s Schedule, n int, from, now time.Time) []time.Time {
	if d, ok := s.(interval); ok {
		var out []time.Time
		for t := now.UTC().Truncate(time.Duration(d)); t.After(from) && len(out) < n; t = t.Add(-time.Duration(d)) {
			out = append(out, t)
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
		return out
	}
	var ring []time.Time
	for t := s.Next(from); !t.IsZero() && !t.After(now); t = s.Next(t) {
		if len(ring) == n {
			ring = append(ring[:0], ring[1:]...)
		}
		ring = append(ring, t.UTC())
	}
	return ring
}

// Prev returns s's latest tick t with after < t ≤ now, or the zero time.
func Prev(s Schedule, after, now time.Time) time.Time {
	if t := Last(s, 1, after, now); len(t) == 1 {
		return t[0]
	}
	return time.Time{}
}
