package model

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

// Defaults of the storage names and of CommandOptions (documented in package cmdq).
const (
	DefaultPrefix        = "cmdq"
	DefaultQueue         = "commands"
	DefaultPoisonCeiling = 5
	DefaultLease         = 30 * time.Second
	DefaultTimeoutLeases = 10
	DefaultMaxDeferrals  = 20
)

// CommandOptions is the engine's copy of cmdq.CommandOptions (documented there).
type CommandOptions struct {
	Queue             string
	PoisonCeiling     int
	Lease             time.Duration
	Timeout           time.Duration
	Retention         Retention
	MaxConcurrency    int
	GlobalConcurrency int
	MaxDeferrals      int
	Rate              Rate
	// Per limit key (the command's LimitKey method): documented in
	// package cmdq.
	GlobalConcurrencyPerKey int
	RatePerKey              Rate
}

// Retention is the engine's copy of cmdq.Retention (documented there).
type Retention struct {
	Completed time.Duration
	Discarded time.Duration
}

// Retention defaults (documented in package cmdq).
const (
	DefaultCompletedRetention               = 7 * 24 * time.Hour
	DefaultDiscardedRetention               = 30 * 24 * time.Hour
	KeepForever               time.Duration = -1
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
	if o.MaxDeferrals == 0 {
		o.MaxDeferrals = DefaultMaxDeferrals
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
	if o.GlobalConcurrency == 0 {
		o.GlobalConcurrency = base.GlobalConcurrency
	}
	if o.MaxDeferrals == 0 {
		o.MaxDeferrals = base.MaxDeferrals
	}
	if o.Rate.IsZero() {
		o.Rate = base.Rate
	}
	if o.GlobalConcurrencyPerKey == 0 {
		o.GlobalConcurrencyPerKey = base.GlobalConcurrencyPerKey
	}
	if o.RatePerKey.IsZero() {
		o.RatePerKey = base.RatePerKey
	}
	return o
}

// MaxDeferralsLimit is documented in package cmdq.
const MaxDeferralsLimit = 10000

// maxLease is the longest lease a type may set (CommandOptions.Lease).
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
	if err := ValidateGlobalConcurrency(o.GlobalConcurrency); err != nil {
		errs = append(errs, fmt.Errorf("option GlobalConcurrency: %w", err))
	}
	if o.MaxDeferrals < 0 || o.MaxDeferrals > MaxDeferralsLimit {
		errs = append(errs, fmt.Errorf("option MaxDeferrals %d: must be between 1 and %d (0 = default %d)", o.MaxDeferrals, MaxDeferralsLimit, DefaultMaxDeferrals))
	}
	if err := ValidateRate(o.Rate); err != nil {
		errs = append(errs, fmt.Errorf("option Rate %w", err))
	}
	if err := ValidateGlobalConcurrency(o.GlobalConcurrencyPerKey); err != nil {
		errs = append(errs, fmt.Errorf("option GlobalConcurrencyPerKey: %w", err))
	}
	if err := ValidateRate(o.RatePerKey); err != nil {
		errs = append(errs, fmt.Errorf("option RatePerKey %w", err))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
}

// MaxGlobalConcurrency is documented in package cmdq.
const MaxGlobalConcurrency = 1000

// ValidateGlobalConcurrency checks a global concurrency limit: 0 (none)
// to MaxGlobalConcurrency.
func ValidateGlobalConcurrency(n int) error {
	if n < 0 || n > MaxGlobalConcurrency {
		return fmt.Errorf("%d: must be 1 to %d handlers across every process (0 = no limit)", n, MaxGlobalConcurrency)
	}
	return nil
}

// MaxQueueLength is documented in package cmdq.
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

// MaxTypeLength is documented in package cmdq.
const MaxTypeLength = 128

// ValidateType checks a command type name: 1-128 characters, a letter first,
// then letters, digits, '.', '_' or '-'. The error wraps ErrInvalidType.
func ValidateType(name string) error {
	if !validType(name) {
		return fmt.Errorf("%w: %q; a type name is 1-%d characters: a letter, then letters, digits, '.', '_' or '-' (e.g. \"billing.ChargeCard\")", ErrInvalidType, name, MaxTypeLength)
	}
	return nil
}

// validType reports whether name matches ^[A-Za-z][A-Za-z0-9._-]{0,127}$
// (a loop, not a regular expression: every delivery checks its type).
func validType(name string) bool {
	if len(name) == 0 || len(name) > MaxTypeLength {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
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

// Defaults of RetryPolicy (documented in package cmdq).
const (
	DefaultRetryBase       = time.Second
	DefaultRetryMax        = 5 * time.Minute
	DefaultRetryMultiplier = 2.0
	DefaultRetryJitter     = 0.2
)

// RetryPolicy is the engine's copy of cmdq.RetryPolicy (documented there).
type RetryPolicy struct {
	Base       time.Duration
	Max        time.Duration
	Multiplier float64
	Jitter     float64
	Rand       func() float64
}

// MaxDelay is documented in package cmdq.
const MaxDelay = 7 * 24 * time.Hour

// NoJitter is documented in package cmdq.
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

// The issue window (documented in package cmdq).
const (
	IssueWindowPastDays   = 2
	IssueWindowFutureDays = 1
)
