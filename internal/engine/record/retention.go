package record

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/storage"
)

// Retention (docs/lifecycle.md, "Retention"): the defaults are
// model.DefaultCompletedRetention and model.DefaultDiscardedRetention, and
// model.KeepForever keeps commands forever.
const (
	// waitSlack: a day table whose final commands all expire within this
	// time of now waits for them (a later sweep drops it) instead of moving
	// them to the base table.
	waitSlack = 2 * 24 * time.Hour
)

// RetentionPolicy is how long final commands are kept: Completed after
// completing, Discarded after being discarded or cancelled (0 = the
// default, model.KeepForever = always). Poisoned commands are kept until an operator requeues or
// discards them. Of, when set, gives a command type's own retention (its
// zero fields fall back to Completed and Discarded).
type RetentionPolicy struct {
	Completed, Discarded time.Duration
	// Of returns the retention of a command type (zero fields: the
	// policy's), and Min the shortest retention of any type (0: the
	// policy's shortest). Both may be nil.
	Of  func(cmdType string) (completed, discarded time.Duration)
	Min time.Duration
}

func (p RetentionPolicy) withDefaults() RetentionPolicy {
	if p.Completed == 0 {
		p.Completed = model.DefaultCompletedRetention
	}
	if p.Discarded == 0 {
		p.Discarded = model.DefaultDiscardedRetention
	}
	return p
}

// keep returns how long a command of type t in state st is kept after its
// last change (model.KeepForever: always; 0: st is not final).
func (p RetentionPolicy) keep(t string, st model.State) time.Duration {
	c, d := p.Completed, p.Discarded
	if p.Of != nil {
		tc, td := p.Of(t)
		if tc != 0 {
			c = tc
		}
		if td != 0 {
			d = td
		}
	}
	switch st {
	case model.StateCompleted:
		return c
	case model.StateDiscarded, model.StateCancelled:
		return d
	case model.StatePoisoned:
		return model.KeepForever
	}
	return 0
}

// shortest returns the shortest retention (the day tables' minimum age).
func (p RetentionPolicy) shortest() time.Duration {
	m := p.Completed
	if p.Discarded > 0 && (m < 0 || p.Discarded < m) {
		m = p.Discarded
	}
	if p.Min > 0 && (m < 0 || p.Min < m) {
		m = p.Min
	}
	return m
}

// horizonDays returns how many days after its day a day table is first
// considered by the sweeper: the shortest retention in whole days, at
// least the issue window (model.IssueWindowPastDays) plus a day for clock skew,
// so that no re-issue within the window can find its table gone.
func (p RetentionPolicy) horizonDays() int {
	n := model.IssueWindowPastDays + 1
	if m := p.shortest(); m > 0 {
		n = max(n, int((m+24*time.Hour-1)/(24*time.Hour)))
	} else if m < 0 {
		return -1 // everything is kept forever
	}
	return n
}

// describe says how long commands are kept, for error messages.
func (p RetentionPolicy) describe() string {
	f := func(d time.Duration) string {
		switch {
		case d < 0:
			return "forever"
		case d%(24*time.Hour) == 0:
			return fmt.Sprintf("%d days", d/(24*time.Hour))
		}
		return d.String()
	}
	return fmt.Sprintf("completed %s, discarded %s", f(p.Completed), f(p.Discarded))
}

// goneErr is the error of a read of command id (which carries a day) that
// is in no table: ErrExpired once its day is past retention, else
// ErrNotFound.
func (s *Store) goneErr(id string) error {
	day, ok := layout.IDDay(id)
	h := s.retention.horizonDays()
	if !ok || h < 0 || day+h >= layout.DayOf(s.now()) {
		return notFound(id)
	}
	return fmt.Errorf("%w: command %s (issued %s) was removed after its retention (%s) (%w; %w)",
		model.ErrExpired, id, layout.DayTime(day).Format(time.DateOnly), s.retention.describe(), model.ErrNotFound, storage.ErrNotFound)
}

// sweepable reports whether the day table of id (which carries a day) may
// be old enough for a sweeper (whatever its retention) to have moved
// commands out of it: it is past the issue window and a day of skew.
func (s *Store) sweepable(id string) bool {
	day, ok := layout.IDDay(id)
	return ok && day+model.IssueWindowPastDays+1 < layout.DayOf(s.now())
}

// SweepOptions configures Sweep.
type SweepOptions struct {
	// Now returns the current time (default: the Store's clock).
	Now func() time.Time
	// Retention overrides the Store's retention policy when set (its
	// zero fields take the defaults).
	Retention *RetentionPolicy
}

// SweepReport says what Sweep did.
type SweepReport struct {
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
// pins its table (SweepReport.Pinned). The base table is swept per
// command: one query of its command rows, and per expired command a query
// of its rows and a batch that deletes them, the command row on its ETag.
//
// Several sweepers may run at once: drops and deletes of what another
// sweeper removed first are ignored, copies are idempotent, and every
// deletion of a command row is conditional.
func (s *Store) Sweep(ctx context.Context, opts SweepOptions) (SweepReport, error) {
	rep := SweepReport{Pinned: map[string]int{}}
	now := s.now
	if opts.Now != nil {
		now = opts.Now
	}
	pol := s.retention
	if opts.Retention != nil {
		pol = opts.Retention.withDefaults()
	}
	if !s.tables.Routed() {
		return rep, nil
	}
	h := pol.horizonDays()
	var errs []error
	// Only the base table's expired commands are kept (to delete them).
	var expired []storage.Entity
	sweptAt := now()
	registered, err := eachCommandRow(ctx, s.commands, &rep, func(e storage.Entity) {
		if at, _, ok := expiry(pol, e); ok && !at.After(sweptAt) {
			expired = append(expired, storage.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey, ETag: e.ETag})
		}
	})
	if err != nil {
		return rep, fmt.Errorf("cmdq: sweep %s: %w", s.commands.Name(), err)
	}
	days, err := s.tables.List(ctx, true)
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
			if err := s.tables.Register(ctx, name); err != nil {
				errs = append(errs, err)
			}
		}
		delete(registered, name)
	}
	for name := range registered {
		s.unregister(ctx, name, &rep)
	}
	if h >= 0 {
		today := layout.DayOf(now())
		for _, name := range days {
			d, _ := s.names().ParseDayTable(name)
			if d+h >= today {
				continue
			}
			rep.Tables++
			if err := s.sweepDay(ctx, name, pol, now(), &rep); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := s.sweepBase(ctx, expired, &rep); err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

// unregister removes the registration of day table name (best effort: a
// leftover one is removed by the next sweep); over several accounts, from
// each.
func (s *Store) unregister(ctx context.Context, name string, rep *SweepReport) {
	if reps := s.Replicas(); reps != nil {
		rep.Calls += len(reps)
		_ = shared.DeleteAll(ctx, reps, layout.DaysPartition, layout.DayRowPrefix+name)
		return
	}
	rep.Calls++
	_ = s.commands.Delete(ctx, layout.DaysPartition, layout.DayRowPrefix+name, storage.IfMatchAny)
}

func (s *Store) names() layout.Names { return s.tables.names }

// eachCommandRow calls visit with every command row of tb, a page (1
// call, up to 1000 rows) at a time, and returns the day tables registered
// in it (the base table's DaysPartition). Rows are not kept: a sweep holds
// only what it acts on, whatever the size of the day.
func eachCommandRow(ctx context.Context, tb storage.Table, rep *SweepReport, visit func(storage.Entity)) (map[string]bool, error) {
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
func expiry(pol RetentionPolicy, e storage.Entity) (at time.Time, final, ok bool) {
	st := model.State(layout.StrProp(e, "Status"))
	if !st.Final() {
		return time.Time{}, false, false
	}
	keep := pol.keep(layout.StrProp(e, "Type"), st)
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

func (s *Store) sweepDay(ctx context.Context, name string, pol RetentionPolicy, now time.Time, rep *SweepReport) error {
	tb, err := s.tables.Table(ctx, name)
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
		if err := s.move(ctx, tb, e, rep); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cmdq: sweep %s: the table is kept until every command that outlives it is moved: %w", name, errors.Join(errs...))
	}
	err = s.tables.st.DeleteTable(ctx, name)
	rep.Calls++
	s.tables.Forget(name)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("cmdq: sweep: drop %s: %w", name, err)
	}
	if err == nil {
		rep.Dropped = append(rep.Dropped, name)
	}
	s.unregister(ctx, name, rep)
	return nil
}

// errMoveRaced: a command changed while it was being moved; the next sweep
// tries again.
var errMoveRaced = errors.New("the command changed while it was moved (a later sweep moves it)")

// move copies command row cmd of day table tb, with its events, to the base
// table, then deletes the original command row on its ETag (events stay
// until the table is dropped).
func (s *Store) move(ctx context.Context, tb storage.Table, cmd storage.Entity, rep *SweepReport) error {
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
		_, err := s.commands.Batch(ctx, id, ops)
		rep.Calls++
		if err != nil {
			return fmt.Errorf("move %s: copy events: %w", id, err)
		}
		events = events[n:]
	}
	row := storage.Entity{PartitionKey: id, RowKey: layout.RowCommand, Properties: maps.Clone(cur.Properties)}
	_, err = s.commands.Insert(ctx, row)
	rep.Calls++
	if errors.Is(err, storage.ErrExists) {
		// A copy is there: this write's (another sweeper's, or a move that
		// lost a race before), or a newer one written since a move.
		old, gerr := s.commands.Get(ctx, id, layout.RowCommand)
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
			_, err = s.commands.Update(ctx, row, storage.Replace, old.ETag)
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
func partitionRows(ctx context.Context, tb storage.Table, id string, rep *SweepReport) ([]storage.Entity, error) {
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
func (s *Store) sweepBase(ctx context.Context, expired []storage.Entity, rep *SweepReport) error {
	var errs []error
	for _, e := range expired {
		if err := s.deleteCommand(ctx, e, rep); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Store) deleteCommand(ctx context.Context, cmd storage.Entity, rep *SweepReport) error {
	id := cmd.PartitionKey
	rows, err := partitionRows(ctx, s.commands, id, rep)
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
	_, err = s.commands.Batch(ctx, id, ops)
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
		_, err := s.commands.Batch(ctx, id, rest[:n])
		rep.Calls++
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return fmt.Errorf("cmdq: sweep: delete the events of %s: %w", id, err)
		}
		rest = rest[n:]
	}
	return nil
}
