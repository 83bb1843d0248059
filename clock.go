package cmdq

import (
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/clock"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// Clock is the time a Client runs on (Config.Clock): the times it stores
// (issue, events, run-at), the retry delays, leases, scheduled commands
// and periodic ticks it counts, and its processor's waits for them.
// cmdqtest.Clock is one for tests: it moves ahead on demand, so that a
// retry, a scheduled command or a periodic tick is due without waiting.
// A Clock must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its C once d has
	// passed on the clock, as time.NewTimer does.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has passed on the
	// clock, as time.AfterFunc does; the Timer's C returns nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer of a Clock, with time.Timer's methods.
type Timer interface {
	// C returns the channel the timer sends the time on (nil for a
	// Clock.AfterFunc timer).
	C() <-chan time.Time
	// Stop stops the timer; false if it had fired or was stopped.
	Stop() bool
	// Reset makes the timer fire d from now on its clock; false if it
	// had fired or was stopped.
	Reset(d time.Duration) bool
}

// engineClock is a Config.Clock as the engine's clock.Clock.
type engineClock struct{ c Clock }

func (e engineClock) Now() time.Time                       { return e.c.Now() }
func (e engineClock) NewTimer(d time.Duration) clock.Timer { return e.c.NewTimer(d) }
func (e engineClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return e.c.AfterFunc(d, f)
}

// engineClockOf returns c as the engine's clock: nil (the engine's
// default, the system clock) when c is nil.
func engineClockOf(c Clock) clock.Clock {
	if c == nil {
		return nil
	}
	return engineClock{c}
}

// now returns the current time on the Client's clock (tuning's Now, then
// Config.Clock, then the system clock).
func (c *Client) now() time.Time {
	if f := c.tune.Now; f != nil {
		return f()
	}
	if c.cfg.Clock != nil {
		return c.cfg.Clock.Now()
	}
	return time.Now()
}

// serviceClock is the Client's clock on a store whose service has a
// clock of its own (storage.ServerClock: Azure Storage's Date header):
// this machine's time moved by the service's offset from it (its lower
// bound), once the offset passes serviceClockMin (below it, the Date header's whole
// seconds say nothing sure, and the skew the engine allows everywhere,
// model.MaxClockSkew, covers it). Durations are this machine's.
type serviceClock struct {
	st    storage.Store
	local time.Duration // tests: this machine's clock as that far ahead (tuning.LocalClockOffset)
}

// serviceClockMin is the smallest offset a serviceClock applies: 1 s.
const serviceClockMin = time.Second

func (s serviceClock) offset() time.Duration {
	o, u, ok := storage.ClockOffset(s.st)
	if !ok || o.Abs() <= serviceClockMin {
		return 0
	}
	// The offset's lower bound: the time this gives is never ahead of
	// the service's, so nothing starts early by it; it may be behind by
	// the estimate's width (about a round trip once a few responses have
	// narrowed it).
	return o - u
}

func (s serviceClock) Now() time.Time { return time.Now().Add(s.local + s.offset()) }

// NewTimer and AfterFunc are the system clock's (durations are this
// machine's): clock.Real's timers have Timer's methods.
func (s serviceClock) NewTimer(d time.Duration) Timer { return clock.Real.NewTimer(d) }
func (s serviceClock) AfterFunc(d time.Duration, f func()) Timer {
	return clock.Real.AfterFunc(d, f)
}

// clockOffset returns the storage service's clock offset from this
// machine's as the Client sees it, and whether it is past the skew the
// engine allows (model.MaxClockSkew, 2 s).
func (c *Client) clockOffset() (offset time.Duration, skewed bool) {
	o, _, ok := storage.ClockOffset(c.st)
	if !ok {
		return 0, false
	}
	return o, o.Abs() > model.MaxClockSkew
}
