package handlers

import "time"

// RetryPolicy computes the delay before a failed attempt is retried:
// Base × Multiplier^(attempt-1), capped at Max, then spread by ±Jitter.
// The zero value uses the defaults.
type RetryPolicy struct {
	// Base is the delay after the first failed attempt (default 1 s).
	Base time.Duration
	// Max caps the delay before jitter (default 5 min; at most 7 days).
	Max time.Duration
	// Multiplier grows the delay per attempt (default 2; at least 1).
	Multiplier float64
	// Jitter is the relative spread: the delay is multiplied by a random
	// factor in [1-Jitter, 1+Jitter] (default 0.2; 0..1; set NoJitter for none).
	Jitter float64
	// Rand returns a number in [0,1) (default math/rand/v2.Float64); set it
	// for deterministic tests.
	Rand func() float64
}

// NoJitter as RetryPolicy.Jitter disables jitter.
const NoJitter = -1.0

// Delay returns the delay after failed attempt n (1 for the first).
func (p RetryPolicy) Delay(attempt int) time.Duration { panic("TODO") }
