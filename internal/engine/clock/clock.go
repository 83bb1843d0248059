// Package clock is the time the engine runs on: the system clock in
// production (Real), a test clock that a test moves (cmdqtest.Clock,
// through cmdq.Config.Clock). Every engine part that compares a time with
// one written by another part (a run-at time, a lease's end, a visibility)
// or waits for a point in time reads it here, so that a test clock moved
// ahead makes a retry, a scheduled command or a periodic tick due at once.
package clock

import "time"

// Clock tells the time and makes timers on it. Real is the system clock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends on C once d has passed on the
	// clock (time.NewTimer).
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has passed on the
	// clock (time.AfterFunc); the Timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer of a Clock (time.Timer's methods).
type Timer interface {
	// C returns the channel the time is sent on (nil for AfterFunc).
	C() <-chan time.Time
	// Stop stops the timer (time.Timer.Stop).
	Stop() bool
	// Reset makes the timer fire d from now on its clock (time.Timer.Reset).
	Reset(d time.Duration) bool
}

// Real is the system clock (time.Now, time.NewTimer, time.AfterFunc).
var Real Clock = system{}

type system struct{}

func (system) Now() time.Time                 { return time.Now() }
func (system) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }
func (system) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// Or returns c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

// Since returns the time passed on c since t.
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// Until returns the time on c until t.
func Until(c Clock, t time.Time) time.Duration { return t.Sub(c.Now()) }
