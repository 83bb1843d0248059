package model

import (
	"time"
)

// The read model: a command's lifecycle states and events, its status
// (the projection of its events), the poison table's entries and the
// queries and pages of the listings. docs/lifecycle.md describes how they
// are stored.

// State is the engine's copy of cmdq.State (documented there).
type State string

// The lifecycle states (documented in package cmdq).
const (
	StatePending   State = "pending"
	StateRunning   State = "running"
	StateRetrying  State = "retrying"
	StateCompleted State = "completed"
	StatePoisoned  State = "poisoned"
	StateDiscarded State = "discarded"
	StateCancelled State = "cancelled"
)

// Final reports whether a message for a command in this state is deleted
// without running the handler (Completed, Poisoned, Discarded, Cancelled).
func (s State) Final() bool {
	return s == StateCompleted || s == StatePoisoned || s == StateDiscarded || s == StateCancelled
}

// EventKind is the engine's copy of cmdq.EventKind (documented there).
type EventKind string

// The lifecycle events (documented in package cmdq).
const (
	EventCreated       EventKind = "created"
	EventStarted       EventKind = "started"
	EventStepCompleted EventKind = "step_completed"
	EventFailed        EventKind = "failed"
	EventCompleted     EventKind = "completed"
	EventPoisoned      EventKind = "poisoned"
	EventLeaseLost     EventKind = "lease_lost"
	EventRequeued      EventKind = "requeued"
	EventDiscarded     EventKind = "discarded"
	EventCancelled     EventKind = "cancelled"
	EventDeferred      EventKind = "deferred"
)

// Valid reports whether k is one of the lifecycle events.
func (k EventKind) Valid() bool {
	switch k {
	case EventCreated, EventStarted, EventStepCompleted, EventFailed, EventCompleted, EventPoisoned, EventLeaseLost, EventRequeued, EventDiscarded, EventCancelled,
		EventDeferred:
		return true
	}
	return false
}

// Event is the engine's copy of cmdq.Event (documented there).
type Event struct {
	Seq       int64     `json:"seq"`
	Kind      EventKind `json:"kind"`
	Time      time.Time `json:"time"`
	Attempt   int       `json:"attempt,omitempty"`
	Worker    string    `json:"worker,omitempty"`
	By        string    `json:"by,omitempty"`
	Step      int       `json:"step,omitempty"`
	Note      string    `json:"note,omitempty"`
	Error     string    `json:"error,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Detail    string    `json:"detail,omitempty"`
	MessageID string    `json:"messageId,omitempty"`
	RunAt     time.Time `json:"runAt,omitzero"`
}

// Status is the engine's copy of cmdq.Status (documented there).
type Status struct {
	ID            string    `json:"id"`
	Type          string    `json:"type"`
	State         State     `json:"status"`
	Attempts      int       `json:"attempts"`
	Step          int       `json:"step"`
	LastError     string    `json:"lastError,omitempty"`
	CreatedAt     time.Time `json:"createdAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
	Worker        string    `json:"worker,omitempty"`
	CorrelationID string    `json:"correlationId,omitempty"`
	Queue         string    `json:"queue"`
	RunAt         time.Time `json:"runAt,omitzero"`
	Output        JSON      `json:"output,omitempty"`
	TraceID       string    `json:"traceId,omitempty"`
	OrderKey      string    `json:"orderKey,omitempty"`
	Deferrals     int       `json:"deferrals,omitempty"`
	// Deferred: the command is retrying after a deferral (its last
	// outcome is a deferred event). Not part of cmdq.Status: the Client
	// reads it for Status.Waiting.
	Deferred bool `json:"-"`
}

// JSON is the engine's copy of cmdq.JSON (documented there).
type JSON string

// MaxOutputBytes is documented in package cmdq.
const MaxOutputBytes = 32 * 1024

// PoisonEntry is the engine's copy of cmdq.PoisonEntry (documented there).
type PoisonEntry struct {
	CommandID     string    `json:"commandId"`
	Type          string    `json:"type"`
	DequeueCount  int64     `json:"dequeueCount"`
	Attempts      int       `json:"attempts,omitempty"`
	ParamsPreview string    `json:"paramsPreview,omitempty"`
	Reason        string    `json:"reason"`
	LastError     string    `json:"lastError,omitempty"`
	PoisonedAt    time.Time `json:"poisonedAt"`
	Queue         string    `json:"queue"`
	Worker        string    `json:"worker,omitempty"`
}

// Why a command was poisoned (documented in package cmdq).
const (
	ReasonAttemptsSpent = "attempts exhausted"
	ReasonCeiling       = "poison ceiling exceeded"
	ReasonPermanent     = "permanent error"
	ReasonDecode        = "params do not decode"
	ReasonMalformed     = "malformed message"
	ReasonNoCommand     = "command not found"
	ReasonUnknownType   = "unknown command type"
	ReasonTypeMismatch  = "message type does not match the stored command"
)

// PoisonParamsPreview is documented in package cmdq.
const PoisonParamsPreview = 256

// DefaultPoisonLimit is documented in package cmdq.
const DefaultPoisonLimit = 50

// MaxPoisonLimit is documented in package cmdq.
const MaxPoisonLimit = 1000

// PoisonQuery is the engine's copy of cmdq.PoisonQuery (documented there).
type PoisonQuery struct {
	Type         string
	Limit        int
	Continuation string
}

// PoisonPage is the engine's copy of cmdq.PoisonPage (documented there).
type PoisonPage struct {
	Entries      []PoisonEntry `json:"entries"`
	Continuation string        `json:"continuation,omitempty"`
}

// DefaultCommandLimit is documented in package cmdq.
const DefaultCommandLimit = 100

// MaxCommandLimit is documented in package cmdq.
const MaxCommandLimit = 1000

// CommandQuery is the engine's copy of cmdq.CommandQuery (documented there).
type CommandQuery struct {
	Type          string
	State         State
	Limit         int
	Continuation  string
	Since         time.Time
	Newest        bool
	Summary       bool
	ScanLimit     int
	TypePrefix    string
	CorrelationID string
	IDPrefix      string
	IssuedSince   time.Time
	IssuedBefore  time.Time
	Queue         string
	Interval      time.Duration
	ParamsPreview int
}

// MaxParamsPreview is documented in package cmdq.
const MaxParamsPreview = 4096

// CommandPage is the engine's copy of cmdq.CommandPage (documented there).
type CommandPage struct {
	Commands     []Status             `json:"commands"`
	Continuation string               `json:"continuation,omitempty"`
	Summary      *CommandSummary      `json:"summary,omitempty"`
	Params       map[string]string    `json:"params,omitempty"`
	Started      map[string]time.Time `json:"started,omitempty"`
}

// CommandSummary is the engine's copy of cmdq.ListSummary (documented there).
type CommandSummary struct {
	Counts     map[State]int  `json:"counts"`
	Minutes    []MinuteCounts `json:"minutes"`
	IntervalMS int64          `json:"intervalMs"`
	Latency    Latency        `json:"latency"`
	ByType     []GroupCounts  `json:"byType"`
	ByQueue    []GroupCounts  `json:"byQueue"`
	Rows       int            `json:"rows"`
	Partial    bool           `json:"partial,omitempty"`
}

// MinuteCounts is the engine's copy of cmdq.IntervalCounts (documented there).
type MinuteCounts struct {
	Start     time.Time `json:"start"`
	Completed int       `json:"completed"`
	Failed    int       `json:"failed"`
	Poisoned  int       `json:"poisoned"`
	Latency
}

// Latency is the engine's copy of cmdq.Latency (documented there).
type Latency struct {
	Started    int           `json:"started"`
	LatencyP50 time.Duration `json:"latencyP50Ns,omitempty"`
	LatencyP95 time.Duration `json:"latencyP95Ns,omitempty"`
}

// GroupCounts is the engine's copy of cmdq.GroupCounts (documented there).
type GroupCounts struct {
	Name      string `json:"name"`
	Commands  int    `json:"commands"`
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"`
	Poisoned  int    `json:"poisoned"`
	Latency
}
