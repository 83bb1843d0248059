package console

import (
	"time"

	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// SetDashboardClock replaces the clock the console checks session expiry
// with, for every handler, and returns a function restoring it. Tests that
// use it must not run in parallel.
func SetDashboardClock(now func() time.Time) (restore func()) {
	old := dashboardClock
	dashboardClock = now
	return func() { dashboardClock = old }
}

// SetAuthClock replaces the clock of the failed-authentication limiter, for
// every handler (the API's too), and returns a function restoring it.
// Tests that use it must not run in parallel.
func SetAuthClock(now func() time.Time) (restore func()) { return httpserve.SetAuthClock(now) }

// ShowBidi is showBidi, for the render test of the escaping.
var ShowBidi = showBidi
