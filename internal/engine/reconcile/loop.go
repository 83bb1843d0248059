package reconcile

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// Config configures a Loop: a processor's reconciler settings (its
// Config's Reconcile… fields) and what the loop reports to.
type Config struct {
	// Interval is the time between marker queries while idle, and
	// ActiveInterval while there is work (MarkActive).
	Interval, ActiveInterval time.Duration
	// ScanInterval is the time between pending scans (model.NoReconcile:
	// none).
	ScanInterval time.Duration
	// Grace is Options.MarkerGrace; StaleAfter is Options.PendingGrace.
	Grace, StaleAfter time.Duration
	// Logger receives the passes that enqueued or found markers (info).
	Logger zerolog.Logger
	// Fault is called with a pass's error (not when the loop's context
	// ended); OK after a pass that succeeded.
	Fault func(ctx context.Context, err error)
	OK    func()
	// Scanned is called after a pending scan that found commands or day
	// tables, before OK (the processor's retention sweep: daily, with the
	// scan, and never in an empty deployment).
	Scanned func(ctx context.Context)
}

// Loop is the reconciler's schedule in a processor: when Pass runs, and
// whether as the marker query or the pending scan. Its methods may be
// called from any goroutine; Run from one at a time.
type Loop struct {
	cfg         Config
	active      atomic.Bool   // work since the last marker query
	recoveredAt atomic.Int64  // UnixNano of the last fault → success transition
	kick        chan struct{} // wakes the loop to recompute its schedule
}

// NewLoop returns the reconciler's loop with cfg.
func NewLoop(cfg Config) *Loop {
	return &Loop{cfg: cfg, kick: make(chan struct{}, 1)}
}

// MarkActive notes work (a dequeued message, a Notify) for the schedule;
// the first work after a marker query wakes the loop so that it waits
// ActiveInterval instead of Interval.
func (l *Loop) MarkActive() {
	if !l.active.Load() && l.active.CompareAndSwap(false, true) {
		l.wake()
	}
}

// Recovered notes that a storage call succeeded after faults: the loop
// runs the marker query Grace later, for the commands whose enqueue failed
// during the outage.
func (l *Loop) Recovered() {
	l.recoveredAt.Store(time.Now().UnixNano())
	l.wake()
}

func (l *Loop) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Run runs the reconciler (Pass, through enq) until ctx ends: timed for a
// run of length d (RunFor), else for a run that lasts.
//
// Run: the marker query at start, then Interval after the last query
// while idle, ActiveInterval after it while there is work, and Grace
// (+1 s) after storage faults clear and after a query that left markers
// inside their grace; a query is the pending scan instead once
// ScanInterval has passed since the last scan (or since start). An idle
// processor so costs one query per Interval.
//
// RunFor(d): a fleet of short runs costs what one long-lived processor
// does: the marker query runs at start with probability d/Interval, or
// else on the run's first work with probability d/ActiveInterval; the
// pending scan runs with probability d/ScanInterval; and the marker query
// runs Grace after storage faults clear (and after a query that left
// markers inside their grace), when that fits in the run.
func (l *Loop) Run(ctx context.Context, enq *enqueue.Enqueuer, timed bool, d time.Duration) {
	cfg := l.cfg
	start := time.Now()
	lastRun, lastScan := time.Time{}, start
	// again is when the marker query runs once more because the last one
	// left markers inside their grace (zero: none left): every one of
	// them is past it by then, so a marker written during an outage that
	// this processor's recovery pass came too early for is enqueued
	// Grace + 1 s later, not at the next interval (minutes, or an hour
	// when idle). Only a pass that found such markers costs this one
	// query more.
	var again time.Time
	pass := func(scan bool) {
		l.active.Store(false)
		lastRun = time.Now()
		if scan {
			lastScan = lastRun
		} else {
			again = time.Time{}
		}
		rep, err := Pass(ctx, enq, Options{
			MarkerGrace: cfg.Grace, PendingGrace: cfg.StaleAfter,
			ScanPending: scan, SkipMarkers: scan,
		})
		if err != nil {
			if ctx.Err() == nil {
				cfg.Fault(ctx, err)
			}
			return
		}
		if scan && (rep.Scanned > 0 || rep.DayTables > 0) {
			// Retention: daily, with the pending scan, when it found
			// anything to sweep (an empty deployment pays nothing).
			cfg.Scanned(ctx)
		}
		cfg.OK()
		if !scan && rep.Waiting > 0 {
			again = lastRun.Add(cfg.Grace + time.Second)
		}
		if rep.Enqueued > 0 || rep.Markers > 0 {
			cfg.Logger.Info().Int("markers", rep.Markers).Int("enqueued", rep.Enqueued).Int("waiting", rep.Waiting).Int("scanned", rep.Scanned).Msg("cmdq processor: reconciled")
		}
	}
	// afterRecovery is when the query is due because storage came back
	// (zero if it has not failed since the last query or the start).
	afterRecovery := func() time.Time {
		since := start
		if lastRun.After(since) {
			since = lastRun
		}
		if r := l.recoveredAt.Load(); r > since.UnixNano() {
			return time.Unix(0, r).Add(cfg.Grace + time.Second)
		}
		return time.Time{}
	}

	onWork := false
	if timed {
		l.active.Store(false)
		share := func(interval time.Duration) float64 { return float64(d) / float64(interval) }
		if cfg.ScanInterval != model.NoReconcile && rand.Float64() < share(cfg.ScanInterval) {
			pass(true)
		}
		u := rand.Float64()
		switch {
		case u < share(cfg.Interval):
			pass(false)
		case u < share(cfg.ActiveInterval):
			onWork = true
		}
	} else {
		pass(false)
	}
	for {
		var due time.Time
		if timed {
			if onWork && l.active.Load() {
				onWork = false
				pass(false)
				continue
			}
		} else {
			interval := cfg.Interval
			if l.active.Load() {
				interval = cfg.ActiveInterval
			}
			due = lastRun.Add(interval)
		}
		if r := afterRecovery(); !r.IsZero() && (due.IsZero() || r.Before(due)) {
			due = r
		}
		if !again.IsZero() && (due.IsZero() || again.Before(due)) {
			due = again
		}
		var timer <-chan time.Time
		var t *time.Timer
		if !due.IsZero() {
			t = time.NewTimer(time.Until(due))
			timer = t.C
		}
		stop := func() {
			if t != nil {
				t.Stop()
			}
		}
		select {
		case <-ctx.Done():
			stop()
			return
		case <-l.kick:
			stop()
			continue
		case <-timer:
		}
		if time.Now().Before(due) {
			continue
		}
		scan := !timed && cfg.ScanInterval != model.NoReconcile && time.Since(lastScan) >= cfg.ScanInterval
		pass(scan)
	}
}
