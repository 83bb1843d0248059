package cmdq

import (
	"time"

	"github.com/cmdq-dev/cmdq/commands"
	"github.com/cmdq-dev/cmdq/handlers"
	"github.com/cmdq-dev/cmdq/processor"
	"github.com/cmdq-dev/cmdq/status"
)

// The types of the common path, from the packages that define them: a
// program using the Client needs no other import but a store driver.
type (
	// Command is a command's parameters: a Go type with a constant
	// CommandType (commands.Command).
	Command = commands.Command
	// CommandWithOptions is a Command whose type declares its queue and
	// handling defaults (commands.CommandWithOptions).
	CommandWithOptions = commands.CommandWithOptions
	// CommandOptions is what a command type declares about itself: queue,
	// poison ceiling, lease, timeout (commands.CommandOptions).
	CommandOptions = commands.CommandOptions
	// Handler handles one command of type T (handlers.Handler).
	Handler[T Command] = handlers.Handler[T]
	// HandlerOptions configures a type's handling in Register: the
	// CommandOptions fields plus the retry policy (handlers.Options).
	HandlerOptions = handlers.Options
	// RetryPolicy sets the delay before a failed attempt is retried
	// (handlers.RetryPolicy).
	RetryPolicy = handlers.RetryPolicy
	// Run is one attempt of one command, handed to its handler: attempt
	// number, last completed step, CompleteStep (handlers.Run).
	Run = handlers.Run
	// Result is the outcome of issuing a command (commands.Result).
	Result = commands.Result
	// Raw is a command given as type name and JSON parameters
	// (commands.Raw).
	Raw = commands.Raw
	// IssueOption adjusts one Issue call (commands.IssueOption).
	IssueOption = commands.IssueOption
	// Status is a command's current status (status.Status).
	Status = status.Status
	// Event is one entry of a command's history (status.Event).
	Event = status.Event
	// State is a command's lifecycle state (status.State).
	State = status.State
	// EventKind names a lifecycle event (status.EventKind).
	EventKind = status.EventKind
	// PoisonEntry is one poisoned command (status.PoisonEntry).
	PoisonEntry = status.PoisonEntry
	// PoisonQuery selects poison entries (status.PoisonQuery).
	PoisonQuery = status.PoisonQuery
	// PoisonPage is one page of poison entries (status.PoisonPage).
	PoisonPage = status.PoisonPage
	// CommandQuery selects commands for ListCommands (status.CommandQuery).
	CommandQuery = status.CommandQuery
	// CommandPage is one page of ListCommands (status.CommandPage).
	CommandPage = status.CommandPage
	// Summary reports what a RunFor did (processor.Summary).
	Summary = processor.Summary
	// Health is the processor's state (processor.Health).
	Health = processor.Health
	// Stats are the processor's running counts (processor.Stats).
	Stats = processor.Stats
)

// The lifecycle states (status.State).
const (
	StatePending   = status.StatePending
	StateRunning   = status.StateRunning
	StateRetrying  = status.StateRetrying
	StateCompleted = status.StateCompleted
	StatePoisoned  = status.StatePoisoned
	StateDiscarded = status.StateDiscarded
)

// The lifecycle events (status.EventKind).
const (
	EventCreated       = status.EventCreated
	EventStarted       = status.EventStarted
	EventStepCompleted = status.EventStepCompleted
	EventFailed        = status.EventFailed
	EventLeaseLost     = status.EventLeaseLost
	EventCompleted     = status.EventCompleted
	EventPoisoned      = status.EventPoisoned
	EventRequeued      = status.EventRequeued
	EventDiscarded     = status.EventDiscarded
)

// Errors of reading and operating (status), to test with errors.Is.
var (
	// ErrNotFound: no command (or poison entry) with that ID.
	ErrNotFound = status.ErrNotFound
	// ErrExpired: the command was removed after its retention (returned
	// together with ErrNotFound; the HTTP API answers 410 Gone).
	ErrExpired = status.ErrExpired
	// ErrNotPoisoned: Requeue or Discard of a command that is not poisoned.
	ErrNotPoisoned = status.ErrNotPoisoned
	// ErrNoCommand: Requeue of a poison entry without a stored command.
	ErrNoCommand = status.ErrNoCommand
)

// WithID sets the command ID (a lowercase canonical UUID), the idempotency
// key: issuing again with the same ID and parameters returns the existing
// command.
func WithID(id string) IssueOption { return commands.WithID(id) }

// WithCorrelationID sets the command's correlation ID (at most 256 bytes).
func WithCorrelationID(id string) IssueOption { return commands.WithCorrelationID(id) }

// With attaches issue options to cmd, for IssueMany:
// c.IssueMany(ctx, a, cmdq.With(b, cmdq.WithID(id))).
func With(cmd Command, opts ...IssueOption) Command { return commands.With(cmd, opts...) }

// Permanent marks a handler's error as permanent: the command is poisoned
// at once instead of retried. Permanent(nil) is nil.
func Permanent(err error) error { return handlers.Permanent(err) }

// NewID returns a new command ID (for WithID) that carries today's date
// (UTC): random but for the day (commands.NewDayID), so the command is
// stored in its day's table and removed with it at no cost per command
// (docs/lifecycle.md, "Retention"). Issue it within
// commands.IssueWindowPastDays (2) days: an older one is refused. For an
// ID kept longer before it is issued, use a random UUIDv4
// (uuid.NewString(): stored in the base table, removed one by one).
func NewID() string { return commands.NewDayID(time.Now()) }
