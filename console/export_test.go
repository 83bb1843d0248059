package api

import "time"

// SetDashboardClock replaces the clock the dashboard checks session expiry
// with, for every handler, and returns a function restoring it. Tests that
// use it must not run in parallel.
func SetDashboardClock(now func() time.Time) (restore func()) {
	old := dashboardClock
	dashboardClock = now
	return func() { dashboardClock = old }
}

// SetAuthClock replaces the clock of the failed-authentication limiter, for
// every handler, and returns a function restoring it. Tests that use it
// must not run in parallel.
func SetAuthClock(now func() time.Time) (restore func()) {
	old := authClock
	authClock = now
	return func() { authClock = old }
}
