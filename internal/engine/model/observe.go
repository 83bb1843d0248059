package model

import "time"

// Observer is the engine's copy of cmdq.Observer (documented there).
type Observer interface {
	Observe(o Observation)
}

// ObserverFunc is the engine's copy of cmdq.ObserverFunc (documented there).
type ObserverFunc func(o Observation)

// Observe calls f(o).
func (f ObserverFunc) Observe(o Observation) { f(o) }

// ObservationKind is the engine's copy of cmdq.ObservationKind (documented there).
type ObservationKind string

// The observation kinds (documented in package cmdq).
const (
	ObservedStarted   ObservationKind = "started"
	ObservedCompleted ObservationKind = "completed"
	ObservedFailed    ObservationKind = "failed"
	ObservedPoisoned  ObservationKind = "poisoned"
	ObservedLeaseLost ObservationKind = "lease_lost"
	ObservedPolled    ObservationKind = "polled"
	ObservedAlert     ObservationKind = "alert"
	ObservedHealth    ObservationKind = "health"
	ObservedPaused    ObservationKind = "paused"
	ObservedResumed   ObservationKind = "resumed"
	ObservedWake      ObservationKind = "wake"
	ObservedRing      ObservationKind = "ring"
	ObservedDeferred  ObservationKind = "deferred"
)

// Observation is the engine's copy of cmdq.Observation (documented there).
type Observation struct {
	Kind                   ObservationKind
	Time                   time.Time
	Worker                 string
	CommandID, Type, Queue string
	Attempt                int
	Duration               time.Duration
	Err                    error
	Reason                 string
	Received               int
	Paused                 bool
	By                     string
	Wait                   time.Duration
	Op                     string
	Health                 Health
}
