package azure

import (
	"testing"
	"time"
)

// TestServerClockEstimate: the bounds of Date-header samples narrow the
// offset to about a round trip, a sample that does not meet them (a
// clock stepped) starts again, and a service 5 minutes ahead is
// estimated within a second.
func TestServerClockEstimate(t *testing.T) {
	t.Parallel()
	var c serverClock
	if _, _, ok := c.offset(); ok {
		t.Fatal("an estimate before any response")
	}
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ahead := 5*time.Minute + 300*time.Millisecond // the service's clock minus ours
	// Responses 40 ms round trip, at local times spread over 3 s: the
	// service dates each at its own time, cut to the second.
	for i := range 30 {
		sent := t0.Add(time.Duration(i) * 97 * time.Millisecond)
		at := sent.Add(20 * time.Millisecond).Add(ahead) // the service's time when it answers
		c.sample(at.Truncate(time.Second), sent, sent.Add(40*time.Millisecond))
	}
	off, unc, ok := c.offset()
	if !ok || (off-ahead).Abs() > unc || unc > 60*time.Millisecond {
		t.Fatalf("estimate %s ± %s, want %s within a round trip", off, unc, ahead)
	}
	// Our clock steps 5 minutes ahead: the next sample starts again.
	sent := t0.Add(time.Hour)
	c.sample(sent.Add(20*time.Millisecond).Truncate(time.Second), sent.Add(5*time.Minute), sent.Add(5*time.Minute+40*time.Millisecond))
	if off, unc, _ := c.offset(); (off + 5*time.Minute).Abs() > unc+time.Second {
		t.Fatalf("after our clock stepped 5 min ahead: %s ± %s, want about -5m", off, unc)
	}
}
