package model

// Periodic commands (docs/lifecycle.md, "Periodic commands").

// Limits and defaults of periodic schedules (documented in package cmdq).
const (
	MaxPeriodicNameLength = 128
	MaxCatchUp            = 100
	DefaultCatchUp        = 1
	NoCatchUp             = -1
	CatchUpHorizonDays    = IssueWindowPastDays
)
