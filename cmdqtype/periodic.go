package cmdqtype

import "time"

// Periodic commands (docs/lifecycle.md, "Periodic commands").

// PeriodicInfo is one periodic schedule as an operator sees it
// (cmdq.Client.ListPeriodic, GET /v1/periodic).
type PeriodicInfo struct {
	// Name names the schedule; a tick's command ID derives from it and the
	// tick time.
	Name string `json:"name"`
	// Spec is the schedule: a cron expression (five fields, or six with
	// seconds first), a descriptor (@hourly, @daily, …) or an interval
	// (@every 2s).
	Spec string `json:"spec"`
	// Type is the command type issued at each tick.
	Type string `json:"type"`
	// Queue is the logical queue of the tick's commands.
	Queue string `json:"queue"`
	// CatchUp is how many of the latest ticks missed while no process ran
	// the schedule a starting process issues (0: none).
	CatchUp int `json:"catchUp"`
	// Since is when the schedule was first registered on the store (UTC):
	// no tick before it is ever issued.
	Since time.Time `json:"since"`
	// UpdatedBy names the process (Config.Worker) that last stored the
	// schedule, and UpdatedAt when (UTC). Every process that runs the
	// schedule stores it on start.
	UpdatedBy string    `json:"updatedBy,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
	// Local is true when this process registered the schedule
	// (Client.Periodic); false for one only stored by another process.
	Local bool `json:"local"`
	// LastTick is the latest tick at or before now since Since, with its
	// command; nil when there was none yet.
	LastTick *TickInfo `json:"lastTick,omitempty"`
	// NextTick is the next tick after now (UTC); zero when the spec never
	// fires again.
	NextTick time.Time `json:"nextTick,omitzero"`
	// Error says why the stored spec could not be read (a spec this
	// version cannot parse); "" otherwise.
	Error string `json:"error,omitempty"`
}

// TickInfo is one tick of a periodic schedule.
type TickInfo struct {
	// At is the tick's scheduled time (UTC).
	At time.Time `json:"at"`
	// ID is the tick's command ID (derived from the schedule's name and
	// At).
	ID string `json:"id"`
	// State is the tick command's state; "" when no command exists for
	// the tick (Missed).
	State State `json:"state,omitempty"`
	// Missed is true when no command exists for the tick: every process
	// running the schedule was down at its time (a later start may still
	// catch it up), or it is being issued right now.
	Missed bool `json:"missed,omitempty"`
}

// Limits and defaults of periodic schedules.
const (
	// MaxPeriodicNameLength is the longest schedule name (128).
	MaxPeriodicNameLength = 128
	// MaxCatchUp is the largest catch-up limit (100 ticks).
	MaxCatchUp = 100
	// DefaultCatchUp is the default catch-up limit: the latest missed
	// tick only.
	DefaultCatchUp = 1
	// NoCatchUp as a catch-up limit issues no missed tick on start.
	NoCatchUp = -1
	// CatchUpHorizonDays is how far back a start looks for missed ticks:
	// to the start (00:00 UTC) of the day IssueWindowPastDays (2) before
	// today. An older tick's command may have been removed by retention
	// and could not be told from a missed one.
	CatchUpHorizonDays = IssueWindowPastDays
)
