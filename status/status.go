// Package status records the lifecycle of commands: the events each command
// goes through, the projection derived from them (its current status), the
// data layout in the commands and poison tables, and the operator actions on
// poisoned commands (requeue, discard).
//
// Data layout (see docs/lifecycle.md): one partition of the commands table per
// command (PartitionKey = command ID) holds the row "a:cmd" (type, params,
// issued-at, correlation ID, queue; immutable) together with its projection
// (status, attempts, step, …; its ETag is the concurrency token for every
// write to the command), and the events "e:0000000001", "e:0000000002", ….
// Loading a command is one point read of "a:cmd"; every write is one atomic
// batch (the projection is a Merge update of "a:cmd", so the parameters are
// neither resent nor dropped).
package status

import (
	"errors"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// State is a command's lifecycle state.
type State string

// The lifecycle states. A command starts Pending; Completed, Poisoned and
// Discarded are final until an operator requeues a poisoned command.
const (
	// Pending: issued (or requeued) and waiting for a processor.
	Pending State = "pending"
	// Running: a processor is running its handler.
	Running State = "running"
	// Retrying: an attempt failed; the message becomes visible again after
	// the retry delay.
	Retrying State = "retrying"
	// Completed: the handler succeeded.
	Completed State = "completed"
	// Poisoned: over the poison ceiling, a permanent error or a malformed
	// message; an entry waits in the poison table for an operator.
	Poisoned State = "poisoned"
	// Discarded: an operator discarded the poisoned command.
	Discarded State = "discarded"
)

// Final reports whether a message for a command in this state is deleted
// without running the handler (Completed, Poisoned, Discarded).
func (s State) Final() bool {
	return s == Completed || s == Poisoned || s == Discarded
}

// EventKind names a lifecycle event.
type EventKind string

// The lifecycle events, in the order they usually occur.
const (
	// Created: the command was issued.
	Created EventKind = "created"
	// Started: a processor began an attempt (Attempt = the message's dequeue count).
	Started EventKind = "started"
	// StepCompleted: the handler recorded step Step (with an optional Note).
	StepCompleted EventKind = "step_completed"
	// Failed: an attempt failed with Error (Detail holds a panic's stack); it
	// will be retried.
	Failed EventKind = "failed"
	// CompletedEvent: the handler succeeded.
	CompletedEvent EventKind = "completed"
	// PoisonedEvent: the command was moved to the poison table for Reason.
	PoisonedEvent EventKind = "poisoned"
	// LeaseLost: the lease of delivery Attempt ended before its outcome was
	// recorded (its processor lost the lease, stopped or crashed), so another
	// delivery may run the handler again; Note says how it was found. It
	// does not change the state.
	LeaseLost EventKind = "lease_lost"
	// Requeued: an operator (Worker = who) or the reconciler put the command
	// back on its queue.
	Requeued EventKind = "requeued"
	// DiscardedEvent: an operator (Worker = who) discarded the poisoned command.
	DiscardedEvent EventKind = "discarded"
)

func (k EventKind) valid() bool {
	switch k {
	case Created, Started, StepCompleted, Failed, CompletedEvent, PoisonedEvent, LeaseLost, Requeued, DiscardedEvent:
		return true
	}
	return false
}

// Event is one entry of a command's lifecycle history.
type Event struct {
	// Seq numbers the command's events from 1; set by Store.Append.
	Seq int64 `json:"seq"`
	// Kind says what happened.
	Kind EventKind `json:"kind"`
	// Time is when it happened (UTC); Store.Append sets the current time
	// when it is zero.
	Time time.Time `json:"time"`
	// Attempt is the attempt number (the queue message's dequeue count) for
	// started, step_completed, failed, completed, poisoned and lease_lost
	// events.
	Attempt int `json:"attempt,omitempty"`
	// Worker identifies the processor (or, for requeued and discarded, the
	// operator) that caused the event.
	Worker string `json:"worker,omitempty"`
	// Step is the completed step for step_completed events.
	Step int `json:"step,omitempty"`
	// Note is free text from the handler (step_completed) or operator.
	Note string `json:"note,omitempty"`
	// Error is the error message of a failed or poisoned event.
	Error string `json:"error,omitempty"`
	// Reason says why a command was poisoned or discarded.
	Reason string `json:"reason,omitempty"`
	// Detail holds extra detail, such as a panic's stack trace.
	Detail string `json:"detail,omitempty"`
	// MessageID is, on a started event, the ID of the queue message whose
	// delivery started the attempt: the message that owns the command
	// until its outcome (see Record.Owner).
	MessageID string `json:"messageId,omitempty"`
}

// Status is a command's current status: the projection of its events plus
// its immutable identity. It is the body of GET /v1/commands/{id}.
type Status struct {
	// ID is the command ID (a lowercase canonical UUID).
	ID string `json:"id"`
	// Type is the command type name.
	Type string `json:"type"`
	// Status is the lifecycle state.
	Status State `json:"status"`
	// Attempts counts the attempts started since the command was created or
	// last requeued.
	Attempts int `json:"attempts"`
	// Step is the last completed step (0 = none).
	Step int `json:"step"`
	// LastError is the error of the last failed attempt ("" after success or
	// requeue).
	LastError string `json:"lastError,omitempty"`
	// CreatedAt is when the command was issued (UTC).
	CreatedAt time.Time `json:"createdAt"`
	// UpdatedAt is the time of the last event (UTC).
	UpdatedAt time.Time `json:"updatedAt"`
	// Worker is the processor (or operator) of the last event that named one.
	Worker string `json:"worker,omitempty"`
	// CorrelationID is the caller's correlation ID, if any.
	CorrelationID string `json:"correlationId,omitempty"`
	// Queue is the logical queue the command is routed to (e.g. "commands").
	Queue string `json:"queue"`
}

// Settle folds one event into settled, the last attempt whose outcome is
// recorded (failed, completed, poisoned or lease_lost; created and requeued
// start again from 0). A delivery of attempt n whose attempts settled+1..n-1
// have no outcome records lease_lost events for them.
func Settle(settled int, e Event) int {
	switch e.Kind {
	case Created, Requeued:
		return 0
	case Failed, CompletedEvent, PoisonedEvent, LeaseLost:
		return max(settled, e.Attempt)
	}
	return settled
}

// Own folds one event into owner, the queue message that owns the command
// (Record.Owner): a started event's MessageID; none after created and
// requeued.
func Own(owner string, e Event) string {
	switch e.Kind {
	case Created, Requeued:
		return ""
	case Started:
		return e.MessageID
	}
	return owner
}

// Apply folds one event into the projection s. The projection is derived from
// the events only: replaying a command's events from a zero Status (with ID,
// Type, CorrelationID and Queue set) yields its stored status.
func Apply(s *Status, e Event) {
	t := e.Time.UTC()
	switch e.Kind {
	case Created:
		s.Status = Pending
		s.CreatedAt = t
		s.Attempts, s.Step, s.LastError = 0, 0, ""
	case Started:
		s.Status = Running
		if e.Attempt > 0 {
			s.Attempts = e.Attempt
		} else {
			s.Attempts++
		}
	case StepCompleted:
		if e.Step > s.Step {
			s.Step = e.Step
		}
		if !s.Status.Final() {
			s.Status = Running
		}
	case Failed:
		s.Status = Retrying
		s.LastError = e.Error
		if e.Attempt > s.Attempts {
			s.Attempts = e.Attempt
		}
	case CompletedEvent:
		s.Status = Completed
		s.LastError = ""
		if e.Attempt > s.Attempts {
			s.Attempts = e.Attempt
		}
	case PoisonedEvent:
		s.Status = Poisoned
		if e.Error != "" {
			s.LastError = e.Error
		}
	case Requeued:
		s.Status = Pending
		s.Attempts = 0
		s.LastError = ""
	case DiscardedEvent:
		s.Status = Discarded
	case LeaseLost:
		// Explains a delivery without an outcome; the state stays.
	}
	if e.Worker != "" {
		s.Worker = e.Worker
	}
	if !t.IsZero() {
		s.UpdatedAt = t
	}
}

// DefaultPrefix is the name prefix used when Names.Prefix is empty.
const DefaultPrefix = "cmdq"

// DefaultQueue is the logical queue commands go to unless routed elsewhere.
const DefaultQueue = "commands"

// Names derives the storage names from a prefix: queue "<prefix>-<queue>",
// tables "<prefix>commands" and "<prefix>poison". The zero value uses
// DefaultPrefix ("cmdq").
type Names struct {
	// Prefix starts every name (default "cmdq"). It must be lowercase letters
	// and digits, starting with a letter, so that queue and table names are
	// both valid.
	Prefix string
}

func (n Names) prefix() string {
	if n.Prefix == "" {
		return DefaultPrefix
	}
	return n.Prefix
}

// Queue returns the storage queue name of logical queue name ("" means
// DefaultQueue): "cmdq-commands", "cmdq-slow", ….
func (n Names) Queue(name string) string {
	if name == "" {
		name = DefaultQueue
	}
	return n.prefix() + "-" + name
}

// CommandsTable returns the commands table name ("cmdqcommands").
func (n Names) CommandsTable() string { return n.prefix() + "commands" }

// PoisonTable returns the poison table name ("cmdqpoison").
func (n Names) PoisonTable() string { return n.prefix() + "poison" }

// Validate checks the prefix, and each given logical queue name, against
// Azure's naming rules. Errors wrap storage.ErrInvalidName.
func (n Names) Validate(queues ...string) error {
	p := n.prefix()
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' && i > 0) {
			return fmt.Errorf("%w: prefix %q must be lowercase letters and digits, starting with a letter", storage.ErrInvalidName, p)
		}
	}
	var errs []error
	if err := storage.ValidateTableName(n.CommandsTable()); err != nil {
		errs = append(errs, err)
	}
	if err := storage.ValidateTableName(n.PoisonTable()); err != nil {
		errs = append(errs, err)
	}
	for _, q := range queues {
		if err := storage.ValidateQueueName(n.Queue(q)); err != nil {
			errs = append(errs, fmt.Errorf("logical queue %q: %w", q, err))
		}
	}
	return errors.Join(errs...)
}
