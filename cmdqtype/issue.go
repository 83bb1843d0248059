package cmdqtype

import (
	"encoding/json"
	"time"
)

// MaxParamsBytes is the largest (and default) limit on a command's compact
// JSON parameters: 500 KiB. Parameters are stored as UTF-16 strings in one
// table entity (1 MiB, split into 64 KiB properties), so about 512 Ki UTF-16
// code units is what one entity holds; a UTF-8 byte never takes more than one
// UTF-16 unit, so 500 KiB of JSON always fits.
const MaxParamsBytes = 500 * 1024

// MaxCorrelationIDLength is the longest correlation ID, in bytes (256).
const MaxCorrelationIDLength = 256

// Result is the outcome of issuing a command.
type Result struct {
	// ID is the command ID.
	ID string `json:"id"`
	// Existing is true when a command with this ID and the same type,
	// parameters and correlation ID already existed, or a unique key's
	// command (Duplicate); nothing was written (a message is enqueued
	// again only if the command is still pending and never started, and,
	// for a Duplicate, older than its recovery delay).
	Existing bool `json:"existing,omitempty"`
	// Duplicate is true when the issue had a unique key (Raw.UniqueKey)
	// and a command of the same type and key already existed in the same
	// window: that command is returned (Existing is true too), whatever
	// its parameters, and nothing was written.
	Duplicate bool `json:"duplicate,omitempty"`
	// Queue is the logical queue the command is on.
	Queue string `json:"queue"`
	// RunAt is the run-at time the command was issued with (UTC,
	// millisecond precision; for a delay, the issuer's clock plus it),
	// zero when none. For an existing command it is zero: its status has
	// its own.
	RunAt time.Time `json:"runAt,omitzero"`
}

// Raw is a command given as type name and JSON parameters (the HTTP API's
// form, and what issue options set).
type Raw struct {
	// ID is the command ID ("" = a new one).
	ID string
	// Type is the command type name.
	Type string
	// Params is the JSON parameters (nil or empty = {}). Whitespace is
	// removed (json.Compact) before storing and comparing.
	Params json.RawMessage
	// CorrelationID is an optional caller-chosen ID (at most
	// MaxCorrelationIDLength bytes).
	CorrelationID string
	// UniqueKey, when set, makes the command unique per type and key
	// within UniqueWindow: its ID derives from the type, the key and the
	// window's time bucket (docs/lifecycle.md, "Unique commands"), so
	// issuing the same type and key again in the same bucket returns the
	// existing command (Result.Duplicate) whatever the parameters. 1 to
	// MaxUniqueKeyLength bytes; not together with ID. Default "": not
	// unique.
	UniqueKey string
	// UniqueWindow is the length of the unique key's time buckets,
	// MinUniqueWindow (1 s) to MaxUniqueWindow (30 days); required with
	// UniqueKey. A bucket is the UTC time truncated to a multiple of the
	// window (time.Time.Truncate): 1h buckets start on the hour, 24h ones
	// at midnight UTC.
	UniqueWindow time.Duration
	// RunAt, when set, schedules the command: it does not start before
	// this time (a time at or before now: due at once). At most
	// MaxScheduleAhead ahead; not together with Delay. Default zero: due
	// at once.
	RunAt time.Time
	// Delay, when above 0, schedules the command this long after it is
	// issued (the run-at time is the issuer's clock plus Delay). Not
	// negative, at most MaxScheduleAhead; not together with RunAt.
	// Default 0: due at once.
	Delay time.Duration
	// TraceParent and TraceState are the W3C trace context
	// (https://www.w3.org/TR/trace-context/) the command is issued in:
	// stored with it, so that every attempt's span joins that trace.
	// cmdq.Client fills them from the issuing context's span (through its
	// own issue span, when a TracerProvider records); set them to issue on
	// behalf of another trace (a value that does not parse is ignored).
	// Not compared on a re-issue of the same ID. Default "": the context's.
	TraceParent, TraceState string
}

// Limits of unique commands (Raw.UniqueKey, Raw.UniqueWindow).
const (
	// MaxUniqueKeyLength is the longest unique key, in bytes (256).
	MaxUniqueKeyLength = 256
	// MinUniqueWindow is the shortest unique window (1 s).
	MinUniqueWindow = time.Second
	// MaxUniqueWindow is the longest unique window (30 days). The key
	// holds for the whole window only while its first command is kept:
	// a window longer than the type's retention of final commands (7
	// days completed, 30 days discarded or cancelled, by default) may see
	// a second command after the first was removed.
	MaxUniqueWindow = 30 * 24 * time.Hour
)
