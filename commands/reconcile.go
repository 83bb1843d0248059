package commands

import (
	"context"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// Reconciler defaults.
const (
	// DefaultMarkerGrace: a marked command is re-enqueued once it is this old.
	DefaultMarkerGrace = 30 * time.Second
	// DefaultPendingGrace: the pending scan re-enqueues pending commands not
	// updated for this long.
	DefaultPendingGrace = 15 * time.Minute
)

// ReconcileOptions configures Reconcile.
type ReconcileOptions struct {
	// Prefix starts every storage name (default "cmdq").
	Prefix string
	// MarkerGrace: re-enqueue a command with an unqueued marker once its
	// CreatedAt is at least this old (default 30 s; negative = 0).
	MarkerGrace time.Duration
	// PendingGrace: the pending scan re-enqueues commands still pending and
	// not updated for this long (default 15 min).
	PendingGrace time.Duration
	// ScanPending enables the pending scan: a filtered whole-table query of
	// the commands table (one request per 1000 commands). Default false;
	// the processor enables it on its reconcile interval.
	ScanPending bool
	// Notify, if set, is called with the logical queue after each re-enqueue.
	Notify func(queue string)
	// Now returns the current time (default time.Now).
	Now func() time.Time
}

// ReconcileReport says what Reconcile did.
type ReconcileReport struct {
	// Markers is the number of unqueued markers found.
	Markers int
	// Enqueued is the number of messages enqueued (markers and scan).
	Enqueued int
	// Scanned is the number of projections the pending scan looked at.
	Scanned int
	// Waiting is the number of markers left for a later run (inside the grace).
	Waiting int
}

// Reconcile enqueues commands that were stored but never enqueued: those with
// a marker in partition "~unqueued" (cost: 1 query when there is none) and,
// with ScanPending, those still pending after PendingGrace. Duplicates are
// harmless: the processor deletes a message whose command is already final.
func Reconcile(ctx context.Context, st storage.Store, opts ReconcileOptions) (ReconcileReport, error) {
	panic("TODO")
}
