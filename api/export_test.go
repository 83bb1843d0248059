package api

import (
	"time"

	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// SetAuthClock replaces the clock of the failed-authentication limiter, for
// every handler (the console's too), and returns a function restoring it.
// Tests that use it must not run in parallel.
func SetAuthClock(now func() time.Time) (restore func()) { return httpserve.SetAuthClock(now) }
