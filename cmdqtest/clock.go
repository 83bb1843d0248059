package cmdqtest

import (
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// Clock is a test clock (a cmdq.Clock): the system clock plus an offset
// that only grows. It runs with real time and jumps ahead when a test
// calls Advance (or AdvanceTo), and a test Client's kit calls it by itself
// when all that is left is waiting (New). Its timers fire when their time
// comes on it: by real time passing, or at once when Advance moves past
// them. Everything of a test Client runs on it: the embedded store's
// visibilities, the issue and event times, retry delays, leases,
// scheduled commands and periodic ticks. It is safe for concurrent use.
// The zero Clock is not usable: call NewClock.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
	timers map[*clockTimer]struct{} // pending
}

// NewClock returns a Clock at the system clock's time (offset 0).
func NewClock() *Clock {
	return &Clock{timers: map[*clockTimer]struct{}{}}
}

// Now returns the clock's time: the system clock's plus every Advance so
// far.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Ahead returns how far the clock is ahead of the system clock: the sum
// of every Advance so far.
func (c *Clock) Ahead() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// Advance moves the clock d ahead at once (d <= 0 does nothing), and
// fires every timer whose time that reaches: a command scheduled within d
// is due, a retry delay within d is over, a periodic tick within d comes,
// and a lease shorter than d has ended.
func (c *Clock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.offset += d
	now := time.Now().Add(c.offset)
	var due []*clockTimer
	for t := range c.timers {
		if wait := t.at.Sub(now); wait > 0 {
			t.real.Reset(wait)
		} else {
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		t.fire()
	}
}

// AdvanceTo moves the clock ahead to t (Advance(t - Now())); a t not
// ahead does nothing.
func (c *Clock) AdvanceTo(t time.Time) {
	c.Advance(t.Sub(c.Now()))
}

// NewTimer returns a timer that sends the clock's time on C once d has
// passed on the clock (cmdq.Clock).
func (c *Clock) NewTimer(d time.Duration) cmdq.Timer {
	t := &clockTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc calls f in its own goroutine once d has passed on the clock
// (cmdq.Clock).
func (c *Clock) AfterFunc(d time.Duration, f func()) cmdq.Timer {
	t := &clockTimer{c: c, f: f}
	t.Reset(d)
	return t
}

// clockTimer is a timer of a Clock: a system timer to its time, reset when
// the clock jumps.
type clockTimer struct {
	c    *Clock
	ch   chan time.Time // nil for AfterFunc
	f    func()
	at   time.Time   // when it fires, on the clock (guarded by c.mu)
	real *time.Timer // fires at at by the system clock, as of the last jump
}

// C returns the channel the time is sent on (nil for AfterFunc).
func (t *clockTimer) C() <-chan time.Time { return t.ch }

// Stop stops the timer; false if it had fired or was stopped. A time
// sent before and not received is dropped (as time.Timer's since Go 1.23).
func (t *clockTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.stopLocked()
}

func (t *clockTimer) stopLocked() bool {
	_, pending := t.c.timers[t]
	delete(t.c.timers, t)
	if t.real != nil {
		t.real.Stop()
	}
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
	return pending
}

// Reset makes the timer fire d from now on its clock; false if it had
// fired or was stopped.
func (t *clockTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	pending := t.stopLocked()
	t.at = time.Now().Add(t.c.offset + d)
	t.c.timers[t] = struct{}{}
	if d <= 0 {
		t.c.mu.Unlock()
		t.fire()
		return pending
	}
	if t.real == nil {
		t.real = time.AfterFunc(d, t.fireIfDue)
	} else {
		t.real.Reset(d)
	}
	t.c.mu.Unlock()
	return pending
}

// fireIfDue fires the timer if its time has come on the clock (its system
// timer may have been set before a jump and the timer reset since).
func (t *clockTimer) fireIfDue() {
	t.c.mu.Lock()
	_, pending := t.c.timers[t]
	early := t.at.Sub(time.Now().Add(t.c.offset))
	if pending && early > 0 {
		t.real.Reset(early)
	}
	t.c.mu.Unlock()
	if pending && early <= 0 {
		t.fire()
	}
}

// fire sends the time, or calls the function, once per pending period.
func (t *clockTimer) fire() {
	t.c.mu.Lock()
	if _, pending := t.c.timers[t]; !pending {
		t.c.mu.Unlock()
		return
	}
	delete(t.c.timers, t)
	if t.ch != nil {
		// Sent under the lock (never blocking: a buffer of one), so that
		// a Stop or Reset after it drains it.
		select {
		case t.ch <- time.Now().Add(t.c.offset):
		default:
		}
	}
	t.c.mu.Unlock()
	if t.f != nil {
		go t.f()
	}
}
