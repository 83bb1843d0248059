package commands

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cmdq-dev/cmdq/status"
	"github.com/cmdq-dev/cmdq/storage"
)

// DefaultMaxParamsBytes is the default and largest Options.MaxParamsBytes:
// 500 KiB of JSON. Parameters are stored as UTF-16 strings in one entity
// (1 MiB, split into 64 KiB properties), so this is what one entity holds.
const DefaultMaxParamsBytes = 500 * 1024

// MaxCorrelationIDLength is the longest correlation ID, in bytes.
const MaxCorrelationIDLength = 256

// Options configures an Issuer. The zero value works.
type Options struct {
	// Prefix starts every storage name (default "cmdq").
	Prefix string
	// Notify, if set, is called with the logical queue name after each
	// successful enqueue (e.g. (*processor.Processor).Notify, to wake an
	// in-process processor at once). It must not block.
	Notify func(queue string)
	// QueueFor routes a command type to a logical queue (default: every type
	// to "commands"). The result must make a valid queue name with the prefix.
	QueueFor func(cmdType string) string
	// MaxParamsBytes limits the JSON parameters, in bytes (default and at
	// most DefaultMaxParamsBytes).
	MaxParamsBytes int
	// Now returns the current time (default time.Now).
	Now func() time.Time
}

// Validate reports every problem with the options at once.
func (o Options) Validate() error {
	panic("TODO")
}

// Result is the outcome of issuing a command.
type Result struct {
	// ID is the command ID.
	ID string `json:"id"`
	// Existing is true when a command with this ID and the same parameters
	// already existed; nothing was written or enqueued.
	Existing bool `json:"existing,omitempty"`
	// Queue is the logical queue the command is on.
	Queue string `json:"queue"`
}

// Raw is a command given as type name and JSON parameters (the HTTP API's
// form).
type Raw struct {
	// ID is the command ID ("" = a new random UUID).
	ID string
	// Type is the command type name.
	Type string
	// Params is the JSON parameters (nil or empty = {}).
	Params json.RawMessage
	// CorrelationID is an optional caller-chosen ID (at most 256 bytes).
	CorrelationID string
}

// IssueOption adjusts one Issue call.
type IssueOption func(*Raw)

// WithID sets the command ID (idempotency key): issuing again with the same
// ID and parameters returns the existing command.
func WithID(id string) IssueOption { return func(r *Raw) { r.ID = id } }

// WithCorrelationID sets the correlation ID.
func WithCorrelationID(id string) IssueOption { return func(r *Raw) { r.CorrelationID = id } }

// Issuer stores commands and enqueues them. Safe for concurrent use.
type Issuer struct {
	st   storage.Store
	opts Options
}

// NewIssuer returns an Issuer on st. Tables and queues are opened on first use.
func NewIssuer(st storage.Store, opts Options) (*Issuer, error) {
	panic("TODO")
}

// Issue stores cmd (JSON-encoded) and enqueues it. Cost: one table batch and
// one enqueue; re-issuing an existing ID costs one batch attempt and one query.
func (i *Issuer) Issue(ctx context.Context, cmd Command, opts ...IssueOption) (Result, error) {
	panic("TODO")
}

// IssueRaw stores and enqueues a command given as type and JSON parameters.
// Errors: ErrInvalidType, ErrInvalidID, ErrInvalidParams, ErrParamsTooLarge,
// ErrIDConflict, ErrEnqueueFailed (the command is stored; Result.ID is valid).
func (i *Issuer) IssueRaw(ctx context.Context, raw Raw) (Result, error) {
	panic("TODO")
}

var _ = status.Pending
