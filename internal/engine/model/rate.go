package model

import (
	"fmt"
	"time"
)

// Rate is the engine's copy of cmdq.Rate (documented there).
type Rate struct {
	Limit int
	Per   time.Duration
}

// IsZero reports whether r is the zero Rate: no rate limit.
func (r Rate) IsZero() bool { return r == Rate{} }

// String returns r as the --rate flag takes it: "10/1s".
func (r Rate) String() string { return fmt.Sprintf("%d/%s", r.Limit, r.Per) }

// MinRatePer is documented in package cmdq.
const MinRatePer = time.Millisecond

// MaxRatePer is documented in package cmdq.
const MaxRatePer = 366 * 24 * time.Hour

// ValidateRate checks a rate limit: the zero Rate (none), or a Limit of at
// least 1 per a Per of MinRatePer to MaxRatePer.
func ValidateRate(r Rate) error {
	if r.IsZero() {
		return nil
	}
	if r.Limit < 1 {
		return fmt.Errorf("%s: Limit %d must be at least 1 start per interval (leave the whole Rate zero for no rate limit)", r, r.Limit)
	}
	if r.Per < MinRatePer || r.Per > MaxRatePer {
		return fmt.Errorf("%s: Per %s must be an interval of %s to %s, such as time.Second", r, r.Per, MinRatePer, MaxRatePer)
	}
	return nil
}
