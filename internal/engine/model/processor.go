package model

import "time"

// The processor's reports: its health, its counts, what a RunFor did.

// ProcessorState is the engine's copy of cmdq.ProcessorState (documented there).
type ProcessorState string

// The processor states (documented in package cmdq).
const (
	ProcessorStarting  ProcessorState = "starting"
	ProcessorPolling   ProcessorState = "polling"
	ProcessorWorking   ProcessorState = "working"
	ProcessorIdle      ProcessorState = "idle"
	ProcessorDraining  ProcessorState = "draining"
	ProcessorStopped   ProcessorState = "stopped"
	ProcessorUnhealthy ProcessorState = "unhealthy"
)

// Health is the engine's copy of cmdq.ProcessorHealth (documented there).
type Health struct {
	State             ProcessorState   `json:"state"`
	Since             time.Time        `json:"since"`
	LastError         string           `json:"lastError,omitempty"`
	LastErrorAt       time.Time        `json:"lastErrorAt,omitzero"`
	ConsecutiveFaults int              `json:"consecutiveFaults"`
	InFlight          int              `json:"inFlight"`
	Retention         *RetentionStatus `json:"retention,omitempty"`
	Accounts          []AccountHealth  `json:"accounts,omitempty"`
	StorageFull       string           `json:"storageFull,omitempty"`
}

// AccountHealth is the engine's copy of cmdq.AccountHealth (documented there).
type AccountHealth struct {
	Name      string    `json:"name"`
	Healthy   bool      `json:"healthy"`
	Since     time.Time `json:"since,omitzero"`
	LastError string    `json:"lastError,omitempty"`
}

// Healthy reports whether h's state is anything but ProcessorUnhealthy.
func (h Health) Healthy() bool { return h.State != ProcessorUnhealthy }

// StopReason is the engine's copy of cmdq.StopReason (documented there).
type StopReason string

// Stop reasons (documented in package cmdq).
const (
	StopDeadline  StopReason = "deadline"
	StopIdle      StopReason = "idle"
	StopCancelled StopReason = "cancelled"
)

// Summary is the engine's copy of cmdq.RunForSummary (documented there).
type Summary struct {
	Processed                   int
	Completed, Failed, Poisoned int
	Released                    int
	Interrupted                 int
	Duplicates                  int
	Deferred                    int
	Duration                    time.Duration
	StoppedBecause              StopReason
}

// Stats is the engine's copy of cmdq.ProcessorStats (documented there).
type Stats struct {
	Processed                   int64
	Completed, Failed, Poisoned int64
	Released                    int64
	Interrupted                 int64
	Duplicates                  int64
	FastPath                    int64
	HandedOff                   int64
	Hops                        int64
	Deferred                    int64
	InFlight                    int
	Running                     bool
}

// RetentionStatus is the engine's copy of cmdq.RetentionStatus (documented there).
type RetentionStatus struct {
	LastSweep time.Time      `json:"lastSweep,omitzero"`
	Dropped   int            `json:"dropped"`
	Moved     int            `json:"moved"`
	Deleted   int            `json:"deleted"`
	Pinned    map[string]int `json:"pinned,omitempty"`
	LastError string         `json:"lastError,omitempty"`
}

// InFlight is the engine's copy of cmdq.RunningCommand (documented there).
type InFlight struct {
	ID, Type string
	Queue    string
	Attempt  int
	Started  time.Time
	Worker   string
}
