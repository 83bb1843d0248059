package processor

import (
	"context"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/reconcile"
)

// The reconciler (package reconcile) runs in a processor's session: its
// loop (reconcile.Loop) is made with the processor and run by Run and
// RunFor (see session); this file wires it to the processor.

// newReconciler returns the processor's reconciler loop: its Config's
// intervals and graces, faults and successes reported to the processor's
// health, and the retention sweep after a pending scan that found
// anything.
func (p *Processor) newReconciler() *reconcile.Loop {
	cfg := p.cfg
	return reconcile.NewLoop(reconcile.Config{
		Interval: cfg.ReconcileInterval, ActiveInterval: cfg.ReconcileActiveInterval, ScanInterval: cfg.ReconcileScanInterval,
		Grace: cfg.ReconcileGrace, StaleAfter: cfg.ReconcileStaleAfter,
		Logger:  cfg.Logger,
		Fault:   func(ctx context.Context, err error) { p.fault(ctx, "reconcile", "", "", err) },
		OK:      p.ok,
		Scanned: p.sweep,
	})
}

// markActive notes work (a dequeued message, a Notify) for the reconciler's
// schedule (reconcile.Loop.MarkActive).
func (p *Processor) markActive() { p.recon.MarkActive() }

// storageRecovered notes that a storage call succeeded after faults: the
// reconciler runs the marker query ReconcileGrace later, for the commands
// whose enqueue failed during the outage.
func (p *Processor) storageRecovered() {
	p.cfg.Logger.Info().Msg("cmdq processor: storage answers again")
	p.recon.Recovered()
	for _, qr := range p.queues {
		// Pollers that backed off during the outage look again at once.
		select {
		case qr.wake <- struct{}{}:
		default:
		}
	}
}

// reconcileLoop runs the reconciler during a session (d: the length of a
// RunFor run).
func (p *Processor) reconcileLoop(s *session, d time.Duration) {
	p.recon.Run(s.take, p.enq, s.timed, d)
}
