// Package commands is the command side of cmdq: the Command interface, the
// routing and defaults a command type may declare (CommandOptions), the
// validation of command types and IDs, and the Issuer that stores a command
// and enqueues it.
//
// Most programs issue through the client of package cmdq, which routes
// every type it knows (registered or declared) without wiring; the Issuer
// is for programs that assemble the pieces themselves.
package issuer

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/engine/record"
)

// Command is a command's parameters. CommandType names the command type; it
// must be a constant for the type (it is called on the zero value) and match
// ValidateType. The value itself is JSON-encoded as the parameters.
type Command interface {
	CommandType() string
}

// CommandWithOptions is a Command whose type declares its routing and
// defaults: CommandOptions is called on the zero value (like CommandType)
// and must return the same options for every value of the type. Issuing
// routes the command to its Queue even in a process that has no handler for
// it; registering a handler takes its fields as the defaults under the
// handler's explicit options.
type CommandWithOptions interface {
	Command
	CommandOptions() CommandOptions
}

// Defaults of the storage names and of CommandOptions: the one home of each.
const (
	// DefaultPrefix starts every storage name of a client, an Issuer or a
	// processor that sets no prefix: queue "cmdq-commands", tables
	// "cmdqcommands" and "cmdqpoison".
	DefaultPrefix = "cmdq"
	// DefaultQueue is the logical queue of a command type that declares
	// none.
	DefaultQueue = "commands"
	// DefaultPoisonCeiling is the most attempts (dequeues) before a command
	// is poisoned (5).
	DefaultPoisonCeiling = 5
	// DefaultLease is the message visibility timeout while a handler runs
	// (30 s); the processor renews it at half.
	DefaultLease = 30 * time.Second
	// DefaultTimeoutLeases: the default Timeout of one attempt is this many
	// leases (10).
	DefaultTimeoutLeases = 10
)

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
	// while the handler runs, at least 1 s. Defaults to DefaultLease (30 s).
	Lease time.Duration
	// Timeout bounds one attempt: the handler's context ends after it.
	// Defaults to DefaultTimeoutLeases × Lease.
	Timeout time.Duration
	// Retention is how long the type's final commands are kept; its zero
	// fields take the processor's (processor.Config.Retention, by default
	// 7 days for completed and 30 days for discarded commands).
	Retention Retention
}

// Retention says how long final commands are kept before they are removed
// (docs/lifecycle.md, "Retention"). Poisoned commands are always kept until
// an operator requeues or discards them. Removal is done by the processors'
// daily sweep, so a command may outlive its retention by up to a day or
// two (the sweep's schedule, the issue window).
type Retention struct {
	// Completed is how long a completed command is kept after it
	// completed. 0 = the default (DefaultCompletedRetention, 7 days);
	// KeepForever = never removed.
	Completed time.Duration
	// Discarded is how long a discarded command is kept after it was
	// discarded. 0 = the default (DefaultDiscardedRetention, 30 days);
	// KeepForever = never removed.
	Discarded time.Duration
}

// Retention defaults.
const (
	// DefaultCompletedRetention is Retention.Completed's default: 7 days.
	DefaultCompletedRetention = record.DefaultCompletedRetention
	// DefaultDiscardedRetention is Retention.Discarded's default: 30 days.
	DefaultDiscardedRetention = record.DefaultDiscardedRetention
	// KeepForever as a Retention field keeps those commands forever.
	KeepForever = record.KeepForever
)

// Validate reports a negative retention other than KeepForever; the error
// wraps ErrInvalidOptions.
func (r Retention) Validate() error {
	var errs []error
	if r.Completed < 0 && r.Completed != KeepForever {
		errs = append(errs, fmt.Errorf("%w: Retention.Completed is %v; use a positive duration, 0 for the default or KeepForever", ErrInvalidOptions, r.Completed))
	}
	if r.Discarded < 0 && r.Discarded != KeepForever {
		errs = append(errs, fmt.Errorf("%w: Retention.Discarded is %v; use a positive duration, 0 for the default or KeepForever", ErrInvalidOptions, r.Discarded))
	}
	return errors.Join(errs...)
}

// WithDefaults returns o with every zero field set to its default.
func (o CommandOptions) WithDefaults() CommandOptions {
	if o.Queue == "" {
		o.Queue = DefaultQueue
	}
	if o.PoisonCeiling == 0 {
		o.PoisonCeiling = DefaultPoisonCeiling
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeoutLeases * o.Lease
	}
	return o
}

// Over returns o with its zero fields taken from base: explicit options
// over a type's declared ones.
func (o CommandOptions) Over(base CommandOptions) CommandOptions {
	if o.Queue == "" {
		o.Queue = base.Queue
	}
	if o.PoisonCeiling == 0 {
		o.PoisonCeiling = base.PoisonCeiling
	}
	if o.Lease == 0 {
		o.Lease = base.Lease
	}
	if o.Timeout == 0 {
		o.Timeout = base.Timeout
	}
	if o.Retention.Completed == 0 {
		o.Retention.Completed = base.Retention.Completed
	}
	if o.Retention.Discarded == 0 {
		o.Retention.Discarded = base.Retention.Discarded
	}
	return o
}

// maxLease is the longest Lease: the longest visibility timeout (7 days).
const maxLease = 7 * 24 * time.Hour

// Validate reports every problem with o (after defaults) at once; the error
// wraps ErrInvalidOptions. The queue's full storage name depends on the
// prefix, which the client and the processor check as well.
func (o CommandOptions) Validate() error {
	o = o.WithDefaults()
	var errs []error
	if err := ValidateQueue(o.Queue); err != nil {
		errs = append(errs, fmt.Errorf("option Queue: %w", err))
	}
	if o.PoisonCeiling < 1 {
		errs = append(errs, fmt.Errorf("option PoisonCeiling %d: must be at least 1 (0 = default %d)", o.PoisonCeiling, DefaultPoisonCeiling))
	}
	if o.Lease < time.Second || o.Lease > maxLease {
		errs = append(errs, fmt.Errorf("option Lease %s: must be between 1s and %s (0 = default %s)", o.Lease, maxLease, DefaultLease))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("option Timeout %s: must not be negative (0 = default %d × Lease)", o.Timeout, DefaultTimeoutLeases))
	}
	if err := o.Retention.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("option Retention: %w", err))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
}

// Declared returns the options cmd's type declares (CommandWithOptions),
// or the zero CommandOptions when it declares none.
func Declared(cmd Command) CommandOptions {
	if w, ok := cmd.(CommandWithOptions); ok {
		return w.CommandOptions()
	}
	return CommandOptions{}
}

// MaxQueueLength is the longest logical queue name (61: a storage queue
// name is at most 63 characters, "<prefix>-<queue>" with a prefix of at
// least one).
const MaxQueueLength = 61

var queueRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9]|-[a-z0-9])*$`)

// ValidateQueue checks a logical queue name: 1-61 lowercase letters, digits
// and single hyphens, starting and ending with a letter or digit (the
// storage queue "<prefix>-<queue>" must also fit 63 characters). The error
// wraps ErrInvalidOptions.
func ValidateQueue(name string) error {
	if len(name) > MaxQueueLength || !queueRE.MatchString(name) {
		return fmt.Errorf("%w: queue %q; use lowercase letters, digits and single hyphens, at most %d characters (the storage queue is \"<prefix>-%s\")", ErrInvalidOptions, name, MaxQueueLength, name)
	}
	return nil
}

// Sentinel errors callers branch on (test with errors.Is).
var (
	// ErrInvalidType: the command type name breaks the naming rule.
	ErrInvalidType = errors.New("commands: invalid command type")
	// ErrInvalidID: the command ID is not a canonical lowercase UUID.
	ErrInvalidID = errors.New("commands: invalid command ID")
	// ErrInvalidParams: the parameters are not valid JSON.
	ErrInvalidParams = errors.New("commands: invalid params")
	// ErrParamsTooLarge: the JSON parameters exceed the limit.
	ErrParamsTooLarge = errors.New("commands: params too large")
	// ErrIDConflict: a command with this ID exists with a different type,
	// different parameters or a different correlation ID.
	ErrIDConflict = errors.New("commands: command ID already used with different params")
	// ErrEnqueueFailed: the command was stored but its queue message could
	// not be sent; it is durably marked for the reconciler, which will
	// enqueue it (the command is accepted and Result.ID is valid).
	ErrEnqueueFailed = errors.New("commands: enqueue failed")
	// ErrNotAccepted: the command was stored but neither enqueued nor marked
	// for the reconciler (storage failed for both), so nothing guarantees it
	// will run: it is not accepted. Issue it again with the same ID
	// (Result.ID): a re-issue of a pending, never-started command enqueues
	// it. The Issuer also retries the enqueue in the background while the
	// process lives (Options.EnqueueRetry). The error wraps the causes.
	ErrNotAccepted = errors.New("commands: command stored but not accepted (neither enqueued nor marked for the reconciler)")
	// ErrInvalidOptions: CommandOptions (or handler options) break a rule;
	// the error lists every problem.
	ErrInvalidOptions = errors.New("commands: invalid command options")
)

// MaxTypeLength is the longest command type name, in characters.
const MaxTypeLength = 128

var typeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,127}$`)

// ValidateType checks a command type name: 1-128 characters, a letter first,
// then letters, digits, '.', '_' or '-'. The error wraps ErrInvalidType.
func ValidateType(name string) error {
	if !typeRE.MatchString(name) {
		return fmt.Errorf("%w: %q; a type name is 1-%d characters: a letter, then letters, digits, '.', '_' or '-' (e.g. \"billing.ChargeCard\")", ErrInvalidType, name, MaxTypeLength)
	}
	return nil
}

// ValidateID checks a command ID: a UUID in lowercase canonical form
// (8-4-4-4-12 hex digits). The error wraps ErrInvalidID.
func ValidateID(id string) error {
	u, err := uuid.Parse(id)
	if err != nil || u.String() != id {
		return fmt.Errorf("%w: %q; use a UUID in lowercase canonical form like \"7f0c2a9e-3b1d-4c8e-9f6a-1d2e3f4a5b6c\", or leave it empty to get a new one", ErrInvalidID, id)
	}
	return nil
}

// NewID returns a new random command ID (UUID version 4).
func NewID() string { return uuid.NewString() }

// NewDayID returns a new command ID that carries its issue day (the UTC
// day of now): a UUID version 8 whose first 16 bits are random, the next
// 16 the day (days since 1970-01-01) and the rest random (106 random bits
// in all). A command with such an ID (or a UUIDv7) is stored in its day's
// table, which retention drops whole once every command in it is past its
// retention (docs/lifecycle.md, "Retention").
func NewDayID(now time.Time) string { return record.NewDayID(now) }

// ErrIDOutsideWindow: an ID that carries a time (a UUIDv7, or a UUIDv8
// from NewDayID) whose day is outside the issue window (below). The
// Issuer's error wraps it and ErrInvalidID.
var ErrIDOutsideWindow = record.ErrOutsideWindow

// Issue window: a command ID that carries a time (a UUIDv7, or a UUIDv8
// from NewDayID) is accepted by the Issuer only when its day is at most
// IssueWindowPastDays (2) before today (UTC) and at most
// IssueWindowFutureDays (1) after it; other IDs are refused with an error
// wrapping ErrInvalidID. Within the window, issuing the same ID again is
// always recognised as a re-issue (Result.Existing).
const (
	IssueWindowPastDays   = record.IssueWindowPastDays
	IssueWindowFutureDays = record.IssueWindowFutureDays
)

// NewOrderedID returns a new time-ordered command ID (UUID version 7: IDs
// made later sort after earlier ones). It falls back to NewID if the
// system's random source fails.
func NewOrderedID() string {
	u, err := uuid.NewV7()
	if err != nil {
		return NewID()
	}
	return u.String()
}
