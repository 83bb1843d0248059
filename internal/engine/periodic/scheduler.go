package periodic

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq/cmdqtype"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
)

// Entry is one schedule the Scheduler runs.
type Entry struct {
	// Name names the schedule (record.TickID derives from it).
	Name string
	// Schedule computes its ticks.
	Schedule Schedule
	// CatchUp is how many of the latest missed ticks a start issues (0:
	// none).
	CatchUp int
	// Since is when the schedule was first stored: no tick at or before
	// it is issued.
	Since time.Time
	// Issue issues the tick at tick under id; a duplicate (the command
	// exists) is a success.
	Issue func(ctx context.Context, id string, tick time.Time) error
}

// Options configures a Scheduler.
type Options struct {
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Logger receives failed issues (warn) and catch-ups (info).
	Logger zerolog.Logger
	// RetryBase is the first delay between the tries of a tick whose issue
	// failed (doubling, while the schedule's next tick is not due).
	// Defaults to 1 s.
	RetryBase time.Duration
	// Issued, when set, is called after each tick issued (or found
	// issued), with catchUp true for the ticks of the start's catch-up.
	Issued func(name string, tick time.Time, catchUp bool)
}

// Run runs entries until ctx ends: first the catch-up (for each entry, up
// to CatchUp of its latest ticks after Since, within the issue window,
// each issued — a tick whose command exists costs what a duplicate
// costs), then each entry's ticks as they come, woken by a timer at the
// earliest next tick (no storage call in between). A tick whose issue
// fails is tried again (1 s, doubling) until the entry's next tick is
// due. Ticks that passed while the process could not run (a paused
// machine, a stalled goroutine) are issued up to max(CatchUp, 1), the
// latest ones. Run returns when ctx ends, after the issues in flight.
func Run(ctx context.Context, entries []Entry, opts Options) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.RetryBase <= 0 {
		opts.RetryBase = time.Second
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	now := opts.Now().UTC()
	// last[i] is entry i's latest tick handled.
	last := make([]time.Time, len(entries))
	for i, e := range entries {
		last[i] = now
		if e.CatchUp <= 0 {
			continue
		}
		after := catchUpFloor(e.Since, now)
		for _, t := range Last(e.Schedule, e.CatchUp, after, now) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				issue(ctx, e, t, true, opts)
			}()
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := opts.Now().UTC()
		var next time.Time
		for i, e := range entries {
			missed := Last(e.Schedule, max(e.CatchUp, 1), last[i], now)
			for _, t := range missed {
				wg.Add(1)
				go func() {
					defer wg.Done()
					issue(ctx, e, t, false, opts)
				}()
			}
			if len(missed) > 0 || now.After(last[i]) {
				last[i] = now
			}
			if n := e.Schedule.Next(now); !n.IsZero() && (next.IsZero() || n.Before(next)) {
				next = n
			}
		}
		if next.IsZero() {
			<-ctx.Done()
			return
		}
		timer.Reset(max(next.Sub(opts.Now()), 0))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// catchUpFloor is the time after which a start looks for missed ticks:
// since, and not before the issue window (the start of the day
// cmdqtype.CatchUpHorizonDays before now's).
func catchUpFloor(since, now time.Time) time.Time {
	floor := record.DayTime(record.DayOf(now) - cmdqtype.CatchUpHorizonDays).Add(-time.Nanosecond)
	if since.After(floor) {
		return since
	}
	return floor
}

// issue issues e's tick at t, trying again while it fails and e's next
// tick is not due (or, for the catch-up, for a minute).
func issue(ctx context.Context, e Entry, t time.Time, catchUp bool, opts Options) {
	id := record.TickID(e.Name, t)
	until := e.Schedule.Next(t)
	if catchUp || until.IsZero() {
		until = opts.Now().Add(time.Minute)
	}
	wait := opts.RetryBase
	for try := 1; ; try++ {
		err := e.Issue(ctx, id, t)
		if err == nil || errors.Is(err, cmdqtype.ErrEnqueueFailed) || errors.Is(err, cmdqtype.ErrNotAccepted) {
			// Stored (a failed enqueue is retried by the issuer and the
			// reconciler).
			if catchUp {
				opts.Logger.Info().Str("periodic", e.Name).Time("tick", t).Str("command", id).Msg("cmdq periodic: caught up a tick")
			}
			if opts.Issued != nil {
				opts.Issued(e.Name, t, catchUp)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, cmdqtype.ErrInvalidParams) || errors.Is(err, cmdqtype.ErrParamsTooLarge) || errors.Is(err, cmdqtype.ErrInvalidType) || errors.Is(err, cmdqtype.ErrInvalidID) {
			opts.Logger.Error().Err(err).Str("periodic", e.Name).Time("tick", t).Msg("cmdq periodic: the tick's command cannot be issued")
			return
		}
		if !opts.Now().Add(wait).Before(until) {
			opts.Logger.Warn().Err(err).Str("periodic", e.Name).Time("tick", t).Int("tries", try).Msg("cmdq periodic: gave up a tick (another process may have issued it; the next start catches it up)")
			return
		}
		opts.Logger.Warn().Err(err).Str("periodic", e.Name).Time("tick", t).Int("try", try).Dur("retry_in", wait).Msg("cmdq periodic: issuing a tick failed; trying again")
		tm := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-tm.C:
		}
		wait *= 2
	}
}
