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
	// parameters and correlation ID already existed; nothing was written (a
	// message is enqueued again only if the command is still pending and
	// never started).
	Existing bool `json:"existing,omitempty"`
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
}
