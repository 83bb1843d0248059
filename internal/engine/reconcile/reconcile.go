package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/storage"
)

// markerClaimedAt is the marker property a reconciler sets to claim it.
const markerClaimedAt = "ClaimedAt"

// By is the By recorded on the requeued events of the reconciler's
// recovery enqueues (markers and the pending scan).
const By = "reconciler"

// Options configures Pass. The graces have no defaults here:
// the processor passes its Config's (model.DefaultReconcileGrace and
// DefaultReconcileStaleAfter); zero or negative means none.
type Options struct {
	// MarkerGrace: re-enqueue a command with an unqueued marker once it has
	// not been updated for this long.
	MarkerGrace time.Duration
	// PendingGrace: the pending scan re-enqueues commands still pending and
	// not updated for this long.
	PendingGrace time.Duration
	// ScanPending enables the pending scan, the fallback for a process that
	// crashed between storing a command and enqueueing it: a whole-table
	// query of the commands table for the "a:cmd" rows, filtered in
	// memory (one request per 1000 rows returned; on Azure the service reads
	// every row of the table). Default false; the processor makes one run
	// per processor.Config.ReconcileScanInterval (default 24 h) a scan.
	ScanPending bool
	// SkipMarkers skips the marker query (use with ScanPending: the scan
	// finds marked commands too once they are PendingGrace old, so a pass
	// that scans need not also pay for the marker query). Default false.
	SkipMarkers bool
	// Now returns the current time (default: the clock of the
	// Enqueuer's record store, record.Options.Now).
	Now func() time.Time
}

// Report says what Pass did.
type Report struct {
	// Markers is the number of unqueued markers found.
	Markers int
	// Enqueued is the number of messages enqueued (markers and scan).
	Enqueued int
	// Cleared is the number of markers removed without enqueueing (the
	// command is no longer pending, or does not exist).
	Cleared int
	// Waiting is the number of markers left for a later run (inside the grace).
	Waiting int
	// Scanned is the number of projections the pending scan looked at.
	Scanned int
	// DayTables is the number of day tables registered in the base table
	// that the pending scan read.
	DayTables int
	// Unavailable is the number of accounts whose markers could not be
	// read (over several accounts: one was down); their markers wait for
	// a later pass.
	Unavailable int
}

// Pass enqueues commands that were stored but never enqueued: those with
// a marker in partition "~unqueued" (cost: 1 query when there is none, 1
// per account over several accounts, where an account that is down is
// skipped and counted in Report.Unavailable; per
// marker 1 point read + 1 claim (a conditional update) + 1 batch with a
// requeued event + 1 enqueue + 1 delete; a marker of a command that is no
// longer pending costs 1 point read + 1 delete) and, with ScanPending,
// those still pending after PendingGrace (per command found: 1 point read +
// 1 batch with a requeued event + 1 enqueue). Each is a recovery: its
// message is delayed by record.Store.RecoveryDelay (at least the type's lease)
// and its command is claimed by its
// first delivery, so a message that existed after all does not run the
// handler a second time (docs/lifecycle.md, "Duplicate messages").
// Several processors may reconcile at once: a marker is claimed by a conditional update (its ETag), a pending command
// by the conditional requeued batch, so only one of them enqueues. A marker
// is removed only once its message is on the queue: a failed enqueue is
// retried by a later pass once the claim is MarkerGrace old.
func Pass(ctx context.Context, e *enqueue.Enqueuer, opts Options) (Report, error) {
	var rep Report
	now := opts.Now
	if now == nil {
		now = e.Store().Now
	}
	markerGrace, pendingGrace := max(opts.MarkerGrace, 0), max(opts.PendingGrace, 0)
	s := e.Store()
	tbl := s.CommandsTable()
	enqueued := func() { rep.Enqueued++ }

	var errs []error
	seen := map[string]bool{}
	// handle handles one page of markers read from table mt.
	handle := func(mt storage.Table, page storage.Page) {
		for _, m := range page.Entities {
			rep.Markers++
			id := m.RowKey
			seen[id] = true
			if claimed, _ := m.Properties[markerClaimedAt].(time.Time); !claimed.IsZero() && now().Sub(claimed) < markerGrace {
				// Another reconciler is enqueueing it (or died doing so:
				// the claim lapses after the grace).
				rep.Waiting++
				continue
			}
			rec, err := s.Load(ctx, id)
			if err != nil && !errors.Is(err, model.ErrNotFound) {
				errs = append(errs, err)
				continue
			}
			pending := err == nil && rec.Status.State == model.StatePending
			if pending && now().Sub(rec.UpdatedAt) < markerGrace {
				rep.Waiting++
				continue
			}
			if !pending {
				if err := mt.Delete(ctx, layout.UnqueuedPartition, id, m.ETag); err == nil {
					rep.Cleared++
				} else if !errors.Is(err, storage.ErrConflict) && !errors.Is(err, storage.ErrNotFound) {
					errs = append(errs, fmt.Errorf("cmdq: reconcile: delete marker %s: %w", id, err))
				}
				continue
			}
			// Claim the marker (a conditional update): only the reconciler
			// whose claim lands enqueues. The marker stays until the
			// message is on the queue, so a failed enqueue is retried by a
			// later pass once the claim lapses.
			claim := storage.Entity{PartitionKey: layout.UnqueuedPartition, RowKey: id, Properties: map[string]any{markerClaimedAt: now().UTC()}}
			etag, err := mt.Update(ctx, claim, storage.Merge, m.ETag)
			if err != nil {
				if !errors.Is(err, storage.ErrConflict) && !errors.Is(err, storage.ErrNotFound) {
					errs = append(errs, fmt.Errorf("cmdq: reconcile: claim marker %s: %w", id, err))
				}
				continue
			}
			// A recovery: the command's first enqueue may have landed
			// after all (its answer lost), so it may have a message.
			_, ok, err := e.Recover(ctx, rec, By, "enqueue failed at issue (unqueued marker): re-enqueued by the reconciler", false)
			if err != nil {
				errs = append(errs, fmt.Errorf("cmdq: reconcile: enqueue %s (its marker stays for a later pass): %w", id, err))
				continue
			}
			if ok {
				enqueued()
			}
			if err := mt.Delete(ctx, layout.UnqueuedPartition, id, etag); err != nil && !errors.Is(err, storage.ErrConflict) && !errors.Is(err, storage.ErrNotFound) {
				errs = append(errs, fmt.Errorf("cmdq: reconcile: delete marker %s after enqueueing: %w", id, err))
			}
		}
	}
	// markers handles the markers of table mt: the base table, or over
	// several accounts each account's (package shared), where a marker is
	// claimed and deleted where it was found.
	markers := func(mt storage.Table) error {
		q := storage.Query{PartitionKey: layout.UnqueuedPartition, Top: 1000}
		for {
			page, err := mt.Query(ctx, q)
			if err != nil {
				return err
			}
			handle(mt, page)
			if page.Continuation == "" {
				return nil
			}
			q.Continuation = page.Continuation
		}
	}
	if !opts.SkipMarkers {
		if reps := s.Replicas(); reps != nil {
			// One account at a time: the markers' loads and enqueues go
			// to their commands' accounts anyway.
			merrs := make([]error, len(reps))
			for i, mt := range reps {
				merrs[i] = markers(mt)
				if errors.Is(merrs[i], storage.ErrUnavailable) {
					rep.Unavailable++
				}
			}
			if err := shared.FromAny(merrs); err != nil {
				return rep, fmt.Errorf("cmdq: reconcile: list unqueued markers: %w", err)
			}
		} else if err := markers(tbl); err != nil {
			return rep, fmt.Errorf("cmdq: reconcile: list unqueued markers: %w", err)
		}
	}

	var days []string // day tables registered in the base table
	scan := func(tbl storage.Table) {
		q := storage.Query{RowKeyPrefix: layout.RowCommand, Top: 1000}
		for {
			page, err := tbl.Query(ctx, q)
			if errors.Is(err, storage.ErrNotFound) && tbl != s.CommandsTable() {
				break // a day table dropped meanwhile
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("cmdq: reconcile: scan pending commands: %w", err))
				break
			}
			for _, row := range page.Entities {
				if d := layout.DayTableOf(row); d != "" {
					days = append(days, d)
				}
				if row.RowKey != layout.RowCommand {
					continue
				}
				rep.Scanned++
				st, _ := row.Properties["Status"].(string)
				upd, _ := row.Properties["UpdatedAt"].(time.Time)
				if run, _ := row.Properties["RunAt"].(time.Time); run.After(upd) {
					// A scheduled command waits for its time, not for a
					// processor: it is stale only a grace after it.
					upd = run
				}
				if model.State(st) != model.StatePending || now().Sub(upd) < pendingGrace || seen[row.PartitionKey] {
					continue
				}
				rec, err := s.Load(ctx, row.PartitionKey)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if rec.Status.State != model.StatePending || now().Sub(rec.Status.RunAt) < pendingGrace {
					continue
				}
				// The conditional requeued batch claims the command (and moves
				// UpdatedAt, so the next scan waits another grace period); a
				// failed enqueue marks it.
				requeued, ok, err := e.Recover(ctx, rec, By, "still pending after "+pendingGrace.String()+": re-enqueued by the reconciler", false)
				switch {
				case err != nil && requeued:
					// Requeued, not enqueued: mark it for the marker query.
					if merr := s.MarkUnqueued(ctx, rec.ID, rec.Queue); merr != nil {
						err = errors.Join(err, merr)
					}
					errs = append(errs, fmt.Errorf("cmdq: reconcile: enqueue %s: %w", rec.ID, err))
				case err != nil:
					errs = append(errs, err)
				case ok:
					enqueued()
				}
			}
			if page.Continuation == "" {
				break
			}
			q.Continuation = page.Continuation
		}
	}
	if opts.ScanPending {
		// The base table, then the day tables registered in it: the scan
		// is bounded by the retained window, not by all history.
		scan(tbl)
		rep.DayTables = len(days)
		for _, d := range days {
			if dt := openDay(ctx, s, d, &errs); dt != nil {
				scan(dt)
			}
		}
	}
	return rep, errors.Join(errs...)
}

// openDay opens day table name for the pending scan (nil when it does not
// exist).
func openDay(ctx context.Context, s *record.Store, name string, errs *[]error) storage.Table {
	if _, ok := s.Tables().Names().ParseDayTable(name); !ok {
		return nil
	}
	tb, err := s.Tables().Table(ctx, name)
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		*errs = append(*errs, fmt.Errorf("cmdq: reconcile: open %s: %w", name, err))
		return nil
	}
	return tb
}
