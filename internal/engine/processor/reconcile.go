package processor

import (
	"math/rand/v2"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
)

// markActive notes work (a dequeued message, a Notify) for the reconciler's
// schedule; the first work after a marker query wakes the reconciler so
// that it waits ReconcileActiveInterval instead of ReconcileInterval.
func (p *Processor) markActive() {
	if !p.active.Load() && p.active.CompareAndSwap(false, true) {
		p.kickReconciler()
	}
}

// storageRecovered notes that a storage call succeeded after faults: the
// reconciler runs the marker query ReconcileGrace later, for the commands
// whose enqueue failed during the outage.
func (p *Processor) storageRecovered() {
	p.cfg.Logger.Info().Msg("cmdq processor: storage answers again")
	p.recoveredAt.Store(time.Now().UnixNano())
	p.kickReconciler()
	for _, qr := range p.queues {
		// Pollers that backed off during the outage look again at once.
		select {
		case qr.wake <- struct{}{}:
		default:
		}
	}
}

func (p *Processor) kickReconciler() {
	select {
	case p.reconKick <- struct{}{}:
	default:
	}
}

// reconcileLoop runs the reconciler during a session.
//
// Run: the marker query at start, then ReconcileInterval after the last
// query while idle, ReconcileActiveInterval after it while there is work, and
// ReconcileGrace (+1 s) after storage faults clear and after a query that
// left markers inside their grace; a query is the pending
// scan instead once ReconcileScanInterval has passed since the last scan (or
// since start). An idle processor so costs one query per ReconcileInterval.
//
// RunFor(d): a fleet of short runs costs what one long-lived processor does:
// the marker query runs at start with probability d/ReconcileInterval, or
// else on the run's first work with probability d/ReconcileActiveInterval;
// the pending scan runs with probability d/ReconcileScanInterval; and the
// marker query runs ReconcileGrace after storage faults clear (and after
// a query that left markers inside their grace), when that fits in the
// run.
func (p *Processor) reconcileLoop(s *session, d time.Duration) {
	cfg := p.cfg
	start := time.Now()
	lastRun, lastScan := time.Time{}, start
	// again is when the marker query runs once more because the last one
	// left markers inside their grace (zero: none left): every one of
	// them is past it by then, so a marker written during an outage that
	// this processor's recovery pass came too early for is enqueued
	// ReconcileGrace + 1 s later, not at the next interval (minutes, or
	// an hour when idle). Only a pass that found such markers costs this
	// one query more.
	var again time.Time
	pass := func(scan bool) {
		p.active.Store(false)
		lastRun = time.Now()
		if scan {
			lastScan = lastRun
		} else {
			again = time.Time{}
		}
		rep, err := p.enq.Reconcile(s.take, record.ReconcileOptions{
			MarkerGrace: cfg.ReconcileGrace, PendingGrace: cfg.ReconcileStaleAfter,
			ScanPending: scan, SkipMarkers: scan,
		})
		if err != nil {
			if s.take.Err() == nil {
				p.fault(s.take, "reconcile", "", "", err)
			}
			return
		}
		if scan && (rep.Scanned > 0 || rep.DayTables > 0) {
			// Retention (sweep.go): daily, with the pending scan, when it
			// found anything to sweep (an empty deployment pays nothing).
			p.sweep(s.take)
		}
		p.ok()
		if !scan && rep.Waiting > 0 {
			again = lastRun.Add(cfg.ReconcileGrace + time.Second)
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
		if r := p.recoveredAt.Load(); r > since.UnixNano() {
			return time.Unix(0, r).Add(cfg.ReconcileGrace + time.Second)
		}
		return time.Time{}
	}

	onWork := false
	if s.timed {
		p.active.Store(false)
		share := func(interval time.Duration) float64 { return float64(d) / float64(interval) }
		if cfg.ReconcileScanInterval != model.NoReconcile && rand.Float64() < share(cfg.ReconcileScanInterval) {
			pass(true)
		}
		u := rand.Float64()
		switch {
		case u < share(cfg.ReconcileInterval):
			pass(false)
		case u < share(cfg.ReconcileActiveInterval):
			onWork = true
		}
	} else {
		pass(false)
	}
	for {
		var due time.Time
		if s.timed {
			if onWork && p.active.Load() {
				onWork = false
				pass(false)
				continue
			}
		} else {
			interval := cfg.ReconcileInterval
			if p.active.Load() {
				interval = cfg.ReconcileActiveInterval
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
		case <-s.take.Done():
			stop()
			return
		case <-p.reconKick:
			stop()
			continue
		case <-timer:
		}
		if time.Now().Before(due) {
			continue
		}
		scan := !s.timed && cfg.ReconcileScanInterval != model.NoReconcile && time.Since(lastScan) >= cfg.ReconcileScanInterval
		pass(scan)
	}
}
