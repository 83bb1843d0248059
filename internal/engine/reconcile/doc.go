// Package reconcile owns the reconciler: the recovery of commands that
// were stored but whose message never reached their queue. Pass is one
// run (the unqueued markers, or the pending scan of the commands tables);
// Loop is its schedule in a processor (when a pass runs, and which kind),
// which the processor makes and runs with its settings and its health
// reporting.
//
// It enqueues nothing itself: every message goes through the one enqueue
// path (enqueue.Enqueuer.Recover). It does not remove old commands
// (package retention), though a processor sweeps after a pending scan.
// See docs/lifecycle.md, "The reconciler".
package reconcile
