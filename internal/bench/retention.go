package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/retention"
)

// RetentionAhead is how far ahead of the real clock the retention phase
// sets the sweep's clock: the completed retention (7 days), the issue
// window (model.IssueWindowPastDays, 2 days) and a day of clock skew —
// 10 days, when every command of the run is past its retention and its day
// table may go.
const RetentionAhead = model.DefaultCompletedRetention + (model.IssueWindowPastDays+1)*24*time.Hour

// RetentionResult is what removing the run's commands after their
// retention costs (docs/lifecycle.md, "Retention"): the retention sweep
// (retention.Sweep, as the processor runs it) on the bench's own tables,
// its clock set RetentionAhead ahead, every storage call counted.
type RetentionResult struct {
	// Commands is the number of command rows the sweep read: the
	// burn-down's N and its warm-up command, and the latency phase's.
	Commands int `json:"commands"`
	// ClockAheadH is how far ahead the sweep's clock was set, hours (240).
	ClockAheadH float64 `json:"clock_ahead_h"`
	// DayTables is the number of day tables of the bench's prefix before
	// the sweep (1; 2 when the run crossed midnight UTC).
	DayTables int `json:"day_tables"`
	// Dropped is the number of day tables the sweep reports dropped.
	Dropped int `json:"dropped"`
	// DayTableGone reports that the store lists none of those day tables
	// after the sweep (Store.Tables).
	DayTableGone bool `json:"day_table_gone"`
	// SweepCalls is the sweep's own count of its calls
	// (retention.Report.Calls); Calls.Total equals it when the bench
	// counted every call.
	SweepCalls int `json:"sweep_calls"`
	// Calls is every storage call of the sweep, by kind (not per command).
	Calls Calls `json:"calls"`
	// CallsPerCommand is Calls / Commands: retention's amortised cost per
	// command (issue 10's target: at most 0.05).
	CallsPerCommand Calls `json:"calls_per_command"`
}

// retention runs the retention sweep once, as it would run once the
// retention of every command of the run has passed, on the bench's prefix
// (every processor of the run stopped, so every call counted is the
// sweep's). It runs after the idle phase, whose pending scan on the loaded
// tables needs them.
func (e *env) retention(ctx context.Context) (*RetentionResult, error) {
	names := layout.Names{Prefix: e.cfg.Prefix}
	dayTables := func() ([]string, error) {
		// The driver's listing, uncounted: the check is not the sweep's.
		all, err := e.st.Tables(ctx, names.CommandsTable())
		if err != nil {
			return nil, fmt.Errorf("bench: retention: list tables: %w", err)
		}
		var days []string
		for _, n := range all {
			if _, ok := names.ParseDayTable(n); ok {
				days = append(days, n)
			}
		}
		return days, nil
	}
	before, err := dayTables()
	if err != nil {
		return nil, err
	}
	rec, err := record.Open(ctx, e.counted, names, record.Options{})
	if err != nil {
		return nil, fmt.Errorf("bench: retention: %w", err)
	}
	later := time.Now().Add(RetentionAhead)
	e.logf("retention: sweep of %d day table(s) with the clock %s ahead", len(before), RetentionAhead)
	c0 := e.counter.Snapshot()
	rep, err := retention.Sweep(ctx, rec, retention.Options{Now: func() time.Time { return later }})
	d := diff(c0, e.counter.Snapshot())
	if err != nil {
		return nil, fmt.Errorf("bench: retention sweep: %w", err)
	}
	after, err := dayTables()
	if err != nil {
		return nil, err
	}
	res := &RetentionResult{
		Commands: rep.Scanned, ClockAheadH: RetentionAhead.Hours(), DayTables: len(before), Dropped: len(rep.Dropped),
		DayTableGone: len(before) > 0 && len(after) == 0, SweepCalls: rep.Calls, Calls: callsPer(d, 1),
	}
	if rep.Scanned > 0 {
		res.CallsPerCommand = callsPer(d, float64(rep.Scanned))
	}
	return res, nil
}
