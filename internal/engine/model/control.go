package model

import "time"

// Control: cancelling commands and pausing queues (docs/lifecycle.md,
// "Cancelling" and "Paused queues").

// ControlInterval is documented in package cmdq.
const ControlInterval = 9 * time.Second
