// Package tuning lets cmdq's own tests and benchmarks turn engine features
// off on a cmdq.Client (to measure or test the paths they replace). It is
// not part of cmdq's public surface: cmdq.Config has no such switches.
package tuning

import (
	"time"
)

// Switches turn engine features off. The zero value is what cmdq.New uses.
type Switches struct {
	// NoFastPath: every delivery loads its command (one point read) before
	// running the handler (docs/lifecycle.md, "First delivery").
	NoFastPath bool
	// NoHandOff: an issue in the Client's process never hands its message
	// to the Client's processor; every message is enqueued visible
	// (docs/lifecycle.md, "In-process hand-off").
	NoHandOff bool
	// ControlInterval, when above 0, replaces model.ControlInterval:
	// how stale the processor's knowledge of its queues' control rows
	// (pause state, recent cancels) may be when it starts a command, and
	// how long a cancel of a young pending command waits for other
	// processes' processors (tests shorten it).
	ControlInterval time.Duration
	// HopHorizon, when above 0, replaces storage.MaxVisibility (7 days)
	// as the longest visibility delay of a message, for the Client's
	// Issuer, its operator actions and its processor: a command scheduled
	// further ahead hops every HopHorizon (tests of the 8-day case use
	// seconds).
	HopHorizon time.Duration
	// BeforeCancelWrite, when set, is called by Client.Cancel after it
	// loaded the command and before it writes the cancelled event (tests
	// let another write land in between).
	BeforeCancelWrite func(id string)
	// RateToken, when set, is called when a message of a rated type
	// (cmdq.Rate) takes its token in the Client's processor, with its
	// type, its command ID and when its grant counts from (tests check
	// the rate's bound with it).
	RateToken func(cmdType, id string, stamp time.Time)
	// Now, when set, is the periodic scheduler's clock (and
	// ListPeriodic's): tests move it to make ticks be missed.
	Now func() time.Time
	// LocalClockOffset, when not zero, moves this machine's clock as a
	// Client on a store with a clock of its own (storage.ServerClock)
	// sees it: a machine whose clock is that far ahead (tests of clock
	// skew; the store should report its offset as measured by such a
	// clock).
	LocalClockOffset time.Duration
}
