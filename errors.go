package cmdq

import (
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// Sentinel errors of reading and operating (test with errors.Is).
var (
	// ErrNotFound: no command (or poison entry) with that ID. The Client's
	// errors for a missing command wrap it (and the storage driver's own
	// not-found error); the Go client of the HTTP API matches it on 404
	// and 410.
	ErrNotFound = model.ErrNotFound
	// ErrNoCommand: Requeue on a poison entry that has no stored command (a
	// malformed queue message, or one naming a command ID that was never
	// stored). Nothing can be run again; Discard removes the entry.
	ErrNoCommand = model.ErrNoCommand
	// ErrNotPoisoned: Requeue or Discard on a command that is not poisoned.
	ErrNotPoisoned = model.ErrNotPoisoned
	// ErrInvalidContinuation: a PoisonQuery or CommandQuery Continuation
	// that no page returned.
	ErrInvalidContinuation = model.ErrInvalidContinuation
	// ErrExpired: the command was removed after its retention (see
	// docs/lifecycle.md, "Retention"). It is returned wrapped together with
	// ErrNotFound, so callers that only test ErrNotFound keep working; the
	// HTTP API answers 410 Gone for it.
	ErrExpired = model.ErrExpired
	// ErrNotCancellable: Cancel of a command that already ended
	// (completed, poisoned or discarded). A poisoned command is discarded
	// instead (Discard). The HTTP API answers 409.
	ErrNotCancellable = model.ErrNotCancellable
	// ErrUnknownQueue: PauseQueue or ResumeQueue of a logical queue that
	// neither the Client (its registered and declared types) nor the store
	// knows. The HTTP API answers 404.
	ErrUnknownQueue = model.ErrUnknownQueue
)

// Sentinel errors of issuing (test with errors.Is).
var (
	// ErrInvalidType: the command type name breaks the naming rule
	// (ValidateType).
	ErrInvalidType = model.ErrInvalidType
	// ErrInvalidID: the command ID is not a canonical lowercase UUID, or it
	// carries a day outside the issue window (ErrIDOutsideWindow).
	ErrInvalidID = model.ErrInvalidID
	// ErrIDOutsideWindow: an ID that carries a time (a UUIDv7, or a day ID
	// from NewID) whose day is outside the issue window
	// (IssueWindowPastDays, IssueWindowFutureDays). Issuing wraps it
	// together with ErrInvalidID.
	ErrIDOutsideWindow = model.ErrIDOutsideWindow
	// ErrInvalidParams: the parameters are not a valid JSON value, the
	// correlation ID is too long, or the parameters do not decode into the
	// type's Go type (a registered or declared type: the error names the
	// field).
	ErrInvalidParams = model.ErrInvalidParams
	// ErrParamsTooLarge: the JSON parameters exceed the limit
	// (MaxParamsBytes, or Config.MaxParamsBytes).
	ErrParamsTooLarge = model.ErrParamsTooLarge
	// ErrIDConflict: a command with this ID exists with a different type,
	// different parameters or a different correlation ID.
	ErrIDConflict = model.ErrIDConflict
	// ErrEnqueueFailed: the command was stored but its queue message could
	// not be sent; it is durably marked for the reconciler, which will
	// enqueue it (the command is accepted and Result.ID is valid).
	ErrEnqueueFailed = model.ErrEnqueueFailed
	// ErrNotAccepted: the command was stored but neither enqueued nor marked
	// for the reconciler (storage failed for both), so nothing guarantees it
	// will run: it is not accepted. Issue it again with the same ID
	// (Result.ID): a re-issue of a pending, never-started command enqueues
	// it. The Client also retries the enqueue in the background while the
	// process lives (Config.EnqueueRetry). The error wraps the causes.
	ErrNotAccepted = model.ErrNotAccepted
	// ErrInvalidUnique: a unique key that is empty or longer than
	// MaxUniqueKeyLength, a unique window outside MinUniqueWindow ..
	// MaxUniqueWindow, or a unique key given together with an ID. Nothing
	// is stored; the HTTP API answers 400.
	ErrInvalidUnique = model.ErrInvalidUnique
	// ErrInvalidOrderKey: an order key (OrderKey, "orderKey") that is
	// empty or longer than MaxOrderKeyLength. Nothing is stored; the HTTP
	// API answers 400.
	ErrInvalidOrderKey = model.ErrInvalidOrderKey
	// ErrOrderKeyQueue: the order key's commands so far are on another
	// queue than this command's type is routed to; a key's commands must
	// share a queue (docs/lifecycle.md, "Order keys"). Nothing is stored;
	// the HTTP API answers 400.
	ErrOrderKeyQueue = model.ErrOrderKeyQueue
)

// Sentinel errors of registering and running handlers (test with
// errors.Is).
var (
	// ErrInvalidOptions: CommandOptions or HandlerOptions break a rule; the
	// error lists every problem.
	ErrInvalidOptions = model.ErrInvalidOptions
	// ErrDuplicateType: a handler is already registered for the command
	// type (or the type is already declared, for Declare).
	ErrDuplicateType = model.ErrDuplicateType
	// ErrInvalidStep: Attempt.CompleteStep got a step number below 1.
	ErrInvalidStep = model.ErrInvalidStep
	// ErrSuperseded: the attempt is over while its handler still runs: the
	// command finished (completed, poisoned, discarded or cancelled) elsewhere, or
	// another delivery of it took it over. Attempt.CompleteStep returns an
	// error wrapping it (the step is not recorded) and the handler's
	// context is cancelled: return. Nothing more is recorded for the
	// attempt, whatever the handler returns.
	ErrSuperseded = model.ErrSuperseded
	// ErrCancelled: the command was cancelled while its handler ran
	// (Client.Cancel). The handler's context is cancelled with a
	// cause wrapping it and ErrSuperseded (context.Cause): return. Nothing
	// more is recorded for the attempt, whatever the handler returns.
	ErrCancelled = model.ErrCancelled
	// ErrOutputTooLarge: Attempt.SetOutput's value encodes to more than
	// MaxOutputBytes of JSON (or does not fit in the command's row beside
	// parameters near the largest). SetOutput returns an error wrapping
	// it, and the attempt fails with it even if the handler returns nil
	// (it is retried, as any failure).
	ErrOutputTooLarge = model.ErrOutputTooLarge
	// ErrInvalidOutput: Attempt.SetOutput's value does not encode to JSON.
	// SetOutput returns an error wrapping it, and the attempt fails with
	// it even if the handler returns nil.
	ErrInvalidOutput = model.ErrInvalidOutput
	// ErrNoHandlers: Run or RunFor of a Client without a registered
	// handler.
	ErrNoHandlers = model.ErrNoHandlers
	// ErrStorageUnavailable: storage did not answer the readiness probe
	// (Client.CheckStorage) in time.
	ErrStorageUnavailable = model.ErrStorageUnavailable
	// ErrStorageFull: the embedded store's disk is (nearly) full, so the
	// write was refused before anything was stored: Issue, IssueRaw and
	// IssueMany while less than the store's reserve plus
	// Config.IssueHeadroom is free, every other write (cancel, requeue,
	// a processor's record of an attempt) while less than the reserve is
	// free (embedded.Options.Reserve). Reads go on. Writes are accepted
	// again by themselves within about a second of space returning:
	// retry later. The error names the data directory and its free
	// space. It is storage.ErrFull, so a driver's error matches it too.
	// The HTTP API answers 507 Insufficient Storage with Retry-After;
	// CheckStorage reports it (the server is not ready).
	ErrStorageFull = storage.ErrFull
)

// Sentinel errors of scheduling (test with errors.Is).
var (
	// ErrInvalidSchedule: a command's run-at time or delay is not
	// acceptable (both given, a negative delay, or more than
	// MaxScheduleAhead ahead: nothing is stored; the HTTP API answers
	// 400), or a periodic command's name or spec is malformed (a cron
	// expression, descriptor or interval that does not parse), or the
	// name is registered twice.
	ErrInvalidSchedule = model.ErrInvalidSchedule
	// ErrNotWaiting: RunNow of a command that is neither scheduled nor
	// retrying with its next attempt more than MaxClockSkew away (it is
	// pending or running, due already, or ended). The HTTP API answers
	// 409.
	ErrNotWaiting = model.ErrNotWaiting
)
