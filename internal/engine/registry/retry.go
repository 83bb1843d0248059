package registry

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

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
// factor in [1-Jitter, 1+Jitter], and never above storage.MaxVisibility.
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
	if p.Max < p.Base || p.Max > storage.MaxVisibility {
		errs = append(errs, fmt.Errorf("option Retry.Max %s: must be between Base (%s) and %s (0 = default %s)", p.Max, p.Base, storage.MaxVisibility, DefaultRetryMax))
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
	if d > float64(storage.MaxVisibility) {
		d = float64(storage.MaxVisibility)
	}
	if d < 0 {
		d = 0
	}
	return time.Duration(d)
}
