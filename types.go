package cmdq

import (
	"context"
	"time"

	"github.com/cmdq-dev/cmdq/cmdqtype"
	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

// Command is a command's parameters: a Go type whose CommandType names the
// command type and whose JSON encoding is the parameters. CommandType must
// be a constant for the type (it is called on the zero value, and on a new
// zero element for a pointer type) and follow the naming rule: 1-128
// characters, a letter, then letters, digits, '.', '_' or '-' (such as
// "billing.ChargeCard").
type Command interface {
	CommandType() string
}

// CommandWithOptions is a Command whose type declares its queue and
// handling defaults: CommandOptions is called on the zero value (like
// CommandType) and must return the same options for every value of the
// type. Issuing routes the command to its Queue even in a process that has
// no handler for it; Register takes its fields as the defaults under
// explicit HandlerOptions.
type CommandWithOptions interface {
	Command
	CommandOptions() CommandOptions
}

// HandlerOptions configures a command type's handling (RegisterWith).
// Zero fields take the type's declared options (CommandWithOptions), then
// the defaults.
type HandlerOptions struct {
	// Queue is the logical queue the type is routed to. Defaults to the
	// declared queue, else DefaultQueue ("commands"). Give slow commands
	// their own queue so they do not share a lease with fast ones.
	Queue string
	// PoisonCeiling is the most attempts (dequeues) before the command is
	// poisoned without running. Defaults to the declared ceiling, else
	// DefaultPoisonCeiling (5).
	PoisonCeiling int
	// Lease is the visibility timeout taken on dequeue and renewed at half
	// while the handler runs, 1 s to 7 days. Defaults to the declared
	// lease, else DefaultLease (30 s).
	Lease time.Duration
	// Timeout bounds one attempt: the handler's context ends after it.
	// Defaults to the declared timeout, else DefaultTimeoutLeases (10) ×
	// Lease.
	Timeout time.Duration
	// Retry sets the delay before a failed attempt is retried. Defaults to
	// exponential from 1 s, doubling, capped at 5 min, ±20 % jitter.
	Retry RetryPolicy
	// Retention is how long the type's final commands are kept. Zero
	// fields take the declared retention, else Config.Retention (7 days
	// completed, 30 days discarded).
	Retention Retention
	// MaxConcurrency, when above 0, is the most handlers of the type this
	// Client's processor runs at once (within Config.Concurrency), so a
	// slow type cannot take every handler slot: a message of the type that
	// waits for one of its slots holds no handler slot, and is released
	// (made visible again) when its lease would need renewing. It caps one
	// process; to cap the type across processes, give it its own Queue and
	// run a known number of processes on it (docs/processor.md). Defaults
	// to the declared cap (CommandOptions.MaxConcurrency), else 0: no cap.
	MaxConcurrency int
	// Middleware wraps this type's handler, inside the Client's
	// middleware (Config.Middleware, Client.Use): the first is the
	// outermost (see Middleware). Defaults to none.
	Middleware []Middleware
}

// engine returns o as the registry's options.
func (o HandlerOptions) engine() registry.Options {
	return registry.Options{Queue: o.Queue, PoisonCeiling: o.PoisonCeiling, Lease: o.Lease, Timeout: o.Timeout,
		Retry: o.Retry, Retention: o.Retention, MaxConcurrency: o.MaxConcurrency, Middleware: middleware(o.Middleware)}
}

// Handler handles one command of type T: cmd is its decoded parameters,
// run tells the attempt and records completed steps. Return nil for
// success, an error to retry (after the type's retry delay, until the
// poison ceiling), or Permanent(err) to poison the command at once. A
// panic is a failed attempt with its stack recorded.
type Handler[T Command] func(ctx context.Context, cmd T, run *Run) error

// Run is one attempt of one command, handed to its handler.
type Run struct{ r *registry.Run }

// ID returns the command ID.
func (r *Run) ID() string { return r.r.ID() }

// Type returns the command type.
func (r *Run) Type() string { return r.r.Type() }

// Attempt returns the attempt number: 1 for the first, counting the
// deliveries since the command was issued or last requeued.
func (r *Run) Attempt() int { return r.r.Attempt() }

// Queue returns the command's logical queue.
func (r *Run) Queue() string { return r.r.Queue() }

// CorrelationID returns the command's correlation ID ("" = none).
func (r *Run) CorrelationID() string { return r.r.CorrelationID() }

// SetOutput records v's JSON encoding as the command's output, returned
// with its status once it completes (Status.Output; "output" in GET
// /v1/commands/{id}). It is stored with the completion (in the final
// batch: no extra storage call); a failed attempt's output is not kept,
// so a retried command has the output of the attempt that completed.
// Called again, the last value wins. At most MaxOutputBytes (32 KiB) of
// compact JSON: above that, or for a value json.Marshal refuses, it
// returns an error wrapping ErrOutputTooLarge or ErrInvalidOutput, and
// the attempt fails with it even if the handler returns nil (a later
// successful SetOutput clears it).
func (r *Run) SetOutput(v any) error { return r.r.SetOutput(v) }

// LastStep returns the last completed step (0 = none): a rerun skips the
// steps up to it, so multi-step work resumes where it stopped.
func (r *Run) LastStep() int { return r.r.LastStep() }

// CompleteStep records step n (from 1) as completed, with an optional
// note, before it returns: a step_completed event (one table batch). A
// step may be recorded again (a rerun repeating it) but LastStep never
// goes down. Errors: ErrInvalidStep for n < 1; ErrSuperseded when the
// command finished elsewhere or another delivery took it over (return);
// a storage error (the step is not counted).
func (r *Run) CompleteStep(ctx context.Context, n int, note string) error {
	return r.r.CompleteStep(ctx, n, note)
}

// IssueOption adjusts one Issue call (WithID, WithCorrelationID,
// UniqueKey). Given
// twice, the last one wins.
type IssueOption func(*Raw)

// WithID sets the command ID (a lowercase canonical UUID, such as one from
// NewID): the idempotency key. Issuing again with the same ID and
// parameters returns the existing command (Result.Existing); other
// parameters under the same ID fail with ErrIDConflict.
func WithID(id string) IssueOption { return func(r *Raw) { r.ID = id } }

// UniqueKey makes the command unique per type and key within window: its
// ID derives from the type, key and the window's time bucket (the UTC time
// truncated to a multiple of window: 1h buckets start on the hour, 24h
// ones at midnight UTC), so issuing the same type and key again in the
// same bucket returns the first command (Result.Duplicate and
// Result.Existing true) instead of a second one, whatever the parameters,
// and writes nothing. "Within the window" means in the same bucket: two
// issues a minute apart across an hour's boundary make two commands with
// a 1h window. key is 1 to MaxUniqueKeyLength (256) bytes; window is
// MinUniqueWindow (1 s) to MaxUniqueWindow (30 days); the key holds while
// the first command is kept (its retention). Not together with WithID.
// Bad input fails with ErrInvalidUnique and stores nothing. Cost: as a
// plain issue; a duplicate costs one failed batch and one point read
// (docs/lifecycle.md, "Unique commands").
func UniqueKey(key string, window time.Duration) IssueOption {
	return func(r *Raw) { r.UniqueKey, r.UniqueWindow = key, window }
}

// WithCorrelationID sets the command's correlation ID (free text, at most
// MaxCorrelationIDLength bytes), shown with its status.
func WithCorrelationID(id string) IssueOption { return func(r *Raw) { r.CorrelationID = id } }

// At schedules the command at t: it is StateScheduled until then and
// never starts before t (by the processor's clock), and starts within
// Config.MaxPollInterval after it at worst (at once on a processor of
// the issuing Client). A t at or before now is due at once; a t more than
// MaxScheduleAhead (2 years) ahead is refused with ErrInvalidSchedule,
// nothing stored. Any horizon works: past the queue's 7-day visibility
// limit the message hops once a week (docs/lifecycle.md, "Scheduled
// commands"). Scheduling costs no storage call: the delay rides on the
// issue's one enqueue. At and After replace each other (the last one
// given wins).
func At(t time.Time) IssueOption { return func(r *Raw) { r.RunAt, r.Delay = t, 0 } }

// After schedules the command d after it is issued (by the issuer's
// clock), as At(now + d). A negative d, or one over MaxScheduleAhead, is
// refused with ErrInvalidSchedule, nothing stored; After(0) is due at
// once.
func After(d time.Duration) IssueOption { return func(r *Raw) { r.Delay, r.RunAt = d, time.Time{} } }

// With attaches issue options to cmd, for IssueMany:
// c.IssueMany(ctx, a, cmdq.With(b, cmdq.WithID(id))).
func With(cmd Command, opts ...IssueOption) Command { return issuer.With(cmd, engineOptions(opts)...) }

// engineOptions converts issue options for the Issuer.
func engineOptions(opts []IssueOption) []issuer.IssueOption {
	if len(opts) == 0 {
		return nil
	}
	out := make([]issuer.IssueOption, len(opts))
	for i, o := range opts {
		out[i] = issuer.IssueOption(o)
	}
	return out
}

// Permanent marks a handler's error as permanent: the command is poisoned
// at once instead of retried. Permanent(nil) is nil.
func Permanent(err error) error { return registry.Permanent(err) }

// NewID returns a new command ID (for WithID) that carries today's date
// (UTC): a UUID version 8, random but for the day, so the command is
// stored in its day's table and removed with it at no cost per command
// (docs/lifecycle.md, "Retention"). Issue it within IssueWindowPastDays
// (2) days: an older one is refused. An ID kept longer before it is
// issued may be a random UUIDv4 (stored in the base table, removed one by
// one).
func NewID() string { return issuer.NewDayID(time.Now()) }

// The plain types below are defined in package cmdqtype, which the engine
// shares; their fields are documented there.
type (
	// CommandOptions is what a command type declares about itself (see
	// CommandWithOptions): queue, poison ceiling, lease, timeout,
	// retention.
	CommandOptions = cmdqtype.CommandOptions
	// Retention says how long final commands are kept (Config.Retention,
	// CommandOptions.Retention).
	Retention = cmdqtype.Retention
	// RetryPolicy sets the delay before a failed attempt is retried.
	RetryPolicy = cmdqtype.RetryPolicy
	// Result is the outcome of issuing a command.
	Result = cmdqtype.Result
	// Raw is a command given as type name and JSON parameters (IssueRaw).
	Raw = cmdqtype.Raw
	// Status is a command's current status: the projection of its events.
	Status = cmdqtype.Status
	// Event is one entry of a command's history.
	Event = cmdqtype.Event
	// State is a command's lifecycle state.
	State = cmdqtype.State
	// EventKind names a lifecycle event.
	EventKind = cmdqtype.EventKind
	// PoisonEntry is one poisoned command.
	PoisonEntry = cmdqtype.PoisonEntry
	// PoisonQuery selects poison entries (ListPoison).
	PoisonQuery = cmdqtype.PoisonQuery
	// PoisonPage is one page of poison entries, newest first.
	PoisonPage = cmdqtype.PoisonPage
	// CommandQuery selects commands (ListCommands).
	CommandQuery = cmdqtype.CommandQuery
	// CommandPage is one page of ListCommands.
	CommandPage = cmdqtype.CommandPage
	// CommandSummary counts a listing's commands per state and their
	// outcomes per minute.
	CommandSummary = cmdqtype.CommandSummary
	// MinuteCounts are the outcomes of one minute.
	MinuteCounts = cmdqtype.MinuteCounts
	// Health is the processor's health: its state, last fault, in-flight
	// count.
	Health = cmdqtype.Health
	// AccountHealth is one storage account's state (Health.Accounts).
	AccountHealth = cmdqtype.AccountHealth
	// ProcessorState is what the processor is doing (Health.State).
	ProcessorState = cmdqtype.ProcessorState
	// Stats are the processor's running counts.
	Stats = cmdqtype.Stats
	// Summary reports what a RunFor did.
	Summary = cmdqtype.Summary
	// StopReason says why RunFor returned.
	StopReason = cmdqtype.StopReason
	// RetentionStatus is what the last retention sweep did (Health).
	RetentionStatus = cmdqtype.RetentionStatus
	// JSON is a JSON value kept as its text (Status.Output).
	JSON = cmdqtype.JSON
	// InFlight is a command whose handler this Client's processor runs now.
	InFlight = cmdqtype.InFlight
	// CancelResult is the outcome of Cancel.
	CancelResult = cmdqtype.CancelResult
	// QueueInfo is one logical queue: its depth and pause state
	// (ListQueues).
	QueueInfo = cmdqtype.QueueInfo
	// PeriodicInfo is one periodic schedule with its last and next tick
	// (ListPeriodic).
	PeriodicInfo = cmdqtype.PeriodicInfo
	// TickInfo is one tick of a periodic schedule.
	TickInfo = cmdqtype.TickInfo
	// ProcessorInfo is one running processor as its heartbeat reports it
	// (Processors).
	ProcessorInfo = cmdqtype.ProcessorInfo
	// Observer receives every processing event (Config.Observers).
	Observer = cmdqtype.Observer
	// ObserverFunc adapts a function to Observer.
	ObserverFunc = cmdqtype.ObserverFunc
	// Observation is one processing event.
	Observation = cmdqtype.Observation
	// ObservationKind says what an Observation reports.
	ObservationKind = cmdqtype.ObservationKind
)

// The lifecycle states.
const (
	StatePending   = cmdqtype.StatePending
	StateRunning   = cmdqtype.StateRunning
	StateRetrying  = cmdqtype.StateRetrying
	StateCompleted = cmdqtype.StateCompleted
	StatePoisoned  = cmdqtype.StatePoisoned
	StateDiscarded = cmdqtype.StateDiscarded
	StateCancelled = cmdqtype.StateCancelled
	StateScheduled = cmdqtype.StateScheduled
)

// The lifecycle events.
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
	EventCancelled     = cmdqtype.EventCancelled
)

// The processor states (Health.State).
const (
	ProcessorStarting  = cmdqtype.ProcessorStarting
	ProcessorPolling   = cmdqtype.ProcessorPolling
	ProcessorWorking   = cmdqtype.ProcessorWorking
	ProcessorIdle      = cmdqtype.ProcessorIdle
	ProcessorDraining  = cmdqtype.ProcessorDraining
	ProcessorStopped   = cmdqtype.ProcessorStopped
	ProcessorUnhealthy = cmdqtype.ProcessorUnhealthy
)

// Why RunFor stopped (Summary.StoppedBecause).
const (
	StopDeadline  = cmdqtype.StopDeadline
	StopIdle      = cmdqtype.StopIdle
	StopCancelled = cmdqtype.StopCancelled
)

// Why a command was poisoned (PoisonEntry.Reason, Event.Reason).
const (
	ReasonAttemptsSpent = cmdqtype.ReasonAttemptsSpent
	ReasonCeiling       = cmdqtype.ReasonCeiling
	ReasonPermanent     = cmdqtype.ReasonPermanent
	ReasonDecode        = cmdqtype.ReasonDecode
	ReasonMalformed     = cmdqtype.ReasonMalformed
	ReasonNoCommand     = cmdqtype.ReasonNoCommand
	ReasonUnknownType   = cmdqtype.ReasonUnknownType
	ReasonTypeMismatch  = cmdqtype.ReasonTypeMismatch
)

// The observation kinds (Observation.Kind).
const (
	ObservedStarted   = cmdqtype.ObservedStarted
	ObservedCompleted = cmdqtype.ObservedCompleted
	ObservedFailed    = cmdqtype.ObservedFailed
	ObservedPoisoned  = cmdqtype.ObservedPoisoned
	ObservedLeaseLost = cmdqtype.ObservedLeaseLost
	ObservedPolled    = cmdqtype.ObservedPolled
	ObservedAlert     = cmdqtype.ObservedAlert
	ObservedHealth    = cmdqtype.ObservedHealth
	ObservedPaused    = cmdqtype.ObservedPaused
	ObservedResumed   = cmdqtype.ObservedResumed
)

// Defaults and limits (cmdqtype documents each one).
const (
	DefaultPrefix             = cmdqtype.DefaultPrefix
	DefaultQueue              = cmdqtype.DefaultQueue
	DefaultPoisonCeiling      = cmdqtype.DefaultPoisonCeiling
	DefaultLease              = cmdqtype.DefaultLease
	DefaultTimeoutLeases      = cmdqtype.DefaultTimeoutLeases
	DefaultCompletedRetention = cmdqtype.DefaultCompletedRetention
	DefaultDiscardedRetention = cmdqtype.DefaultDiscardedRetention
	KeepForever               = cmdqtype.KeepForever
	NoJitter                  = cmdqtype.NoJitter
	MaxParamsBytes            = cmdqtype.MaxParamsBytes
	MaxCorrelationIDLength    = cmdqtype.MaxCorrelationIDLength
	IssueWindowPastDays       = cmdqtype.IssueWindowPastDays
	IssueWindowFutureDays     = cmdqtype.IssueWindowFutureDays
	ControlInterval           = cmdqtype.ControlInterval
	MaxOutputBytes            = cmdqtype.MaxOutputBytes
	MaxUniqueKeyLength        = cmdqtype.MaxUniqueKeyLength
	MinUniqueWindow           = cmdqtype.MinUniqueWindow
	MaxUniqueWindow           = cmdqtype.MaxUniqueWindow
	MaxPeriodicNameLength     = cmdqtype.MaxPeriodicNameLength
	DefaultCatchUp            = cmdqtype.DefaultCatchUp
	NoCatchUp                 = cmdqtype.NoCatchUp
	MaxCatchUp                = cmdqtype.MaxCatchUp
	MaxScheduleAhead          = cmdqtype.MaxScheduleAhead
	MaxClockSkew              = cmdqtype.MaxClockSkew
)

// Errors to test with errors.Is (cmdqtype documents each one).
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
	// ErrInvalidContinuation: a continuation token no page returned.
	ErrInvalidContinuation = cmdqtype.ErrInvalidContinuation
	// ErrInvalidType: the command type name breaks the naming rule.
	ErrInvalidType = cmdqtype.ErrInvalidType
	// ErrInvalidID: the command ID is not a lowercase canonical UUID, or
	// its day is outside the issue window (ErrIDOutsideWindow).
	ErrInvalidID = cmdqtype.ErrInvalidID
	// ErrIDOutsideWindow: the ID's day is outside the issue window.
	ErrIDOutsideWindow = cmdqtype.ErrIDOutsideWindow
	// ErrInvalidParams: the parameters are not valid JSON or do not decode
	// into the type's Go type.
	ErrInvalidParams = cmdqtype.ErrInvalidParams
	// ErrParamsTooLarge: the parameters exceed Config.MaxParamsBytes.
	ErrParamsTooLarge = cmdqtype.ErrParamsTooLarge
	// ErrIDConflict: the ID is taken by another command (other type,
	// parameters or correlation ID).
	ErrIDConflict = cmdqtype.ErrIDConflict
	// ErrEnqueueFailed: stored and marked for the reconciler, which will
	// enqueue it: the command is accepted.
	ErrEnqueueFailed = cmdqtype.ErrEnqueueFailed
	// ErrNotAccepted: stored but not queued: issue it again with the same
	// ID.
	ErrNotAccepted = cmdqtype.ErrNotAccepted
	// ErrInvalidOptions: CommandOptions or HandlerOptions break a rule.
	ErrInvalidOptions = cmdqtype.ErrInvalidOptions
	// ErrDuplicateType: the command type is already registered.
	ErrDuplicateType = cmdqtype.ErrDuplicateType
	// ErrInvalidStep: Run.CompleteStep with a step below 1.
	ErrInvalidStep = cmdqtype.ErrInvalidStep
	// ErrOutputTooLarge: Run.SetOutput's value is over MaxOutputBytes of
	// JSON; the attempt fails with it.
	ErrOutputTooLarge = cmdqtype.ErrOutputTooLarge
	// ErrInvalidOutput: Run.SetOutput's value does not encode to JSON;
	// the attempt fails with it.
	ErrInvalidOutput = cmdqtype.ErrInvalidOutput
	// ErrSuperseded: the attempt is over (the command finished elsewhere,
	// or another delivery took it over); return from the handler.
	ErrSuperseded = cmdqtype.ErrSuperseded
	// ErrNoHandlers: Run or RunFor without a registered handler.
	ErrNoHandlers = cmdqtype.ErrNoHandlers
	// ErrStorageUnavailable: storage did not answer the readiness probe
	// in time (CheckStorage).
	ErrStorageUnavailable = cmdqtype.ErrStorageUnavailable
	// ErrNotCancellable: Cancel of a command that already ended
	// (completed, poisoned or discarded).
	ErrNotCancellable = cmdqtype.ErrNotCancellable
	// ErrCancelled: the cause (context.Cause) of a handler's context when
	// its command was cancelled while it ran (with ErrSuperseded).
	ErrCancelled = cmdqtype.ErrCancelled
	// ErrUnknownQueue: PauseQueue or ResumeQueue of a queue neither the
	// Client nor the store knows.
	ErrUnknownQueue = cmdqtype.ErrUnknownQueue
	// ErrInvalidUnique: a bad unique key or window (UniqueKey).
	ErrInvalidUnique = cmdqtype.ErrInvalidUnique
	// ErrInvalidSchedule: a run-at time or delay that is refused (At,
	// After: more than 2 years ahead, a negative delay, or both), or a
	// bad periodic name, spec or option (Periodic).
	ErrInvalidSchedule = cmdqtype.ErrInvalidSchedule
	// ErrNotWaiting: RunNow of a command that is neither scheduled nor
	// retrying (or due within MaxClockSkew anyway).
	ErrNotWaiting = cmdqtype.ErrNotWaiting
)
