package cmdq

import (
	"time"

	"github.com/cmdq-dev/cmdq/cmdqtype"
	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

// The types of the common path, from the packages that define them: a
// program using the Client needs no other import but a store driver.
type (
	// Command is a command's parameters: a Go type with a constant
	// CommandType (commands.Command).
	Command = issuer.Command
	// CommandWithOptions is a Command whose type declares its queue and
	// handling defaults (commands.CommandWithOptions).
	CommandWithOptions = issuer.CommandWithOptions
	// CommandOptions is what a command type declares about itself: queue,
	// poison ceiling, lease, timeout (commands.CommandOptions).
	CommandOptions = issuer.CommandOptions
	// Handler handles one command of type T (handlers.Handler).
	Handler[T Command] = registry.Handler[T]
	// HandlerOptions configures a type's handling in Register: the
	// CommandOptions fields plus the retry policy (handlers.Options).
	HandlerOptions = registry.Options
	// RetryPolicy sets the delay before a failed attempt is retried
	// (handlers.RetryPolicy).
	RetryPolicy = registry.RetryPolicy
	// Run is one attempt of one command, handed to its handler: attempt
	// number, last completed step, CompleteStep (handlers.Run).
	Run = registry.Run
	// Result is the outcome of issuing a command (commands.Result).
	Result = issuer.Result
	// Raw is a command given as type name and JSON parameters
	// (commands.Raw).
	Raw = issuer.Raw
	// IssueOption adjusts one Issue call (commands.IssueOption).
	IssueOption = issuer.IssueOption
	// Status is a command's current status (status.Status).
	Status = cmdqtype.Status
	// Event is one entry of a command's history (status.Event).
	Event = cmdqtype.Event
	// State is a command's lifecycle state (status.State).
	State = cmdqtype.State
	// EventKind names a lifecycle event (status.EventKind).
	EventKind = cmdqtype.EventKind
	// PoisonEntry is one poisoned command (status.PoisonEntry).
	PoisonEntry = cmdqtype.PoisonEntry
	// PoisonQuery selects poison entries (status.PoisonQuery).
	PoisonQuery = cmdqtype.PoisonQuery
	// PoisonPage is one page of poison entries (status.PoisonPage).
	PoisonPage = cmdqtype.PoisonPage
	// CommandQuery selects commands for ListCommands (status.CommandQuery).
	CommandQuery = cmdqtype.CommandQuery
	// CommandPage is one page of ListCommands (status.CommandPage).
	CommandPage = cmdqtype.CommandPage
	// Summary reports what a RunFor did (processor.Summary).
	Summary = processor.Summary
	// Health is the processor's state (processor.Health).
	Health = processor.Health
	// Stats are the processor's running counts (processor.Stats).
	Stats = processor.Stats
)

// The lifecycle states (status.State).
const (
	StatePending   = cmdqtype.StatePending
	StateRunning   = cmdqtype.StateRunning
	StateRetrying  = cmdqtype.StateRetrying
	StateCompleted = cmdqtype.StateCompleted
	StatePoisoned  = cmdqtype.StatePoisoned
	StateDiscarded = cmdqtype.StateDiscarded
)

// The lifecycle events (status.EventKind).
const (
	EventCreated       = cmdqtype.EventCreated
	EventStarted       = cmdqtype.EventStarted
	EventStepCompleted = cmdqtype.EventStepCompleted
	EventFailed        = cmdqtype.EventFailed
	EventLeaseLost     = cmdqtype.EventLeaseLost
	EventCompleted     = cmdqtype.EventCompleted
	EventPoisoned      = cmdqtype.EventPoisoned
	EventRequeued      = cmdqtype.EventRequeued
	EventDiscarded     = cmdqtype.EventDiscarded
)

// Errors of reading and operating (status), to test with errors.Is.
var (
	// ErrNotFound: no command (or poison entry) with that ID.
	ErrNotFound = cmdqtype.ErrNotFound
	// ErrExpired: the command was removed after its retention (returned
	// together with ErrNotFound; the HTTP API answers 410 Gone).
	ErrExpired = cmdqtype.ErrExpired
	// ErrNotPoisoned: Requeue or Discard of a command that is not poisoned.
	ErrNotPoisoned = cmdqtype.ErrNotPoisoned
	// ErrNoCommand: Requeue of a poison entry without a stored command.
	ErrNoCommand = cmdqtype.ErrNoCommand
)

// WithID sets the command ID (a lowercase canonical UUID), the idempotency
// key: issuing again with the same ID and parameters returns the existing
// command.
func WithID(id string) IssueOption { return issuer.WithID(id) }

// WithCorrelationID sets the command's correlation ID (at most 256 bytes).
func WithCorrelationID(id string) IssueOption { return issuer.WithCorrelationID(id) }

// With attaches issue options to cmd, for IssueMany:
// c.IssueMany(ctx, a, cmdq.With(b, cmdq.WithID(id))).
func With(cmd Command, opts ...IssueOption) Command { return issuer.With(cmd, opts...) }

// Permanent marks a handler's error as permanent: the command is poisoned
// at once instead of retried. Permanent(nil) is nil.
func Permanent(err error) error { return registry.Permanent(err) }

// NewID returns a new command ID (for WithID) that carries today's date
// (UTC): random but for the day (commands.NewDayID), so the command is
// stored in its day's table and removed with it at no cost per command
// (docs/lifecycle.md, "Retention"). Issue it within
// commands.IssueWindowPastDays (2) days: an older one is refused. For an
// ID kept longer before it is issued, use a random UUIDv4
// (uuid.NewString(): stored in the base table, removed one by one).
func NewID() string { return issuer.NewDayID(time.Now()) }
