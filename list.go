package cmdq

import (
	"context"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// DefaultCommandLimit is the page size of a command listing when
// CommandQuery.Limit is 0 (100).
const DefaultCommandLimit = model.DefaultCommandLimit

// MaxCommandLimit is the largest CommandQuery.Limit (1000).
const MaxCommandLimit = model.MaxCommandLimit

// CommandQuery selects commands for a listing (Client.ListCommands).
// A listing reads the whole commands table (one request per 1000 rows): it
// is for tests, tools, the operator page and small stores, not for a hot
// path.
type CommandQuery struct {
	// Type, when set, keeps only commands of this type.
	Type string
	// State, when set, keeps only commands in this state.
	State State
	// Limit is the most commands in one page (0 = DefaultCommandLimit, at
	// most MaxCommandLimit).
	Limit int
	// Continuation resumes from a previous page's token (opaque; a token of
	// one order is not valid for the other).
	Continuation string
	// Since, when set, keeps only commands whose last change (UpdatedAt)
	// is at or after it.
	Since time.Time
	// Newest lists by last change, newest first (then by ID), instead of
	// by ID. The whole selection is read and sorted for every page, and the
	// continuation is an offset into it: commands that change between two
	// pages move.
	Newest bool
	// Summary fills CommandPage.Summary: the selection counted per state
	// (whatever State says) and the outcomes per minute, read from the
	// commands' events. The listing then reads every row of the table,
	// events included (one request per 1000 rows).
	Summary bool
	// ScanLimit, when above 0, stops reading after about this many table
	// rows; the page then holds what was found in them and
	// Summary.Partial (when asked for) says so. Default 0: no limit.
	ScanLimit int
	// TypePrefix, when set, keeps only commands whose type starts with it,
	// compared case-insensitively ("Demo." matches demo.sleep).
	TypePrefix string
	// CorrelationID, when set, keeps only commands with exactly this
	// correlation ID.
	CorrelationID string
	// IDPrefix, when set, keeps only commands whose ID starts with it,
	// compared case-insensitively (a few hex digits of an ID seen in a
	// log).
	IDPrefix string
	// IssuedSince, when set, keeps only commands issued at or after it,
	// and the listing reads only the day tables of those days (and the
	// base table): with retention's day tables (docs/lifecycle.md,
	// "Retention"), a listing of recent commands reads the recent tables
	// only.
	IssuedSince time.Time
	// IssuedBefore, when set, keeps only commands issued before it.
	IssuedBefore time.Time
	// Queue, when set, keeps only commands of this logical queue (the
	// queue their type is registered on, "commands" by default).
	Queue string
	// Interval is the width of the summary's intervals (Summary.Minutes):
	// 0 = one minute; at least one minute, a whole number of minutes.
	Interval time.Duration
	// ParamsPreview, when above 0, fills CommandPage.Params with the
	// start of each listed command's compact JSON parameters, at most
	// this many bytes (at most MaxParamsPreview).
	ParamsPreview int
}

// MaxParamsPreview is the largest CommandQuery.ParamsPreview (4096
// bytes).
const MaxParamsPreview = model.MaxParamsPreview

// CommandPage is one page of a command listing, in command ID order (or
// newest first, with CommandQuery.Newest).
type CommandPage struct {
	// Commands are the page's commands (empty, not nil, when none).
	Commands []Status `json:"commands"`
	// Continuation is "" on the last page.
	Continuation string `json:"continuation,omitempty"`
	// Summary is the selection's summary, when CommandQuery.Summary asked
	// for it.
	Summary *ListSummary `json:"summary,omitempty"`
	// Params maps each listed command's ID to the start of its compact
	// JSON parameters (cut with "…"), when CommandQuery.ParamsPreview
	// asked for it.
	Params map[string]string `json:"params,omitempty"`
	// Started maps each listed running command's ID to when its current
	// attempt started (its last started event), when the listing read the
	// events (CommandQuery.Summary).
	Started map[string]time.Time `json:"started,omitempty"`
}

// ListSummary summarises the commands a CommandQuery selects (all its
// filters but State).
type ListSummary struct {
	// Counts are how many of them are in each state now.
	Counts map[State]int `json:"counts"`
	// Intervals are the outcomes recorded in each interval
	// (CommandQuery.Interval, a minute by default) from Since (truncated
	// to the interval; the last hour when Since is zero) to now, oldest
	// first: completed, failed (attempts that failed, retried or not) and
	// poisoned events of the selected commands, and the latency of their
	// first attempts started in the interval.
	Intervals []IntervalCounts `json:"minutes"`
	// IntervalMS is the width of each of Intervals, in milliseconds.
	IntervalMS int64 `json:"intervalMs"`
	// Latency is the latency from issue to start of every first attempt
	// started in the range.
	Latency Latency `json:"latency"`
	// ByType and ByQueue are the same outcomes (and latencies) over the
	// whole range, per command type and per logical queue, most events
	// first.
	ByType  []GroupCounts `json:"byType"`
	ByQueue []GroupCounts `json:"byQueue"`
	// Rows is how many table rows were read.
	Rows int `json:"rows"`
	// Partial says the read stopped at CommandQuery.ScanLimit: the counts
	// and the commands are of the rows read only.
	Partial bool `json:"partial,omitempty"`
}

// IntervalCounts are the outcomes of one interval of a summary (a minute
// by default).
type IntervalCounts struct {
	// Start is the interval's start (UTC).
	Start time.Time `json:"start"`
	// Completed, Failed and Poisoned count the completed, failed and
	// poisoned events of that interval.
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Poisoned  int `json:"poisoned"`
	Latency
}

// Latency is the time from issue (or requeue) to the start of the first
// attempt, of the first attempts started in an interval or a group.
type Latency struct {
	// Started counts those first attempts (the latency's samples).
	Started int `json:"started"`
	// LatencyP50 and LatencyP95 are the median and 95th percentile of
	// their latency (0 without samples).
	LatencyP50 time.Duration `json:"latencyP50Ns,omitempty"`
	LatencyP95 time.Duration `json:"latencyP95Ns,omitempty"`
}

// GroupCounts are the outcomes of one command type or queue over a
// summary's range.
type GroupCounts struct {
	// Name is the type or queue.
	Name string `json:"name"`
	// Commands counts the selected commands of the group (any state).
	Commands  int `json:"commands"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Poisoned  int `json:"poisoned"`
	Latency
}

// ListCommands lists commands in ID order (or newest first: q.Newest),
// filtered by type, state and last change (q.Since), a page at a time,
// with a summary when q.Summary asks (counts per state, outcomes per
// minute). It reads the whole commands table (one request per 1000 rows;
// with a summary every row, events included; q.ScanLimit bounds it): for
// tests, tools, the operator page and small stores, not for a hot path.
// Nothing it does adds a call to issuing or processing.
func (c *Client) ListCommands(ctx context.Context, q CommandQuery) (CommandPage, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return CommandPage{}, err
	}
	p, err := r.ListCommands(ctx, q.engine())
	return commandPageOut(p), err
}
