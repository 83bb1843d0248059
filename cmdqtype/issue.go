package cmdqtype

import (
	"encoding/json"
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
	// TraceParent and TraceState are the W3C trace context
	// (https://www.w3.org/TR/trace-context/) the command is issued in:
	// stored with it, so that every attempt's span joins that trace.
	// cmdq.Client fills them from the issuing context's span (through its
	// own issue span, when a TracerProvider records); set them to issue on
	// behalf of another trace (a value that does not parse is ignored).
	// Not compared on a re-issue of the same ID. Default "": the context's.
	TraceParent, TraceState string
}
