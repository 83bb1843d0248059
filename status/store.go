package status

import (
	"context"
	"errors"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// Sentinel errors callers branch on (test with errors.Is).
var (
	// ErrNotFound: no command (or poison entry) with that ID. It also wraps
	// storage.ErrNotFound.
	ErrNotFound = errors.New("status: command not found")
	// ErrNotPoisoned: Requeue or Discard on a command that is not poisoned.
	ErrNotPoisoned = errors.New("status: command is not poisoned")
)

// Row keys and partitions of the data layout (contract: operators read them).
const (
	// RowCommand is the row of the immutable command (type, params, …).
	RowCommand = "a:cmd"
	// RowStatus is the row of the projection; its ETag guards every write.
	RowStatus = "a:status"
	// EventRowPrefix starts every event row key: "e:" + 10-digit sequence.
	EventRowPrefix = "e:"
	// UnqueuedPartition holds markers (RowKey = command ID, property Queue)
	// for commands whose enqueue failed after they were stored.
	UnqueuedPartition = "~unqueued"
)

// NewCommand is what Store.Create writes.
type NewCommand struct {
	// ID is the command ID (lowercase canonical UUID; validated by the caller).
	ID string
	// Type is the command type name.
	Type string
	// Params is the JSON parameters (compact). nil is stored as "{}".
	Params []byte
	// CorrelationID is the caller's correlation ID ("" = none).
	CorrelationID string
	// Queue is the logical queue ("" = DefaultQueue).
	Queue string
	// IssuedAt is the issue time (zero = now); stored in UTC.
	IssuedAt time.Time
}

// Record is a loaded command: its status, its parameters and the concurrency
// token for the next write.
type Record struct {
	Status
	// Params is the command's JSON parameters.
	Params []byte
	// ParamsHash is the hex SHA-256 of Params (for idempotent re-issue).
	ParamsHash string
	// ETag is the ETag of the projection row; Append and Poison write only
	// if it still matches.
	ETag string
	// EventSeq is the sequence number of the last event.
	EventSeq int64
}

// PoisonEntry is one poisoned command in the poison table.
type PoisonEntry struct {
	// CommandID is the poisoned command's ID.
	CommandID string `json:"commandId"`
	// Type is the command type.
	Type string `json:"type"`
	// DequeueCount is the queue message's dequeue count when it was poisoned.
	DequeueCount int64 `json:"dequeueCount"`
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

// Options configures a Store or Reader.
type Options struct {
	// Now returns the current time (default time.Now). Times are stored in UTC.
	Now func() time.Time
}

// Store writes command records: Create (issue), Load, Append (lifecycle
// events) and Poison. It is safe for concurrent use.
type Store struct {
	commands, poison storage.Table
	now              func() time.Time
}

// New returns a Store on the commands and poison tables (see Names and
// OpenTables).
func New(commands, poison storage.Table, opts Options) *Store {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Store{commands: commands, poison: poison, now: now}
}

// OpenTables opens (creating if needed) the commands and poison tables named
// by names.
func OpenTables(ctx context.Context, st storage.Store, names Names) (commands, poison storage.Table, err error) {
	panic("TODO")
}

// Create writes a new command in one batch: the command row, the projection
// (pending) and the created event. If the ID exists, the error wraps
// storage.ErrExists. Params over what one entity holds give an error wrapping
// storage.ErrTooLarge naming the limit (MaxParamsBytes).
func (s *Store) Create(ctx context.Context, c NewCommand) error {
	panic("TODO")
}

// Load reads a command and its projection with one query. A missing command
// gives an error wrapping ErrNotFound.
func (s *Store) Load(ctx context.Context, id string) (*Record, error) {
	panic("TODO")
}

// Append writes events (at most 99) and the updated projection in one batch,
// conditional on rec.ETag. Events get consecutive sequence numbers and, if
// their Time is zero, the current time. On success rec is updated in place
// (status, ETag, EventSeq); on failure it is unchanged. If the command was
// written since rec was loaded, the error wraps storage.ErrConflict: Load
// again and decide.
func (s *Store) Append(ctx context.Context, rec *Record, events ...Event) error {
	panic("TODO")
}

// Poison records a poisoned command: it upserts the poison-table entry, then
// appends events (e.g. a pending started and a failed event) followed by the
// poisoned event (built from entry) in one conditional batch. Missing entry
// fields (CommandID, Type, Queue, PoisonedAt) are filled from rec and the
// clock. If the batch fails, the entry is removed again unless the command is
// poisoned by someone else meanwhile. Cost: 1 upsert + 1 batch.
func (s *Store) Poison(ctx context.Context, rec *Record, entry PoisonEntry, events ...Event) error {
	panic("TODO")
}

// MarkUnqueued records that the command id was stored but its enqueue failed
// (an upsert into partition UnqueuedPartition); the reconciler re-enqueues it.
func (s *Store) MarkUnqueued(ctx context.Context, id, queue string) error {
	panic("TODO")
}
