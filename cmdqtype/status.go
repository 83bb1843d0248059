package cmdqtype

import (
	"bytes"
	"encoding/json"
	"time"
)

// The read model: a command's lifecycle states and events, its status
// (the projection of its events), the poison table's entries and the
// queries and pages of the listings. docs/lifecycle.md describes how they
// are stored.

// State is a command's lifecycle state.
type State string

// The lifecycle states. A command starts Pending; Completed, Poisoned,
// Discarded and Cancelled are final (a poisoned command until an operator
// requeues it).
const (
	// StatePending: issued (or requeued) and waiting for a processor.
	// A pending command whose run-at time is ahead reads as
	// StateScheduled (Status.AsOf).
	StatePending State = "pending"
	// StateRunning: a processor is running its handler.
	StateRunning State = "running"
	// StateRetrying: an attempt failed; the message becomes visible again after
	// the retry delay.
	StateRetrying State = "retrying"
	// StateCompleted: the handler succeeded.
	StateCompleted State = "completed"
	// StatePoisoned: over the poison ceiling, a permanent error or a malformed
	// message; an entry waits in the poison table for an operator.
	StatePoisoned State = "poisoned"
	// StateDiscarded: an operator discarded the poisoned command.
	StateDiscarded State = "discarded"
	// StateCancelled: someone cancelled the command before it ended
	// (cmdq.Client.Cancel): it never runs again, and a handler still
	// running has its context cancelled.
	StateCancelled State = "cancelled"
)

// Final reports whether a message for a command in this state is deleted
// without running the handler (Completed, Poisoned, Discarded, Cancelled).
func (s State) Final() bool {
	return s == StateCompleted || s == StatePoisoned || s == StateDiscarded || s == StateCancelled
}

// EventKind names a lifecycle event.
type EventKind string

// The lifecycle events, in the order they usually occur.
const (
	// EventCreated: the command was issued.
	EventCreated EventKind = "created"
	// EventStarted: a processor began an attempt (Attempt = the message's dequeue count).
	EventStarted EventKind = "started"
	// EventStepCompleted: the handler recorded step Step (with an optional Note).
	EventStepCompleted EventKind = "step_completed"
	// EventFailed: an attempt failed with Error (Detail holds a panic's stack); it
	// will be retried.
	EventFailed EventKind = "failed"
	// EventCompleted: the handler succeeded.
	EventCompleted EventKind = "completed"
	// EventPoisoned: the command was moved to the poison table for Reason.
	EventPoisoned EventKind = "poisoned"
	// EventLeaseLost: the lease of delivery Attempt ended before its outcome was
	// recorded (its processor lost the lease, stopped or crashed), so another
	// delivery may run the handler again; Note says how it was found. It
	// does not change the state.
	EventLeaseLost EventKind = "lease_lost"
	// EventRequeued: an operator (By = who), the reconciler or the Issuer
	// (a recovery enqueue) put the command back on its queue.
	EventRequeued EventKind = "requeued"
	// EventDiscarded: an operator (Worker = who) discarded the poisoned command.
	EventDiscarded EventKind = "discarded"
	// EventCancelled: someone (By = who) cancelled the command (Reason
	// says in which state: pending, running or retrying); it is final.
	EventCancelled EventKind = "cancelled"
)

// Valid reports whether k is one of the lifecycle events.
func (k EventKind) Valid() bool {
	switch k {
	case EventCreated, EventStarted, EventStepCompleted, EventFailed, EventCompleted, EventPoisoned, EventLeaseLost, EventRequeued, EventDiscarded, EventCancelled:
		return true
	}
	return false
}

// Event is one entry of a command's lifecycle history.
type Event struct {
	// Seq numbers the command's events from 1; set by Store.Append.
	Seq int64 `json:"seq"`
	// Kind says what happened.
	Kind EventKind `json:"kind"`
	// Time is when it happened (UTC); Store.Append sets the current time
	// when it is zero.
	Time time.Time `json:"time"`
	// Attempt is the attempt number (the queue message's dequeue count) for
	// started, step_completed, failed, completed, poisoned and lease_lost
	// events.
	Attempt int `json:"attempt,omitempty"`
	// Worker identifies the processor that caused the event (events of an
	// attempt: started, step_completed, failed, completed, poisoned,
	// lease_lost). Empty for the events of operators and the reconciler.
	Worker string `json:"worker,omitempty"`
	// By identifies who requeued, discarded or cancelled the command: an
	// operator or a program ("api:token:…", "ui:…", "cli:…", or what
	// cmdq.Client.Cancel was given), "reconciler" for a requeue by the
	// reconciler, or "issuer" for the Issuer's recovery enqueue of a
	// pending command. Empty for the events of an attempt.
	By string `json:"by,omitempty"`
	// Step is the completed step for step_completed events.
	Step int `json:"step,omitempty"`
	// Note is free text from the handler (step_completed) or operator.
	Note string `json:"note,omitempty"`
	// Error is the error message of a failed or poisoned event.
	Error string `json:"error,omitempty"`
	// Reason says why a command was poisoned or discarded.
	Reason string `json:"reason,omitempty"`
	// Detail holds extra detail, such as a panic's stack trace.
	Detail string `json:"detail,omitempty"`
	// MessageID is, on a started event, the ID of the queue message whose
	// delivery started the attempt: the message that owns the command
	// until its outcome (the a:cmd row's Owner; docs/lifecycle.md).
	MessageID string `json:"messageId,omitempty"`
	// RunAt is, on a created event, the run-at time the command was
	// issued with; on a failed event, when the next attempt is due (the
	// retry delay's end); on a requeued event of run-now, the time it was
	// made due. Zero otherwise.
	RunAt time.Time `json:"runAt,omitzero"`
}

// Status is a command's current status: the projection of its events plus
// its immutable identity. It is the body of GET /v1/commands/{id}.
type Status struct {
	// ID is the command ID (a lowercase canonical UUID).
	ID string `json:"id"`
	// Type is the command type name.
	Type string `json:"type"`
	// State is the lifecycle state.
	State State `json:"status"`
	// Attempts counts the attempts started since the command was created or
	// last requeued.
	Attempts int `json:"attempts"`
	// Step is the last completed step (0 = none).
	Step int `json:"step"`
	// LastError is the error of the last failed attempt ("" after success or
	// requeue).
	LastError string `json:"lastError,omitempty"`
	// CreatedAt is when the command was issued (UTC).
	CreatedAt time.Time `json:"createdAt"`
	// UpdatedAt is the time of the last event (UTC).
	UpdatedAt time.Time `json:"updatedAt"`
	// Worker is the processor of the last event that named one (operators'
	// requeued and discarded events name theirs in Event.By).
	Worker string `json:"worker,omitempty"`
	// CorrelationID is the caller's correlation ID, if any.
	CorrelationID string `json:"correlationId,omitempty"`
	// Queue is the logical queue the command is routed to (e.g. "commands").
	Queue string `json:"queue"`
	// RunAt is when the command is due (UTC): the run-at time it was
	// issued with (State StateScheduled until then), the time a retrying
	// command's next attempt is due, or the time an operator made it due
	// (run-now). Zero for a command issued without one that never failed.
	RunAt time.Time `json:"runAt,omitzero"`
	// Output is the JSON output the completing attempt recorded
	// (Run.SetOutput, at most MaxOutputBytes), stored with the command's
	// completion; nil when none was recorded, before completion, and in
	// listings (ListCommands: read the command for it). A retried command
	// has the output of the attempt that completed; a failed attempt's
	// output is not kept. Decode it with Output.Decode.
	Output JSON `json:"output,omitempty"`
	// TraceID is the ID of the trace the command was issued in (32 hex
	// digits; "" when it was issued outside one): its attempts' spans
	// are in that trace (docs/operations.md, "Tracing").
	TraceID string `json:"traceId,omitempty"`
}

// JSON is a JSON value kept as its compact text (Status.Output): it
// encodes as that value, not as a string, and "" is none (encoded as
// null, or left out with omitempty). A string type keeps Status
// comparable with ==.
type JSON string

// MarshalJSON returns the value's text (null for "").
func (j JSON) MarshalJSON() ([]byte, error) {
	if j == "" {
		return []byte("null"), nil
	}
	return []byte(j), nil
}

// UnmarshalJSON keeps the value's text, compacted ("" for null).
func (j *JSON) UnmarshalJSON(b []byte) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return err
	}
	if buf.String() == "null" {
		*j = ""
		return nil
	}
	*j = JSON(buf.String())
	return nil
}

// Decode decodes the value into v (json.Unmarshal); "" leaves v as it is.
func (j JSON) Decode(v any) error {
	if j == "" {
		return nil
	}
	return json.Unmarshal([]byte(j), v)
}

// MaxOutputBytes is the largest recorded output (Run.SetOutput): 32 KiB of
// compact JSON. Record an ID or a URL for larger results.
const MaxOutputBytes = 32 * 1024

// PoisonEntry is one poisoned command in the poison table.
type PoisonEntry struct {
	// CommandID is the poisoned command's ID (for a malformed queue
	// message, the message's ID).
	CommandID string `json:"commandId"`
	// Type is the command type.
	Type string `json:"type"`
	// DequeueCount is the queue message's dequeue count when it was
	// poisoned: the delivery that poisoned it, counted as attempts count
	// (one more than Attempts when the poison ceiling was exceeded without
	// running the handler, after attempts whose outcome was never
	// recorded).
	DequeueCount int64 `json:"dequeueCount"`
	// Attempts is the command's attempt count when it was poisoned: the
	// attempts recorded as started since it was issued or last requeued
	// (Status.Attempts). 0 for a malformed message or a command that was
	// never stored, and for entries written before cmdq recorded it.
	Attempts int `json:"attempts,omitempty"`
	// ParamsPreview is the start of the command's compact JSON parameters
	// (at most PoisonParamsPreview bytes, cut at a character boundary;
	// "" for a malformed message and for older entries). The command holds
	// them whole (cmdq.Client.GetParams).
	ParamsPreview string `json:"paramsPreview,omitempty"`
	// Reason says why it was poisoned (ceiling exceeded, permanent error,
	// malformed message, unknown type, …).
	Reason string `json:"reason"`
	// LastError is the last attempt's error message.
	LastError string `json:"lastError,omitempty"`
	// PoisonedAt is when it was poisoned (UTC).
	PoisonedAt time.Time `json:"poisonedAt"`
	// Queue is the logical queue the command was on.
	Queue string `json:"queue"`
	// Worker is the processor that poisoned it.
	Worker string `json:"worker,omitempty"`
}

// Why a command was poisoned: PoisonEntry.Reason and the poisoned event's
// Reason (part of the data layout: tools read them).
const (
	// ReasonAttemptsSpent: the last attempt the poison ceiling allows failed.
	ReasonAttemptsSpent = "attempts exhausted"
	// ReasonCeiling: the message was dequeued more times than the ceiling
	// allows (attempts whose outcome was never recorded: crashes, lost
	// leases); the handler did not run again.
	ReasonCeiling = "poison ceiling exceeded"
	// ReasonPermanent: the handler returned an error marked Permanent.
	ReasonPermanent = "permanent error"
	// ReasonDecode: the stored params do not decode into the handler's Go
	// type.
	ReasonDecode = "params do not decode"
	// ReasonMalformed: the queue message is not a cmdq message (kept under
	// the message's ID).
	ReasonMalformed = "malformed message"
	// ReasonNoCommand: the message names a command that is not stored.
	ReasonNoCommand = "command not found"
	// ReasonUnknownType: no processor polling the queue has a handler for
	// the command's type.
	ReasonUnknownType = "unknown command type"
	// ReasonTypeMismatch: the message's type is not the stored command's.
	ReasonTypeMismatch = "message type does not match the stored command"
)

// PoisonParamsPreview is the most bytes of a command's parameters its
// poison entry keeps (PoisonEntry.ParamsPreview): 256.
const PoisonParamsPreview = 256

// DefaultPoisonLimit is the page size of a poison listing when
// PoisonQuery.Limit is 0 (50).
const DefaultPoisonLimit = 50

// MaxPoisonLimit is the largest PoisonQuery.Limit (1000).
const MaxPoisonLimit = 1000

// PoisonQuery selects poison entries.
type PoisonQuery struct {
	// Type, when set, keeps only entries of this command type.
	Type string
	// Limit is the most entries in one page (0 = DefaultPoisonLimit, at most
	// MaxPoisonLimit).
	Limit int
	// Continuation resumes from a previous page's token. The token is an
	// opaque offset into the newest-first listing: entries poisoned or
	// removed between pages shift it (poison tables are small and change
	// rarely; an entry may be seen twice or skipped across pages).
	Continuation string
}

// PoisonPage is one page of poison entries, newest first.
type PoisonPage struct {
	// Entries are the page's entries, newest first (empty, not nil, when none).
	Entries []PoisonEntry `json:"entries"`
	// Continuation is "" on the last page.
	Continuation string `json:"continuation,omitempty"`
}

// DefaultCommandLimit is the page size of a command listing when
// CommandQuery.Limit is 0 (100).
const DefaultCommandLimit = 100

// MaxCommandLimit is the largest CommandQuery.Limit (1000).
const MaxCommandLimit = 1000

// CommandQuery selects commands for a listing (cmdq.Client.ListCommands).
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
const MaxParamsPreview = 4096

// CommandPage is one page of a command listing, in command ID order (or
// newest first, with CommandQuery.Newest).
type CommandPage struct {
	// Commands are the page's commands (empty, not nil, when none).
	Commands []Status `json:"commands"`
	// Continuation is "" on the last page.
	Continuation string `json:"continuation,omitempty"`
	// Summary is the selection's summary, when CommandQuery.Summary asked
	// for it.
	Summary *CommandSummary `json:"summary,omitempty"`
	// Params maps each listed command's ID to the start of its compact
	// JSON parameters (cut with "…"), when CommandQuery.ParamsPreview
	// asked for it.
	Params map[string]string `json:"params,omitempty"`
	// Started maps each listed running command's ID to when its current
	// attempt started (its last started event), when the listing read the
	// events (CommandQuery.Summary).
	Started map[string]time.Time `json:"started,omitempty"`
}

// CommandSummary summarises the commands a CommandQuery selects (all its
// filters but State).
type CommandSummary struct {
	// Counts are how many of them are in each state now.
	Counts map[State]int `json:"counts"`
	// Minutes are the outcomes recorded in each interval
	// (CommandQuery.Interval, a minute by default) from Since (truncated
	// to the interval; the last hour when Since is zero) to now, oldest
	// first: completed, failed (attempts that failed, retried or not) and
	// poisoned events of the selected commands, and the latency of their
	// first attempts started in the interval.
	Minutes []MinuteCounts `json:"minutes"`
	// IntervalMS is the width of each of Minutes, in milliseconds.
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

// MinuteCounts are the outcomes of one interval of a summary (a minute
// by default).
type MinuteCounts struct {
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
