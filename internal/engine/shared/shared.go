package shared

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/storage"
)

// Shared partitions over several accounts (docs/scaling.md, "One account
// down").
//
// Besides the commands, the base commands table holds partitions the whole
// deployment shares: ControlPartition, UnqueuedPartition, DaysPartition,
// ProcessorPartition and PeriodicPartition. On one store they are plain
// partitions of the base table. On a store spread over several members
// (storage.Replicated: storage/multi over several Azure Storage accounts)
// each is kept so that any one member that answers serves it, and a lost
// member stops none of them:
//
//   - control rows: written to every member that answers; read from every
//     member that answers and merged (the row with the newest Since gives
//     the paused state, the latest CancelledAt is kept), a member that did
//     not answer counting with the rows this process last read from it (so a
//     pause this process knew of holds while its member is down); a member
//     found behind is repaired (a conditional write);
//   - markers: written to the command's member, or the next that answers;
//     read from every member by the reconciler, claimed and deleted where
//     found;
//   - day-table registrations: written to every member that answers; read
//     by the whole-table queries, which return a row kept in several
//     members once;
//   - heartbeats: written to the processor's member (by instance ID), or
//     the next that answers; read from every member that answers, the
//     newest Seen winning; deleted everywhere;
//   - periodic schedules: stored in every member that answers; read merged
//     (the newest UpdatedAt wins; Since is the earliest of the rows with
//     the winner's spec).
//
// A write or a read of a shared partition succeeds when one member
// answers and every other failed as unavailable (storage.ErrUnavailable);
// any other error fails it.
type Partitions struct {
	commands storage.Table // the base commands table
	now      func() time.Time
	reps     []storage.Table // the base table's replicas; nil: one store

	mu      sync.Mutex
	ctlSeen []map[string]QueueControl // by replica: the control rows last read from it (nil: never)
}

// New returns the shared partitions of the base commands table, on the
// clock now.
func New(commands storage.Table, now func() time.Time) *Partitions {
	reps := storage.ReplicasOf(commands)
	return &Partitions{commands: commands, now: now, reps: reps, ctlSeen: make([]map[string]QueueControl, len(reps))}
}

// Replicas returns the base commands table's replicas over several
// accounts (storage.ReplicasOf), or nil on one store.
func (s *Partitions) Replicas() []storage.Table { return s.reps }

// nowUTC is the clock as times are stored.
func (s *Partitions) nowUTC() time.Time { return layout.Millis(s.now()) }

// Each runs f on every replica at once; its errors, by replica.
func Each(reps []storage.Table, f func(i int, tb storage.Table) error) []error {
	errs := make([]error, len(reps))
	var wg sync.WaitGroup
	for i, tb := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i, tb)
		}()
	}
	wg.Wait()
	return errs
}

// FromAny is the outcome of a call made on every replica: nil when one
// answered and every other failed as unavailable; else the first other
// error, or (none answered) every unavailability.
func FromAny(errs []error) error {
	answered := 0
	var down []error
	for _, err := range errs {
		switch {
		case err == nil:
			answered++
		case errors.Is(err, storage.ErrUnavailable):
			down = append(down, err)
		default:
			return err
		}
	}
	if answered == 0 {
		return errors.Join(down...)
	}
	return nil
}

// ToOne runs f on one replica: the member of key first, then the next
// ones in turn while they fail as unavailable.
func ToOne(reps []storage.Table, start int, f func(tb storage.Table) error) error {
	var down []error
	for k := range reps {
		err := f(reps[(start+k)%len(reps)])
		if err == nil || !errors.Is(err, storage.ErrUnavailable) {
			return err
		}
		down = append(down, err)
	}
	return errors.Join(down...)
}

// queryPartition reads every row of one partition of tb (one request per
// 1000 rows).
func queryPartition(ctx context.Context, tb storage.Table, pk string) ([]storage.Entity, error) {
	var out []storage.Entity
	q := storage.Query{PartitionKey: pk, Top: 1000}
	for {
		page, err := tb.Query(ctx, q)
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

// queryReplicas reads partition pk in every replica at once: the rows by
// replica (nil for one that did not answer), and the errors by replica.
func queryReplicas(ctx context.Context, reps []storage.Table, pk string) ([][]storage.Entity, []error) {
	rows := make([][]storage.Entity, len(reps))
	errs := Each(reps, func(i int, tb storage.Table) (err error) {
		rows[i], err = queryPartition(ctx, tb, pk)
		return err
	})
	return rows, errs
}

// DeleteAll deletes row (pk, rk) in every replica (a missing row is
// no error).
func DeleteAll(ctx context.Context, reps []storage.Table, pk, rk string) error {
	return FromAny(Each(reps, func(_ int, tb storage.Table) error {
		if err := tb.Delete(ctx, pk, rk, storage.IfMatchAny); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		return nil
	}))
}

// readControlShared is ReadControl over replicas (see shared).
func (s *Partitions) readControlShared(ctx context.Context) (map[string]QueueControl, error) {
	reps := s.reps
	rows, errs := queryReplicas(ctx, reps, ControlPartition)
	if err := FromAny(errs); err != nil {
		return nil, err
	}
	fresh := make([]map[string]QueueControl, len(reps))
	for i, err := range errs {
		if err != nil {
			continue
		}
		fresh[i] = map[string]QueueControl{}
		for _, e := range rows[i] {
			c := decodeControl(e)
			fresh[i][c.Queue] = c
		}
	}
	s.mu.Lock()
	for i, f := range fresh {
		if f != nil {
			s.ctlSeen[i] = f
		}
	}
	merged := mergeControl(s.ctlSeen)
	s.mu.Unlock()
	for i, f := range fresh {
		if f == nil {
			continue
		}
		for q, m := range merged {
			if c, ok := f[q]; !ok || controlBehind(c, m) {
				repairControl(ctx, reps[i], c, ok, m)
			}
		}
	}
	return merged, nil
}

// mergeControl merges the control rows of several replicas: per queue,
// the paused state (Paused, Since, By) of the row with the newest Since
// (paused on a tie: the safe side) and the latest CancelledAt.
func mergeControl(views []map[string]QueueControl) map[string]QueueControl {
	out := map[string]QueueControl{}
	for _, v := range views {
		for q, c := range v {
			m, ok := out[q]
			if !ok {
				c.ETag = ""
				out[q] = c
				continue
			}
			if c.Since.After(m.Since) || c.Since.Equal(m.Since) && c.Paused && !m.Paused {
				m.Paused, m.Since, m.By = c.Paused, c.Since, c.By
			}
			if c.CancelledAt.After(m.CancelledAt) {
				m.CancelledAt = c.CancelledAt
			}
			out[q] = m
		}
	}
	return out
}

// controlBehind reports whether a replica's row c misses what the merged
// row m says.
func controlBehind(c, m QueueControl) bool {
	return c.Since.Before(m.Since) || c.Since.Equal(m.Since) && c.Paused != m.Paused || c.CancelledAt.Before(m.CancelledAt)
}

// repairControl writes merged row m to a replica that is behind (c, or no
// row when !exists): an insert, or an update conditional on c's ETag, so
// that a write that reached the replica meanwhile is never overwritten.
// Best effort: a replica still behind is repaired by a later read.
func repairControl(ctx context.Context, tb storage.Table, c QueueControl, exists bool, m QueueControl) {
	props := map[string]any{}
	if !m.Since.IsZero() {
		props["Paused"], props["Since"], props["By"] = m.Paused, m.Since, m.By
	}
	if !m.CancelledAt.IsZero() {
		props["CancelledAt"] = m.CancelledAt
	}
	if len(props) == 0 {
		return
	}
	e := storage.Entity{PartitionKey: ControlPartition, RowKey: m.Queue, Properties: props}
	if !exists {
		_, _ = tb.Insert(ctx, e)
		return
	}
	_, _ = tb.Update(ctx, e, storage.Merge, c.ETag)
}

// readBeatsShared is ReadBeats over replicas: a processor's newest row.
func (s *Partitions) readBeatsShared(ctx context.Context) ([]Beat, error) {
	rows, errs := queryReplicas(ctx, s.reps, ProcessorPartition)
	if err := FromAny(errs); err != nil {
		return nil, err
	}
	byID := map[string]Beat{}
	for _, rs := range rows {
		for _, e := range rs {
			b := decodeBeat(e)
			if old, ok := byID[b.ID]; !ok || b.Seen.After(old.Seen) {
				byID[b.ID] = b
			}
		}
	}
	out := make([]Beat, 0, len(byID))
	for _, b := range byID {
		out = append(out, b)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, nil
}

// deleteBeatsBeforeShared is DeleteBeatsBefore over replicas: each
// replica's rows written before cutoff (a stale copy included), in the
// replicas that answer.
func (s *Partitions) deleteBeatsBeforeShared(ctx context.Context, reps []storage.Table, rows [][]storage.Entity, errs []error, cutoffKeep func(Beat) bool) (int, error) {
	var mu sync.Mutex
	n := 0
	derrs := Each(reps, func(i int, tb storage.Table) error {
		if errs[i] != nil {
			return errs[i]
		}
		for _, e := range rows[i] {
			if cutoffKeep(decodeBeat(e)) {
				continue
			}
			if err := tb.Delete(ctx, ProcessorPartition, e.RowKey, storage.IfMatchAny); err != nil && !errors.Is(err, storage.ErrNotFound) {
				return err
			}
			mu.Lock()
			n++
			mu.Unlock()
		}
		return nil
	})
	return n, FromAny(derrs)
}

// readSchedulesShared is ReadSchedules over replicas (see shared).
func (s *Partitions) readSchedulesShared(ctx context.Context) ([]Schedule, error) {
	rows, errs := queryReplicas(ctx, s.reps, PeriodicPartition)
	if err := FromAny(errs); err != nil {
		return nil, err
	}
	var all [][]Schedule
	for _, rs := range rows {
		var v []Schedule
		for _, e := range rs {
			v = append(v, decodeSchedule(e))
		}
		all = append(all, v)
	}
	return mergeSchedules(all), nil
}

// mergeSchedules merges the schedule rows of several replicas, by name:
// the row with the newest UpdatedAt wins; its Since is the earliest of
// the rows with its spec (the first time any member stored it).
func mergeSchedules(views [][]Schedule) []Schedule {
	byName := map[string]Schedule{}
	for _, v := range views {
		for _, sc := range v {
			if old, ok := byName[sc.Name]; !ok || sc.UpdatedAt.After(old.UpdatedAt) {
				byName[sc.Name] = sc
			}
		}
	}
	for _, v := range views {
		for _, sc := range v {
			w := byName[sc.Name]
			if sc.Spec == w.Spec && !sc.Since.IsZero() && (w.Since.IsZero() || sc.Since.Before(w.Since)) {
				w.Since = sc.Since
				byName[sc.Name] = w
			}
		}
	}
	out := make([]Schedule, 0, len(byName))
	for _, sc := range byName {
		out = append(out, sc)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}
