package cmdqtype

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// DefaultWorker returns the name of a processor that sets none:
// "<hostname>-<pid>" ("worker-<pid>" when the host has no name). It names
// the processor in events, logs and heartbeats, and `cmdq serve` and
// `cmdq worker` make it the tracing resource's service.instance.id.
func DefaultWorker() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "worker"
	}
	return h + "-" + strconv.Itoa(os.Getpid())
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
	// fields take cmdq.Config.Retention (by default
	// 7 days for completed and 30 days for discarded commands).
	Retention Retention
	// MaxConcurrency, when above 0, is the most handlers of the type one
	// processor runs at once (within cmdq.Config.Concurrency): the other
	// types keep the rest of the handler slots. A message of the type
	// that waits for one of its slots holds no handler slot and is
	// released (made visible again) when its lease would need renewing.
	// It caps one process; to cap the type across processes, route it to
	// its own queue and run a known number of processes on it
	// (docs/processor.md, "Per-type concurrency"). Defaults to 0: no cap.
	MaxConcurrency int
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
	// Discarded is how long a discarded or cancelled command is kept after
	// it was discarded or cancelled. 0 = the default
	// (DefaultDiscardedRetention, 30 days);
	// KeepForever = never removed.
	Discarded time.Duration
}

// Retention defaults.
const (
	// DefaultCompletedRetention is Retention.Completed's default: 7 days.
	DefaultCompletedRetention = 7 * 24 * time.Hour
	// DefaultDiscardedRetention is Retention.Discarded's default: 30 days.
	DefaultDiscardedRetention = 30 * 24 * time.Hour
	// KeepForever as a Retention field keeps those commands forever.
	KeepForever time.Duration = -1
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
	if o.MaxConcurrency == 0 {
		o.MaxConcurrency = base.MaxConcurrency
	}
	return o
}

// maxLease is the longest Lease: the longest visibility timeout (7 days).
const maxLease = MaxDelay

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
	if o.MaxConcurrency < 0 {
		errs = append(errs, fmt.Errorf("option MaxConcurrency %d: must not be negative (0 = no cap)", o.MaxConcurrency))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
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

// NormalizeID returns id in the lowercase canonical form when it is a
// canonical UUID written in upper or mixed case, and id unchanged
// otherwise (ValidateID then says what is wrong with it). The HTTP API,
// the console and the CLI take command IDs through it: one rule, upper
// case accepted and meaning the same command.
func NormalizeID(id string) string {
	if len(id) != 36 {
		return id
	}
	low := strings.ToLower(id)
	if low == id {
		return id
	}
	if u, err := uuid.Parse(low); err != nil || u.String() != low {
		return id
	}
	return low
}

// Defaults of RetryPolicy.
const (
	// DefaultRetryBase is the delay after the first failed attempt.
	DefaultRetryBase = time.Second
	// DefaultRetryMax caps the delay (before jitter).
	DefaultRetryMax = 5 * time.Minute
	// DefaultRetryMultiplier grows the delay per attempt.
	DefaultRetryMultiplier = 2.0
	// DefaultRetryJitter is the relative spread (±20 %).
	DefaultRetryJitter = 0.2
)

// RetryPolicy computes the delay before a failed attempt is retried:
// Base × Multiplier^(attempt-1), capped at Max, then multiplied by a random
// factor in [1-Jitter, 1+Jitter], and never above MaxDelay.
// The zero value uses the defaults.
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

// MaxDelay is the longest retry delay, lease or visibility delay: 7 days,
// the longest time a queue message can be kept invisible (Azure's limit,
// storage.MaxVisibility).
const MaxDelay = 7 * 24 * time.Hour

// NoJitter as RetryPolicy.Jitter disables jitter.
const NoJitter = -1.0

// WithDefaults returns p with zero fields set to their defaults.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.Base == 0 {
		p.Base = DefaultRetryBase
	}
	if p.Max == 0 {
		p.Max = DefaultRetryMax
	}
	if p.Multiplier == 0 {
		p.Multiplier = DefaultRetryMultiplier
	}
	if p.Jitter == 0 {
		p.Jitter = DefaultRetryJitter
	}
	if p.Rand == nil {
		p.Rand = rand.Float64
	}
	return p
}

// Validate reports every problem with p (after defaults).
func (p RetryPolicy) Validate() error {
	p = p.WithDefaults()
	var errs []error
	if p.Base < 0 {
		errs = append(errs, fmt.Errorf("option Retry.Base %s: must not be negative (0 = default %s)", p.Base, DefaultRetryBase))
	}
	if p.Max < p.Base || p.Max > MaxDelay {
		errs = append(errs, fmt.Errorf("option Retry.Max %s: must be between Base (%s) and %s (0 = default %s)", p.Max, p.Base, MaxDelay, DefaultRetryMax))
	}
	if p.Multiplier < 1 || math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0) {
		errs = append(errs, fmt.Errorf("option Retry.Multiplier %g: must be at least 1 (0 = default %g)", p.Multiplier, DefaultRetryMultiplier))
	}
	if p.Jitter != NoJitter && (p.Jitter < 0 || p.Jitter > 1 || math.IsNaN(p.Jitter)) {
		errs = append(errs, fmt.Errorf("option Retry.Jitter %g: must be within 0..1, or NoJitter (0 = default %g)", p.Jitter, DefaultRetryJitter))
	}
	return errors.Join(errs...)
}

// Delay returns the delay after failed attempt n (1 for the first; n < 1
// counts as 1).
func (p RetryPolicy) Delay(attempt int) time.Duration {
	p = p.WithDefaults()
	if attempt < 1 {
		attempt = 1
	}
	d := float64(p.Base) * math.Pow(p.Multiplier, float64(attempt-1))
	if d > float64(p.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		d = float64(p.Max)
	}
	if p.Jitter > 0 {
		d *= 1 - p.Jitter + 2*p.Jitter*p.Rand()
	}
	if d > float64(MaxDelay) {
		d = float64(MaxDelay)
	}
	if d < 0 {
		d = 0
	}
	return time.Duration(d)
}

// Issue window: a command ID that carries a time (a UUIDv7, or a day ID
// from cmdq.NewID) is accepted only when its day is at most
// IssueWindowPastDays (2) before today (UTC) and at most
// IssueWindowFutureDays (1) after it; other IDs are refused with an error
// wrapping ErrInvalidID and ErrIDOutsideWindow. Within the window, issuing
// the same ID again is always recognised as a re-issue (Result.Existing):
// day tables are dropped only once the window has passed (plus one day
// for clock skew between machines).
const (
	IssueWindowPastDays   = 2
	IssueWindowFutureDays = 1
)
