package cmdqtype

import "errors"

// Sentinel errors of reading and operating (test with errors.Is).
var (
	// ErrNotFound: no command (or poison entry) with that ID. The Client's
	// errors for a missing command wrap it (and the storage driver's own
	// not-found error); the Go client of the HTTP API matches it on 404
	// and 410.
	ErrNotFound = errors.New("cmdq: command not found")
	// ErrNoCommand: Requeue on a poison entry that has no stored command (a
	// malformed queue message, or one naming a command ID that was never
	// stored). Nothing can be run again; Discard removes the entry.
	ErrNoCommand = errors.New("cmdq: poison entry has no stored command")
	// ErrNotPoisoned: Requeue or Discard on a command that is not poisoned.
	ErrNotPoisoned = errors.New("cmdq: command is not poisoned")
	// ErrInvalidContinuation: a PoisonQuery or CommandQuery Continuation
	// that no page returned.
	ErrInvalidContinuation = errors.New("cmdq: invalid continuation token")
	// ErrExpired: the command was removed after its retention (see
	// docs/lifecycle.md, "Retention"). It is returned wrapped together with
	// ErrNotFound, so callers that only test ErrNotFound keep working; the
	// HTTP API answers 410 Gone for it.
	ErrExpired = errors.New("cmdq: command expired (removed after its retention)")
	// ErrNotCancellable: Cancel of a command that already ended
	// (completed, poisoned or discarded). A poisoned command is discarded
	// instead (Discard). The HTTP API answers 409.
	ErrNotCancellable = errors.New("cmdq: command already ended and cannot be cancelled")
	// ErrUnknownQueue: PauseQueue or ResumeQueue of a logical queue that
	// neither the Client (its registered and declared types) nor the store
	// knows. The HTTP API answers 404.
	ErrUnknownQueue = errors.New("cmdq: unknown queue")
)

// Sentinel errors of issuing (test with errors.Is).
var (
	// ErrInvalidType: the command type name breaks the naming rule
	// (ValidateType).
	ErrInvalidType = errors.New("cmdq: invalid command type")
	// ErrInvalidID: the command ID is not a canonical lowercase UUID, or it
	// carries a day outside the issue window (ErrIDOutsideWindow).
	ErrInvalidID = errors.New("cmdq: invalid command ID")
	// ErrIDOutsideWindow: an ID that carries a time (a UUIDv7, or a day ID
	// from NewID) whose day is outside the issue window
	// (IssueWindowPastDays, IssueWindowFutureDays). Issuing wraps it
	// together with ErrInvalidID.
	ErrIDOutsideWindow = errors.New("cmdq: command ID's time is outside the issue window")
	// ErrInvalidParams: the parameters are not a valid JSON value, the
	// correlation ID is too long, or the parameters do not decode into the
	// type's Go type (a registered or declared type: the error names the
	// field).
	ErrInvalidParams = errors.New("cmdq: invalid params")
	// ErrParamsTooLarge: the JSON parameters exceed the limit
	// (MaxParamsBytes, or Config.MaxParamsBytes).
	ErrParamsTooLarge = errors.New("cmdq: params too large")
	// ErrIDConflict: a command with this ID exists with a different type,
	// different parameters or a different correlation ID.
	ErrIDConflict = errors.New("cmdq: command ID already used with different params")
	// ErrEnqueueFailed: the command was stored but its queue message could
	// not be sent; it is durably marked for the reconciler, which will
	// enqueue it (the command is accepted and Result.ID is valid).
	ErrEnqueueFailed = errors.New("cmdq: enqueue failed")
	// ErrNotAccepted: the command was stored but neither enqueued nor marked
	// for the reconciler (storage failed for both), so nothing guarantees it
	// will run: it is not accepted. Issue it again with the same ID
	// (Result.ID): a re-issue of a pending, never-started command enqueues
	// it. The Client also retries the enqueue in the background while the
	// process lives (Config.EnqueueRetry). The error wraps the causes.
	ErrNotAccepted = errors.New("cmdq: command stored but not accepted (neither enqueued nor marked for the reconciler)")
	// ErrInvalidUnique: a unique key that is empty or longer than
	// MaxUniqueKeyLength, a unique window outside MinUniqueWindow ..
	// MaxUniqueWindow, or a unique key given together with an ID. Nothing
	// is stored; the HTTP API answers 400.
	ErrInvalidUnique = errors.New("cmdq: invalid unique key or window")
)

// Sentinel errors of registering and running handlers (test with
// errors.Is).
var (
	// ErrInvalidOptions: CommandOptions or HandlerOptions break a rule; the
	// error lists every problem.
	ErrInvalidOptions = errors.New("cmdq: invalid command options")
	// ErrDuplicateType: a handler is already registered for the command
	// type (or the type is already declared, for Declare).
	ErrDuplicateType = errors.New("cmdq: command type already registered")
	// ErrInvalidStep: Run.CompleteStep got a step number below 1.
	ErrInvalidStep = errors.New("cmdq: invalid step")
	// ErrSuperseded: the attempt is over while its handler still runs: the
	// command finished (completed, poisoned, discarded or cancelled) elsewhere, or
	// another delivery of it took it over. Run.CompleteStep returns an
	// error wrapping it (the step is not recorded) and the handler's
	// context is cancelled: return. Nothing more is recorded for the
	// attempt, whatever the handler returns.
	ErrSuperseded = errors.New("cmdq: attempt superseded: the command finished elsewhere or another delivery took it over")
	// ErrCancelled: the command was cancelled while its handler ran
	// (cmdq.Client.Cancel). The handler's context is cancelled with a
	// cause wrapping it and ErrSuperseded (context.Cause): return. Nothing
	// more is recorded for the attempt, whatever the handler returns.
	ErrCancelled = errors.New("cmdq: command cancelled")
	// ErrOutputTooLarge: Run.SetOutput's value encodes to more than
	// MaxOutputBytes of JSON (or does not fit in the command's row beside
	// parameters near the largest). SetOutput returns an error wrapping
	// it, and the attempt fails with it even if the handler returns nil
	// (it is retried, as any failure).
	ErrOutputTooLarge = errors.New("cmdq: output too large")
	// ErrInvalidOutput: Run.SetOutput's value does not encode to JSON.
	// SetOutput returns an error wrapping it, and the attempt fails with
	// it even if the handler returns nil.
	ErrInvalidOutput = errors.New("cmdq: output is not JSON-encodable")
	// ErrNoHandlers: Run or RunFor of a Client without a registered
	// handler.
	ErrNoHandlers = errors.New("cmdq: no handlers registered")
	// ErrStorageUnavailable: storage did not answer the readiness probe
	// (Client.CheckStorage) in time.
	ErrStorageUnavailable = errors.New("cmdq: storage is not answering")
)
