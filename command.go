package cmdq

import (
	"context"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
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

// LimitKeyer is a Command whose values name a limit key: the tenant, the
// customer or the account whose commands share a per-key limit
// (CommandOptions.GlobalConcurrencyPerKey, CommandOptions.RatePerKey).
// LimitKey is called on the decoded parameters of each delivery before
// its handler starts; "" means no per-key limit for that command. Any
// string is a key (it is stored hashed, with its first 256 characters for
// display).
type LimitKeyer interface {
	Command
	LimitKey() string
}

// CommandOptions is what a command type declares about itself (see
// CommandWithOptions): its queue and how its handler runs. Zero fields take
// the defaults.
type CommandOptions struct {
	// Queue is the logical queue the type is routed to. Defaults to
	// DefaultQueue ("commands"). Give slow commands their own queue so they
	// do not share a lease with fast ones.
	Queue string
	// PoisonCeiling is the most attempts (dequeues) before the command is
	// poisoned without running. Defaults to DefaultPoisonCeiling (5).
	PoisonCeiling int
	// Lease is the visibility timeout taken on dequeue and renewed at half
	// while the handler runs, 1 s to 7 days. Defaults to DefaultLease
	// (30 s).
	Lease time.Duration
	// Timeout bounds one attempt: the handler's context ends after it.
	// Defaults to DefaultTimeoutLeases (10) × Lease.
	Timeout time.Duration
	// Retention is how long the type's final commands are kept; its zero
	// fields take Config.Retention (by default 7 days for completed and 30
	// days for discarded commands).
	Retention Retention
	// MaxConcurrency, when above 0, is the most handlers of the type one
	// processor runs at once (within Config.Concurrency): the other types
	// keep the rest of the handler slots. A message of the type that waits
	// for one of its slots holds no handler slot and is released (made
	// visible again) when its lease would need renewing. It caps one
	// process; to cap the type across processes, route it to its own queue
	// and run a known number of processes on it (docs/processor.md,
	// "Per-type concurrency"). Defaults to 0: no cap.
	MaxConcurrency int
	// GlobalConcurrency, when above 0, is the most handlers of the type
	// that run at once across every process on every machine sharing the
	// store and Config.Prefix (1 to MaxGlobalConcurrency, 1000). Each run
	// holds a permit (a table row whose expiry follows the message's
	// lease, so a killed process's permit frees itself within a lease and
	// 2 s); a message that finds every permit held waits for one holding
	// no handler slot and spending no attempt. It costs two storage calls
	// per command (take and give back) and one per lease renewal
	// (docs/processor.md, "Global concurrency"). Defaults to 0: no limit.
	GlobalConcurrency int
	// MaxDeferrals is how many deferrals (a handler returning
	// RetryAfter) since the command was issued or last requeued do not
	// count toward its poison ceiling; later ones count as failed
	// attempts. 1 to MaxDeferralsLimit (10000). Defaults to
	// DefaultMaxDeferrals (20).
	MaxDeferrals int
	// Rate, when not zero, is the most handler starts of the type in any
	// window of Rate.Per across every process on every machine sharing the
	// store and Config.Prefix, such as Rate{Limit: 10, Per: time.Second}.
	// A message that finds no token free waits for the next holding no
	// handler slot and spending no attempt. It costs one or two storage
	// calls per grant of tokens, a grant serving up to a tenth of Limit
	// messages waiting at once (docs/processor.md, "Rate limits").
	// Defaults to the zero Rate: no rate limit.
	Rate Rate
	// GlobalConcurrencyPerKey, when above 0, is the most handlers of the
	// type that run at once for one limit key (a tenant, a customer)
	// across every process sharing the store and Config.Prefix (1 to
	// MaxGlobalConcurrency, 1000). The key is the command's LimitKey
	// method's answer (the type must be a LimitKeyer; a command whose key
	// is "" is not limited per key). It holds its own permit, beside the
	// type's (GlobalConcurrency) when the type has both, and costs what a
	// type-wide permit costs, plus a point read of the command when its
	// message does not carry its parameters (docs/processor.md, "Per-key
	// limits"). Defaults to 0: no per-key limit.
	GlobalConcurrencyPerKey int
	// RatePerKey, when not zero, is the most handler starts of the type in
	// any window of RatePerKey.Per for one limit key (the command's
	// LimitKey method, as for GlobalConcurrencyPerKey), across every
	// process sharing the store and Config.Prefix: one ledger per key,
	// kept as the type's Rate keeps its own. Defaults to the zero Rate: no
	// per-key rate limit.
	RatePerKey Rate
}

// Defaults of CommandOptions and of the storage names.
const (
	// DefaultPrefix starts every storage name of a Client that sets no
	// Config.Prefix: "cmdq" (queue "cmdq-commands", tables "cmdqcommands"
	// and "cmdqpoison").
	DefaultPrefix = model.DefaultPrefix
	// DefaultQueue is the logical queue of a command type that declares
	// none: "commands".
	DefaultQueue = model.DefaultQueue
	// DefaultPoisonCeiling is the most attempts (dequeues) before a command
	// is poisoned: 5.
	DefaultPoisonCeiling = model.DefaultPoisonCeiling
	// DefaultLease is the message visibility timeout while a handler runs:
	// 30 s; the processor renews it at half.
	DefaultLease = model.DefaultLease
	// DefaultTimeoutLeases: the default Timeout of one attempt is this many
	// leases (10).
	DefaultTimeoutLeases = model.DefaultTimeoutLeases
	// DefaultMaxDeferrals is how many deferrals (RetryAfter) of a command
	// do not count toward its poison ceiling: 20.
	DefaultMaxDeferrals = model.DefaultMaxDeferrals
	// MaxDeferralsLimit is the largest MaxDeferrals: 10000.
	MaxDeferralsLimit = model.MaxDeferralsLimit
	// MaxTypeLength is the longest command type name, in characters (128).
	MaxTypeLength = model.MaxTypeLength
	// MaxGlobalConcurrency is the highest GlobalConcurrency a type may
	// set: 1000.
	MaxGlobalConcurrency = model.MaxGlobalConcurrency
	// MaxQueueLength is the longest logical queue name, in characters
	// (61: the storage queue "<prefix>-<queue>" must fit 63).
	MaxQueueLength = model.MaxQueueLength
)

// Retention says how long final commands are kept before they are removed
// (docs/lifecycle.md, "Retention"): Config.Retention for every type,
// CommandOptions.Retention and HandlerOptions.Retention for one. Poisoned
// commands are always kept until an operator requeues or discards them.
// Removal is done by the processors' daily sweep, so a command may outlive
// its retention by up to a day or two (the sweep's schedule, the issue
// window).
type Retention struct {
	// Completed is how long a completed command is kept after it
	// completed. 0 = the default (DefaultCompletedRetention, 7 days);
	// KeepForever = never removed.
	Completed time.Duration
	// Discarded is how long a discarded or cancelled command is kept after
	// it was discarded or cancelled. 0 = the default
	// (DefaultDiscardedRetention, 30 days); KeepForever = never removed.
	Discarded time.Duration
}

// Retention defaults.
const (
	// DefaultCompletedRetention is Retention.Completed's default: 7 days.
	DefaultCompletedRetention = model.DefaultCompletedRetention
	// DefaultDiscardedRetention is Retention.Discarded's default: 30 days.
	DefaultDiscardedRetention = model.DefaultDiscardedRetention
	// KeepForever as a Retention field keeps those commands forever (-1).
	KeepForever = model.KeepForever
)

// RetryPolicy computes the delay before a failed attempt is retried:
// Base × Multiplier^(attempt-1), capped at Max, then multiplied by a random
// factor in [1-Jitter, 1+Jitter], and never above MaxDelay. The zero value
// uses the defaults: from 1 s, doubling, capped at 5 minutes, ±20 %.
type RetryPolicy struct {
	// Base is the delay after the first failed attempt (default 1 s).
	Base time.Duration
	// Max caps the delay before jitter (default 5 min; at most 7 days).
	Max time.Duration
	// Multiplier grows the delay per attempt (default 2; at least 1).
	Multiplier float64
	// Jitter is the relative spread, 0..1 (default 0.2; NoJitter for none).
	Jitter float64
	// Rand returns a number in [0,1) (default math/rand/v2.Float64); set it
	// for deterministic tests.
	Rand func() float64
}

// Delay returns the delay before the attempt after failed attempt n (from
// 1) under p.
func (p RetryPolicy) Delay(attempt int) time.Duration { return model.RetryPolicy(p).Delay(attempt) }

// Limits of RetryPolicy.
const (
	// MaxDelay is the longest retry delay, lease or visibility delay: 7
	// days, the longest time a queue message can be kept invisible (Azure's
	// limit).
	MaxDelay = model.MaxDelay
	// NoJitter as RetryPolicy.Jitter disables jitter (-1).
	NoJitter = model.NoJitter
)

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
	// waits for one of its slots holds no handler slot and keeps its lease
	// (renewed), so the wait spends no attempt however long it is. It caps one
	// process; to cap the type across processes, give it its own Queue and
	// run a known number of processes on it (docs/processor.md). Defaults
	// to the declared cap (CommandOptions.MaxConcurrency), else 0: no cap.
	MaxConcurrency int
	// GlobalConcurrency, when above 0, is the most handlers of the type
	// that run at once across every process sharing the store and prefix
	// (see CommandOptions.GlobalConcurrency; Config.GlobalConcurrency
	// overrides it per type). Defaults to the declared limit, else 0: no
	// limit.
	GlobalConcurrency int
	// MaxDeferrals is how many deferrals (a handler returning
	// RetryAfter) since the command was issued or last requeued do not
	// count toward its poison ceiling; later ones count as failed
	// attempts. 1 to MaxDeferralsLimit (10000). Defaults to the declared
	// number (CommandOptions.MaxDeferrals), else DefaultMaxDeferrals (20).
	MaxDeferrals int
	// Rate, when not zero, is the most handler starts of the type in any
	// window of Rate.Per across every process sharing the store and
	// prefix (see CommandOptions.Rate; Config.Rates overrides it per
	// type). Defaults to the declared rate, else the zero Rate: no rate
	// limit.
	Rate Rate
	// GlobalConcurrencyPerKey, when above 0, is the most handlers of the
	// type that run at once for one limit key (the command's LimitKey
	// method) across every process sharing the store and prefix (see
	// CommandOptions.GlobalConcurrencyPerKey). Defaults to the declared
	// limit, else 0: no per-key limit.
	GlobalConcurrencyPerKey int
	// RatePerKey, when not zero, is the most handler starts of the type in
	// any window of RatePerKey.Per for one limit key (see
	// CommandOptions.RatePerKey). Defaults to the declared rate, else the
	// zero Rate: no per-key rate limit.
	RatePerKey Rate
	// Middleware wraps this type's handler, inside the Client's
	// middleware (Config.Middleware, Client.Use): the first is the
	// outermost (see Middleware). Defaults to none.
	Middleware []Middleware
}

// Handler handles one command of type T: cmd is its decoded parameters,
// a is the attempt (its number, its completed steps, its output). Return
// nil for success, an error to retry (after the type's retry delay, until
// the poison ceiling), RetryAfter(d, err) to retry after d without
// spending an attempt, or Permanent(err) to poison the command at once. A
// panic is a failed attempt with its stack recorded.
type Handler[T Command] func(ctx context.Context, cmd T, a *Attempt) error

// Attempt is one attempt of one command, handed to its handler: what it
// runs, its number, its completed steps and its output.
type Attempt struct{ r *registry.Attempt }

// ID returns the command ID.
func (a *Attempt) ID() string { return a.r.ID() }

// Type returns the command type.
func (a *Attempt) Type() string { return a.r.Type() }

// Number returns the attempt's number: 1 for the first, counting the
// deliveries since the command was issued or last requeued.
func (a *Attempt) Number() int { return a.r.Number() }

// Queue returns the command's logical queue.
func (a *Attempt) Queue() string { return a.r.Queue() }

// CorrelationID returns the command's correlation ID ("" = none).
func (a *Attempt) CorrelationID() string { return a.r.CorrelationID() }

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
func (a *Attempt) SetOutput(v any) error { return a.r.SetOutput(v) }

// LastStep returns the last completed step (0 = none): a rerun skips the
// steps up to it, so multi-step work resumes where it stopped.
func (a *Attempt) LastStep() int { return a.r.LastStep() }

// CompleteStep records step n (from 1) as completed, with an optional
// note, before it returns: a step_completed event (one table batch). A
// step may be recorded again (a rerun repeating it) but LastStep never
// goes down. Errors: ErrInvalidStep for n < 1; ErrSuperseded when the
// command finished elsewhere or another delivery took it over (return);
// a storage error (the step is not counted).
func (a *Attempt) CompleteStep(ctx context.Context, n int, note string) error {
	return a.r.CompleteStep(ctx, n, note)
}

// Permanent marks a handler's error as permanent: the command is poisoned
// at once instead of retried. Permanent(nil) is nil.
func Permanent(err error) error { return registry.Permanent(err) }

// IsPermanent reports whether err is, or wraps, an error made by
// Permanent (or a decode error of the command's parameters): a handler
// returning it has its command poisoned at once.
func IsPermanent(err error) bool { return registry.IsPermanent(err) }

// RetryAfter defers the command: returned by a handler (say, when a
// downstream answered 429 with Retry-After), the command is retried after
// d instead of its retry delay, recorded as a deferred event (with the
// error, and the retry time in RunAt), and the attempt does not count
// toward its poison ceiling. That holds for the type's first
// MaxDeferrals deferrals (HandlerOptions.MaxDeferrals, default 20) since
// the command was issued or last requeued; after them a deferral counts
// as a failed attempt (a failed event that says so; still retried after
// d), so a command that defers forever ends poisoned. d is at most
// MaxDelay (7 days; longer is cut to it); d <= 0 retries after the type's
// retry delay (RetryPolicy), still as a deferral. Permanent wins over
// it, whichever wraps the other.
//
// The error wraps err, so errors.Is and errors.As see through it; err
// may be nil (the deferred event's error then only says "retry after
// d"). IsRetryAfter tells a RetryAfter error and its d.
func RetryAfter(d time.Duration, err error) error { return registry.RetryAfter(d, err) }

// IsRetryAfter reports whether err is, or wraps, an error made by
// RetryAfter, and its delay d (as given, before any cut).
func IsRetryAfter(err error) (d time.Duration, ok bool) { return registry.IsRetryAfter(err) }

// ValidateType checks a command type name: 1-128 characters, a letter
// first, then letters, digits, '.', '_' or '-'. The error wraps
// ErrInvalidType and says what to send instead.
func ValidateType(name string) error { return model.ValidateType(name) }

// ValidateQueue checks a logical queue name: 1-61 lowercase letters,
// digits and single hyphens, starting and ending with a letter or digit.
// The error wraps ErrInvalidOptions.
func ValidateQueue(name string) error { return model.ValidateQueue(name) }
