package retention

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/storage"
)

const (
	// waitSlack: a day table whose final commands all expire within this
	// time of now waits for them (a later sweep drops it) instead of moving
	// them to the base table.
	waitSlack = 2 * 24 * time.Hour
)

// Options configures Sweep.
type Options struct {
	// Now returns the current time (default: the Store's clock).
	Now func() time.Time
	// Retention overrides the Store's retention policy when set (its
	// zero fields take the defaults).
	Retention *record.RetentionPolicy
}

// Report says what Sweep did.
type Report struct {
	// Listed is the number of day tables that exist.
	Listed int
	// Tables is the number of day tables old enough to be looked at.
	Tables int
	// Scanned is the number of command rows read.
	Scanned int
	// Dropped lists the day tables deleted.
	Dropped []string
	// Pinned maps a day table to the number of its commands that are not
	// final (pending, running, retrying): the table is kept and looked at
	// again by the next sweep.
	Pinned map[string]int
	// Waiting lists day tables whose final commands are not all past
	// their retention yet (they expire within two days: a later sweep drops
	// the table).
	Waiting []string
	// Moved is the number of commands moved to the base table (poisoned,
	// or kept longer than their day table).
	Moved int
	// Deleted is the number of expired commands deleted from the base
	// table.
	Deleted int
	// Calls is the number of storage calls the sweep made (listing,
	// queries, moves, drops, deletes).
	Calls int
}

// Sweep removes commands past their retention (docs/lifecycle.md,
// "Retention"). For each day table at least the retention horizon old
// (the shortest retention, and never before the issue window has passed):
// one query of its command rows (1 call per 1000 commands); when every
// command is final and past its retention, the table is dropped (1 call).
// Commands that must outlive their table (poisoned ones, discarded ones
// within their retention, types kept longer) are moved to the base table
// first: their rows are copied, then the original command row is deleted
// on its ETag, so a concurrent write (a requeue) is never lost — it fails
// and finds the command in the base table. A command that is not final
// pins its table (Report.Pinned). The base table is swept per
// command: one query of its command rows, and per expired command a query
// of its rows and a batch that deletes them, the command row on its ETag.
//
// Several sweepers may run at once: drops and deletes of what another
// sweeper removed first are ignored, copies are idempotent, and every
// deletion of a command row is conditional.
func Sweep(ctx context.Context, s *record.Store, opts Options) (Report, error) {
	rep := Report{Pinned: map[string]int{}}
	now := s.Now
	if opts.Now != nil {
		now = opts.Now
	}
	pol := s.Retention()
	if opts.Retention != nil {
		pol = opts.Retention.WithDefaults()
	}
	if !s.Tables().Routed() {
		return rep, nil
	}
	h := pol.HorizonDays()
	var errs []error
	// Only the base table's expired commands are kept (to delete them).
	var expired []storage.Entity
	sweptAt := now()
	registered, err := eachCommandRow(ctx, s.CommandsTable(), &rep, func(e storage.Entity) {
		if at, _, ok := expiry(pol, e); ok && !at.After(sweptAt) {
			expired = append(expired, storage.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey, ETag: e.ETag})
		}
	})
	if err != nil {
		return rep, fmt.Errorf("cmdq: sweep %s: %w", s.CommandsTable().Name(), err)
	}
	days, err := s.Tables().List(ctx, true)
	rep.Calls++
	if err != nil {
		return rep, err
	}
	rep.Listed = len(days)
	// The registrations follow the listing: a table without one (created
	// by a process that crashed in between, or by hand) is registered, a
	// registration without a table is removed.
	for _, name := range days {
		if !registered[name] {
			rep.Calls++
			if err := s.Tables().Register(ctx, name); err != nil {
				errs = append(errs, err)
			}
		}
		delete(registered, name)
	}
	for name := range registered {
		unregister(ctx, s, name, &rep)
	}
	if h >= 0 {
		today := layout.DayOf(now())
		for _, name := range days {
			d, _ := s.Tables().Names().ParseDayTable(name)
			if d+h >= today {
				continue
			}
			rep.Tables++
			if err := sweepDay(ctx, s, name, pol, now(), &rep); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := sweepBase(ctx, s, expired, &rep); err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

// unregister removes the registration of day table name (best effort: a
// leftover one is removed by the next sweep); over several accounts, from
// each.
func unregister(ctx context.Context, s *record.Store, name string, rep *Report) {
	if reps := s.Replicas(); reps != nil {
		rep.Calls += len(reps)
		_ = shared.DeleteAll(ctx, reps, layout.DaysPartition, layout.DayRowPrefix+name)
		return
	}
	rep.Calls++
	_ = s.CommandsTable().Delete(ctx, layout.DaysPartition, layout.DayRowPrefix+name, storage.IfMatchAny)
}

// eachCommandRow calls visit with every command row of tb, a page (1
// call, up to 1000 rows) at a time, and returns the day tables registered
// in it (the base table's DaysPartition). Rows are not kept: a sweep holds
// only what it acts on, whatever the size of the day.
func eachCommandRow(ctx context.Context, tb storage.Table, rep *Report, visit func(storage.Entity)) (map[string]bool, error) {
	days := map[string]bool{}
	q := storage.Query{RowKeyPrefix: layout.RowCommand, Top: 1000}
	for {
		page, err := tb.Query(ctx, q)
		rep.Calls++
		if err != nil {
			return nil, err
		}
		for _, e := range page.Entities {
			if d := layout.DayTableOf(e); d != "" {
				days[d] = true
			}
			if e.RowKey == layout.RowCommand && e.PartitionKey != layout.UnqueuedPartition {
				rep.Scanned++
				visit(e)
			}
		}
		if page.Continuation == "" {
			return days, nil
		}
		q.Continuation = page.Continuation
	}
}

// expiry returns when command row e expires (ok false: never, or not final).
func expiry(pol record.RetentionPolicy, e storage.Entity) (at time.Time, final, ok bool) {
	st := model.State(layout.StrProp(e, "Status"))
	if !st.Final() {
		return time.Time{}, false, false
	}
	keep := pol.Keep(layout.StrProp(e, "Type"), st)
	if keep < 0 {
		return time.Time{}, true, false
	}
	return layout.TimeProp(e, "UpdatedAt").Add(keep), true, true
}

// scheduledBeyond reports whether command row e is pending with a run-at
// time more than waitSlack after now: it outlives its day table.
func scheduledBeyond(e storage.Entity, now time.Time) bool {
	run := layout.TimeProp(e, "RunAt")
	return model.State(layout.StrProp(e, "Status")) == model.StatePending && run.Sub(now) > waitSlack
}

func sweepDay(ctx context.Context, s *record.Store, name string, pol record.RetentionPolicy, now time.Time, rep *Report) error {
	tb, err := s.Tables().Table(ctx, name)
	if errors.Is(err, storage.ErrNotFound) {
		return nil // dropped by another sweeper
	}
	if err != nil {
		return fmt.Errorf("cmdq: sweep %s: %w", name, err)
	}
	// Only the commands that outlive the table are kept (to move them).
	var keep []storage.Entity
	pinned, waiting := 0, false
	_, err = eachCommandRow(ctx, tb, rep, func(e storage.Entity) {
		at, final, ok := expiry(pol, e)
		switch {
		case !final && scheduledBeyond(e, now):
			// A command scheduled further ahead than a sweep waits for:
			// moved to the base table like a poisoned one, so that its
			// day table does not wait months for it.
			keep = append(keep, e)
		case !final:
			pinned++
		case !ok || at.Sub(now) > waitSlack:
			keep = append(keep, e)
		case at.After(now):
			waiting = true
		}
	})
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cmdq: sweep %s: %w", name, err)
	}
	if pinned > 0 {
		rep.Pinned[name] = pinned
		return nil
	}
	if waiting {
		rep.Waiting = append(rep.Waiting, name)
		return nil
	}
	var errs []error
	for _, e := range keep {
		if err := move(ctx, s, tb, e, rep); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cmdq: sweep %s: the table is kept until every command that outlives it is moved: %w", name, errors.Join(errs...))
	}
	err = s.Tables().Drop(ctx, name)
	rep.Calls++
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("cmdq: sweep: drop %s: %w", name, err)
	}
	if err == nil {
		rep.Dropped = append(rep.Dropped, name)
	}
	unregister(ctx, s, name, rep)
	return nil
}

// errMoveRaced: a command changed while it was being moved; the next sweep
// tries again.
var errMoveRaced = errors.New("the command changed while it was moved (a later sweep moves it)")

// move copies command row cmd of day table tb, with its events, to the base
// table, then deletes the original command row on its ETag (events stay
// until the table is dropped).
func move(ctx context.Context, s *record.Store, tb storage.Table, cmd storage.Entity, rep *Report) error {
	id := cmd.PartitionKey
	rows, err := partitionRows(ctx, tb, id, rep)
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("move %s: %w", id, err)
	}
	var cur *storage.Entity
	var events []storage.Entity
	for i := range rows {
		if rows[i].RowKey == layout.RowCommand {
			cur = &rows[i]
		} else {
			events = append(events, rows[i])
		}
	}
	if cur == nil {
		return nil // moved by another sweeper
	}
	if cur.ETag != cmd.ETag {
		return fmt.Errorf("move %s: %w", id, errMoveRaced)
	}
	// Events are immutable once written: upserting them again is harmless.
	for len(events) > 0 {
		n := min(len(events), storage.MaxBatchOps)
		ops := make([]storage.BatchOp, n)
		for i, e := range events[:n] {
			ops[i] = storage.BatchOp{Kind: storage.OpUpsert, Mode: storage.Replace, Entity: storage.Entity{PartitionKey: id, RowKey: e.RowKey, Properties: e.Properties}}
		}
		_, err := s.CommandsTable().Batch(ctx, id, ops)
		rep.Calls++
		if err != nil {
			return fmt.Errorf("move %s: copy events: %w", id, err)
		}
		events = events[n:]
	}
	row := storage.Entity{PartitionKey: id, RowKey: layout.RowCommand, Properties: maps.Clone(cur.Properties)}
	_, err = s.CommandsTable().Insert(ctx, row)
	rep.Calls++
	if errors.Is(err, storage.ErrExists) {
		// A copy is there: this write's (another sweeper's, or a move that
		// lost a race before), or a newer one written since a move.
		old, gerr := s.CommandsTable().Get(ctx, id, layout.RowCommand)
		rep.Calls++
		if gerr != nil {
			return fmt.Errorf("move %s: %w", id, gerr)
		}
		switch {
		case layout.StrProp(old, "WriteID") == layout.StrProp(*cur, "WriteID"):
			err = nil // the same version: copied already
		case layout.IntProp(old, "EventSeq") > layout.IntProp(*cur, "EventSeq"):
			return nil // moved and written since: the original is gone
		default:
			_, err = s.CommandsTable().Update(ctx, row, storage.Replace, old.ETag)
			rep.Calls++
		}
	}
	if err != nil {
		return fmt.Errorf("move %s: copy the command row: %w", id, err)
	}
	err = tb.Delete(ctx, id, layout.RowCommand, cur.ETag)
	rep.Calls++
	switch {
	case err == nil:
		rep.Moved++
	case errors.Is(err, storage.ErrNotFound):
		// Another sweeper moved it.
	case errors.Is(err, storage.ErrConflict):
		// Written since the copy: the day table's row is the command
		// (reads look there first); the copy is replaced next time.
		return fmt.Errorf("move %s: %w", id, errMoveRaced)
	default:
		return fmt.Errorf("move %s: delete the original: %w", id, err)
	}
	return nil
}

// partitionRows reads every row of one command (1 call per 1000).
func partitionRows(ctx context.Context, tb storage.Table, id string, rep *Report) ([]storage.Entity, error) {
	var out []storage.Entity
	q := storage.Query{PartitionKey: id, Top: 1000}
	for {
		page, err := tb.Query(ctx, q)
		rep.Calls++
		if err != nil {
			return nil, err
		}
		out = append(out, page.Entities...)
		if page.Continuation == "" {
			return out, nil
		}
		q.Continuation = page.Continuation
	}
}

// sweepBase deletes the expired commands of the base table: per command a
// query of its rows and a batch deleting them (the command row on its
// ETag, so a command written since stays).
func sweepBase(ctx context.Context, s *record.Store, expired []storage.Entity, rep *Report) error {
	var errs []error
	for _, e := range expired {
		if err := deleteCommand(ctx, s, e, rep); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func deleteCommand(ctx context.Context, s *record.Store, cmd storage.Entity, rep *Report) error {
	id := cmd.PartitionKey
	rows, err := partitionRows(ctx, s.CommandsTable(), id, rep)
	if err != nil {
		return fmt.Errorf("cmdq: sweep: read %s: %w", id, err)
	}
	ops := []storage.BatchOp{{Kind: storage.OpDelete, Entity: storage.Entity{PartitionKey: id, RowKey: layout.RowCommand}, IfMatch: cmd.ETag}}
	var rest []storage.BatchOp
	for _, e := range rows {
		if !strings.HasPrefix(e.RowKey, layout.EventRowPrefix) {
			continue
		}
		op := storage.BatchOp{Kind: storage.OpDelete, Entity: storage.Entity{PartitionKey: id, RowKey: e.RowKey}, IfMatch: storage.IfMatchAny}
		if len(ops) < storage.MaxBatchOps {
			ops = append(ops, op)
		} else {
			rest = append(rest, op)
		}
	}
	_, err = s.CommandsTable().Batch(ctx, id, ops)
	rep.Calls++
	if err != nil {
		if errors.Is(err, storage.ErrConflict) || errors.Is(err, storage.ErrNotFound) {
			return nil // written since, or deleted by another sweeper
		}
		return fmt.Errorf("cmdq: sweep: delete %s: %w", id, err)
	}
	rep.Deleted++
	for len(rest) > 0 {
		n := min(len(rest), storage.MaxBatchOps)
		_, err := s.CommandsTable().Batch(ctx, id, rest[:n])
		rep.Calls++
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return fmt.Errorf("cmdq: sweep: delete the events of %s: %w", id, err)
		}
		rest = rest[n:]
	}
	return nil
}
