package periodic

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq/internal/engine/clock"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// Entry is one schedule the Scheduler runs.
type Entry struct {
	// Name names the schedule (layout.TickID derives from it).
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
	// Now returns the current time. Defaults to Clock's.
	Now func() time.Time
	// Clock is the clock the ticks come on: Run's timer to the next tick
	// and the waits between the tries of a failed tick run on it. Default
	// nil: the system clock (clock.Real).
	Clock clock.Clock
	// Logger receives failed issues (warn) and catch-ups (info).
	Logger zerolog.Logger
	// RetryBase is the first delay between the tries of a tick whose issue
	// failed (doubling, while the schedule's next tick is not due).
	// Defaults to 1 s.
	RetryBase time.Duration
	// Issued, when set, is called after each tick issued (or found
	// issued), with catchUp true for the ticks of the start's catch-up.
	Issued func(name string, tick time.Time, catchUp bool)
	// Drain is how long an issue in flight when Run's context is canceled
	// may go on (it is not tried again): a stop does not cancel a tick
	// half issued, which every process may have left to the others. It
	// never goes past the context's deadline. 0: it is canceled with the
	// context.
	Drain time.Duration
}

// Tick is one tick of one entry.
type Tick struct {
	Entry Entry
	At    time.Time
}

// CatchUp issues, for each entry, up to CatchUp of its latest ticks at or
// before now, after Since and within the issue window (from the start of
// the day model.CatchUpHorizonDays before now's), once each and all at
// once: a tick whose command exists costs what a duplicate costs. It
// returns the ticks whose issue failed (Run tries them again).
func CatchUp(ctx context.Context, entries []Entry, now time.Time, opts Options) []Tick {
	opts = opts.withDefaults()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []Tick
	)
	for _, e := range entries {
		if e.CatchUp <= 0 {
			continue
		}
		for _, t := range Last(e.Schedule, e.CatchUp, catchUpFloor(e.Since, now), now) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !try(ctx, e, t, true, opts) {
					mu.Lock()
					failed = append(failed, Tick{e, t})
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	return failed
}

func (o Options) withDefaults() Options {
	o.Clock = clock.Or(o.Clock)
	if o.Now == nil {
		o.Now = o.Clock.Now
	}
	if o.RetryBase <= 0 {
		o.RetryBase = time.Second
	}
	return o
}

// Run runs entries from start (the time CatchUp looked up to) until ctx
// ends: the ticks in retry (CatchUp's failures) are tried again, then each
// entry's ticks are issued as they come, woken by a timer at the earliest
// next tick (no storage call in between). A tick whose issue fails is
// tried again (after 1 s, doubling) until the entry's next tick is due.
// Ticks that passed while the process could not run (a paused machine, a
// stalled goroutine) are issued up to max(CatchUp, 1), the latest ones.
// Run returns when ctx ends, after the issues in flight (which go on for
// up to opts.Drain).
func Run(ctx context.Context, entries []Entry, start time.Time, retry []Tick, opts Options) {
	opts = opts.withDefaults()
	ictx, icancel := drainContext(ctx, opts.Drain)
	defer icancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	spawn := func(e Entry, t time.Time, catchUp bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			issue(ctx, ictx, e, t, catchUp, opts)
		}()
	}
	for _, tk := range retry {
		spawn(tk.Entry, tk.At, true)
	}
	// last[i] is entry i's latest tick time handled.
	last := make([]time.Time, len(entries))
	for i := range entries {
		last[i] = start.UTC()
	}
	timer := opts.Clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := opts.Now().UTC()
		var next time.Time
		for i, e := range entries {
			for _, t := range Last(e.Schedule, max(e.CatchUp, 1), last[i], now) {
				spawn(e, t, false)
			}
			if now.After(last[i]) {
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
		case <-timer.C():
		}
	}
}

// catchUpFloor is the time after which a start looks for missed ticks:
// since, and not before the issue window (the start of the day
// model.CatchUpHorizonDays before now's).
func catchUpFloor(since, now time.Time) time.Time {
	floor := layout.DayTime(layout.DayOf(now) - model.CatchUpHorizonDays).Add(-time.Nanosecond)
	if since.After(floor) {
		return since
	}
	return floor
}

// try issues e's tick at t once and reports whether it is stored (or
// cannot ever be: a command the issuer refuses is logged and dropped).
func try(ctx context.Context, e Entry, t time.Time, catchUp bool, opts Options) bool {
	done, _ := tryErr(ctx, e, t, catchUp, opts)
	return done
}

func tryErr(ctx context.Context, e Entry, t time.Time, catchUp bool, opts Options) (bool, error) {
	id := layout.TickID(e.Name, t)
	err := e.Issue(ctx, id, t)
	switch {
	case err == nil || errors.Is(err, model.ErrEnqueueFailed) || errors.Is(err, model.ErrNotAccepted):
		// Stored (a failed enqueue is retried by the issuer and the
		// reconciler).
		if catchUp {
			opts.Logger.Info().Str("periodic", e.Name).Time("tick", t).Str("command", id).Msg("cmdq periodic: caught up a tick")
		}
		if opts.Issued != nil {
			opts.Issued(e.Name, t, catchUp)
		}
		return true, nil
	case errors.Is(err, model.ErrInvalidParams), errors.Is(err, model.ErrParamsTooLarge), errors.Is(err, model.ErrInvalidType), errors.Is(err, model.ErrInvalidID):
		opts.Logger.Error().Err(err).Str("periodic", e.Name).Time("tick", t).Msg("cmdq periodic: the tick's command cannot be issued")
		return true, err
	}
	return false, err
}

// drainContext returns the context of Run's issues: ctx's values and
// deadline, canceled drain after ctx ends (at once with drain 0).
func drainContext(ctx context.Context, drain time.Duration) (context.Context, context.CancelFunc) {
	if drain <= 0 {
		return context.WithCancel(ctx)
	}
	ictx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if dl, ok := ctx.Deadline(); ok {
		var cancelDL context.CancelFunc
		ictx, cancelDL = context.WithDeadline(ictx, dl)
		c := cancel
		cancel = func() { cancelDL(); c() }
	}
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(drain, cancel)
		context.AfterFunc(ictx, func() { t.Stop() })
	})
	return ictx, func() { stop(); cancel() }
}

// issue issues e's tick at t, trying again while it fails, ctx lasts and
// e's next tick is not due (or, for a catch-up, for a minute). A try runs
// with ictx: a try in flight when ctx ends goes on (see Options.Drain).
func issue(ctx, ictx context.Context, e Entry, t time.Time, catchUp bool, opts Options) {
	until := e.Schedule.Next(t)
	if catchUp || until.IsZero() || until.Before(opts.Now()) {
		until = opts.Now().Add(time.Minute)
	}
	wait := opts.RetryBase
	for try := 1; ; try++ {
		done, err := tryErr(ictx, e, t, catchUp, opts)
		if done || ctx.Err() != nil {
			return
		}
		if !opts.Now().Add(wait).Before(until) {
			opts.Logger.Warn().Err(err).Str("periodic", e.Name).Time("tick", t).Int("tries", try).Msg("cmdq periodic: gave up a tick (another process may have issued it; the next start catches it up)")
			return
		}
		opts.Logger.Warn().Err(err).Str("periodic", e.Name).Time("tick", t).Int("try", try).Dur("retry_in", wait).Msg("cmdq periodic: issuing a tick failed; trying again")
		tm := opts.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-tm.C():
		}
		wait *= 2
	}
}
