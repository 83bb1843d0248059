package shared

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/storage"
)

// PeriodicPartition holds the periodic schedules' rows in the base
// commands table (data layout, docs/lifecycle.md "Periodic commands"): one
// row per schedule name that a process ever ran, RowKey = the name;
// properties Spec, Type, Queue, CatchUp, Since (when the schedule, with
// this spec, was first stored: no tick before it is issued), UpdatedAt and
// UpdatedBy (the last process that stored it), and Params, Params1 … (the
// command's compact JSON parameters, in chunks as a command row's, so
// that any process can trigger a tick; absent in rows stored by versions
// before them). Ticks write nothing here: a
// tick's command ID derives from the name and the tick time. A query of
// this one partition lists every schedule (GET /v1/periodic).
const PeriodicPartition = "~periodic"

// Schedule is one periodic schedule's row.
type Schedule struct {
	Name      string
	Spec      string
	Type      string
	Queue     string
	CatchUp   int
	Since     time.Time
	UpdatedAt time.Time
	UpdatedBy string
	// Params are the tick command's compact JSON parameters; nil when the
	// row holds none (stored by an older version, or too large for it).
	Params json.RawMessage
}

func decodeSchedule(e storage.Entity) Schedule {
	sc := Schedule{Name: e.RowKey, Spec: layout.StrProp(e, "Spec"), Type: layout.StrProp(e, "Type"), Queue: layout.StrProp(e, "Queue"),
		CatchUp: int(layout.IntProp(e, "CatchUp")), Since: layout.TimeProp(e, "Since"), UpdatedAt: layout.TimeProp(e, "UpdatedAt"), UpdatedBy: layout.StrProp(e, "UpdatedBy")}
	for i := 0; i < layout.MaxParamsChunks; i++ {
		v, ok := e.Properties[layout.ParamsProp(i)].(string)
		if !ok {
			break
		}
		sc.Params = append(sc.Params, v...)
	}
	return sc
}

func (sc Schedule) entity() storage.Entity {
	e := storage.Entity{PartitionKey: PeriodicPartition, RowKey: sc.Name, Properties: map[string]any{
		"Spec": sc.Spec, "Type": sc.Type, "Queue": sc.Queue, "CatchUp": int64(sc.CatchUp),
		"Since": sc.Since, "UpdatedAt": sc.UpdatedAt, "UpdatedBy": layout.Truncate(sc.UpdatedBy, layout.MaxTextUnits),
	}}
	if chunks, ok := paramsChunks(string(sc.Params)); ok && len(sc.Params) > 0 {
		for i, ch := range chunks {
			e.Properties[layout.ParamsProp(i)] = ch
		}
		if storage.EntitySize(e) > storage.MaxEntityBytes {
			for i := range chunks {
				delete(e.Properties, layout.ParamsProp(i)) // too large for the row: stored without
			}
		}
	}
	return e
}

// paramsChunks is layout.SplitParams.
func paramsChunks(s string) (chunks []string, ok bool) { return layout.SplitParams(s) }

// ReadSchedules reads every periodic schedule's row: one query of
// PeriodicPartition (one request per 1000 schedules; over several
// accounts, one per account at once, merged: see shared.go).
func (s *Partitions) ReadSchedules(ctx context.Context) ([]Schedule, error) {
	if s.reps != nil {
		out, err := s.readSchedulesShared(ctx)
		if err != nil {
			return nil, fmt.Errorf("cmdq: read the periodic schedules: %w", err)
		}
		return out, nil
	}
	var out []Schedule
	q := storage.Query{PartitionKey: PeriodicPartition, Top: 1000}
	for {
		page, err := s.commands.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("cmdq: read the periodic schedules: %w", err)
		}
		for _, e := range page.Entities {
			out = append(out, decodeSchedule(e))
		}
		if page.Continuation == "" {
			return out, nil
		}
		q.Continuation = page.Continuation
	}
}

// StoreSchedule stores schedule sc as a process that runs it sees it
// (sc.Since, UpdatedAt and UpdatedBy are set here) and returns the row as
// stored. Cost: one point read; plus one insert the first time, or one
// update when the spec, type, queue or catch-up changed (a changed spec
// starts Since anew: ticks of the old spec are not caught up), or when
// sc.Params (when not nil) differ from the row's (a row stored without
// them gets them). Nothing is written when the stored row already says
// the same. Processes racing to
// insert the same new row read the winner's. Over several accounts it
// stores the row in every account that answers, at once (those calls in
// each), and returns the row with the earliest Since.
func (s *Partitions) StoreSchedule(ctx context.Context, sc Schedule, by string) (Schedule, error) {
	reps := s.reps
	now := s.nowUTC()
	if reps == nil {
		return s.storeSchedule(ctx, s.commands, sc, by, now)
	}
	// One time for every replica: a schedule new in each gets the same
	// Since there, whichever account is read later.
	got := make([]Schedule, len(reps))
	errs := Each(reps, func(i int, tb storage.Table) (err error) {
		got[i], err = s.storeSchedule(ctx, tb, sc, by, now)
		return err
	})
	if err := FromAny(errs); err != nil {
		return Schedule{}, err
	}
	var out Schedule
	for i, g := range got {
		if errs[i] == nil && (out.Name == "" || g.Since.Before(out.Since)) {
			out = g
		}
	}
	return out, nil
}

// storeSchedule is StoreSchedule in table tb, at time now.
func (s *Partitions) storeSchedule(ctx context.Context, tb storage.Table, sc Schedule, by string, now time.Time) (Schedule, error) {
	for try := 0; ; try++ {
		e, err := tb.Get(ctx, PeriodicPartition, sc.Name)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			sc.Since, sc.UpdatedAt, sc.UpdatedBy = now, now, by
			_, err = tb.Insert(ctx, sc.entity())
			if errors.Is(err, storage.ErrExists) && try < 2 {
				continue // another process stored it first: read its row
			}
			if err != nil {
				return Schedule{}, fmt.Errorf("cmdq: store periodic schedule %s: %w", sc.Name, err)
			}
			return sc, nil
		case err != nil:
			return Schedule{}, fmt.Errorf("cmdq: read periodic schedule %s: %w", sc.Name, err)
		}
		old := decodeSchedule(e)
		if old.Spec == sc.Spec && old.Type == sc.Type && old.Queue == sc.Queue && old.CatchUp == sc.CatchUp &&
			(sc.Params == nil || bytes.Equal(old.Params, sc.Params)) {
			return old, nil
		}
		sc.Since = old.Since
		if old.Spec != sc.Spec || sc.Since.IsZero() {
			sc.Since = now
		}
		sc.UpdatedAt, sc.UpdatedBy = now, by
		_, err = tb.Update(ctx, sc.entity(), storage.Replace, e.ETag)
		if errors.Is(err, storage.ErrConflict) && try < 2 {
			continue // another process changed it meanwhile: decide again
		}
		if err != nil {
			return Schedule{}, fmt.Errorf("cmdq: store periodic schedule %s: %w", sc.Name, err)
		}
		return sc, nil
	}
}
