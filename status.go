package cmdq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// A command's status and history: its lifecycle states and events, and
// its status (the projection of its events). docs/lifecycle.md describes
// how they are stored.

// State is a command's lifecycle state.
type State string

// The lifecycle states. A command starts Pending; Completed, Poisoned,
// Discarded and Cancelled are final (a poisoned command until an operator
// requeues it).
const (
	// StatePending: issued (or requeued) and waiting for a processor.
	// A pending command whose run-at time is ahead reads as
	// StateScheduled (Status.AsOf).
	StatePending State = "pending"
	// StateRunning: a processor is running its handler.
	StateRunning State = "running"
	// StateRetrying: an attempt failed; the message becomes visible again after
	// the retry delay.
	StateRetrying State = "retrying"
	// StateCompleted: the handler succeeded.
	StateCompleted State = "completed"
	// StatePoisoned: over the poison ceiling, a permanent error or a malformed
	// message; an entry waits in the poison table for an operator.
	StatePoisoned State = "poisoned"
	// StateDiscarded: an operator discarded the poisoned command.
	StateDiscarded State = "discarded"
	// StateCancelled: someone cancelled the command before it ended
	// (Client.Cancel): it never runs again, and a handler still
	// running has its context cancelled.
	StateCancelled State = "cancelled"
	// StateScheduled: issued with a run-at time that is still ahead
	// (Status.RunAt): pending until then. It is derived when the status is
	// read, never stored (nothing is written when the time comes).
	StateScheduled State = "scheduled"
)

// Final reports whether s ends the command's processing: Completed,
// Poisoned, Discarded or Cancelled (a poisoned command runs again only if
// an operator requeues it).
func (s State) Final() bool {
	return s == StateCompleted || s == StatePoisoned || s == StateDiscarded || s == StateCancelled
}

// EventKind names a lifecycle event.
type EventKind string

// The lifecycle events, in the order they usually occur.
const (
	// EventCreated: the command was issued.
	EventCreated EventKind = "created"
	// EventStarted: a processor began an attempt (Attempt = the message's dequeue count).
	EventStarted EventKind = "started"
	// EventStepCompleted: the handler recorded step Step (with an optional Note).
	EventStepCompleted EventKind = "step_completed"
	// EventFailed: an attempt failed with Error (Detail holds a panic's stack); it
	// will be retried.
	EventFailed EventKind = "failed"
	// EventCompleted: the handler succeeded.
	EventCompleted EventKind = "completed"
	// EventPoisoned: the command was moved to the poison table for Reason.
	EventPoisoned EventKind = "poisoned"
	// EventLeaseLost: the lease of delivery Attempt ended before its outcome was
	// recorded (its processor lost the lease, stopped or crashed), so another
	// delivery may run the handler again; Note says how it was found. It
	// does not change the state.
	EventLeaseLost EventKind = "lease_lost"
	// EventRequeued: an operator (By = who), the reconciler or the Issuer
	// (a recovery enqueue) put the command back on its queue.
	EventRequeued EventKind = "requeued"
	// EventDiscarded: an operator (Worker = who) discarded the poisoned command.
	EventDiscarded EventKind = "discarded"
	// EventCancelled: someone (By = who) cancelled the command (Reason
	// says in which state: pending, running or retrying); it is final.
	EventCancelled EventKind = "cancelled"
	// EventDeferred: the handler deferred the attempt (RetryAfter) with
	// Error; the command is retrying, due at RunAt (the event's Time plus
	// the delay), and the attempt does not count toward the poison
	// ceiling. Detail says which deferral it is of how many MaxDeferrals
	// allows. A deferral past them is recorded as failed instead.
	EventDeferred EventKind = "deferred"
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

// Event is one entry of a command's lifecycle history.
type Event struct {
	// Seq numbers the command's events from 1, in the order they were
	// recorded.
	Seq int64 `json:"seq"`
	// Kind says what happened.
	Kind EventKind `json:"kind"`
	// Time is when it happened (UTC).
	Time time.Time `json:"time"`
	// Attempt is the attempt number (the queue message's dequeue count) for
	// started, step_completed, failed, completed, poisoned and lease_lost
	// events.
	Attempt int `json:"attempt,omitempty"`
	// Worker identifies the processor that caused the event (events of an
	// attempt: started, step_completed, failed, completed, poisoned,
	// lease_lost). Empty for the events of operators and the reconciler.
	Worker string `json:"worker,omitempty"`
	// By identifies who requeued, discarded or cancelled the command: an
	// operator or a program ("api:token:…", "ui:…", "cli:…", or what
	// Client.Cancel was given), "reconciler" for a requeue by the
	// reconciler, or "issuer" for the Issuer's recovery enqueue of a
	// pending command. Empty for the events of an attempt.
	By string `json:"by,omitempty"`
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
	// until its outcome (docs/lifecycle.md, "Data layout").
	MessageID string `json:"messageId,omitempty"`
	// RunAt is, on a created event, the run-at time the command was
	// issued with; on a failed event, when the next attempt is due (the
	// retry delay's end); on a requeued event of run-now, the time it was
	// made due. Zero otherwise.
	RunAt time.Time `json:"runAt,omitzero"`
}

// Status is a command's current status: the projection of its events plus
// its immutable identity. It is the body of GET /v1/commands/{id}.
type Status struct {
	// ID is the command ID (a lowercase canonical UUID).
	ID string `json:"id"`
	// Type is the command type name.
	Type string `json:"type"`
	// State is the lifecycle state.
	State State `json:"status"`
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
	// Worker is the processor of the last event that named one (operators'
	// requeued and discarded events name theirs in Event.By).
	Worker string `json:"worker,omitempty"`
	// CorrelationID is the caller's correlation ID, if any.
	CorrelationID string `json:"correlationId,omitempty"`
	// Queue is the logical queue the command is routed to (e.g. "commands").
	Queue string `json:"queue"`
	// RunAt is when the command is due (UTC): the run-at time it was
	// issued with (State StateScheduled until then), the time a retrying
	// command's next attempt is due, or the time an operator made it due
	// (run-now). Zero for a command issued without one that never failed,
	// and for a final command (State.Final: nothing is due).
	RunAt time.Time `json:"runAt,omitzero"`
	// Output is the JSON output the completing attempt recorded
	// (Attempt.SetOutput, at most MaxOutputBytes), stored with the command's
	// completion; nil when none was recorded, before completion, and in
	// listings (ListCommands: read the command for it). A retried command
	// has the output of the attempt that completed; a failed attempt's
	// output is not kept. Decode it with Output.Decode.
	Output JSON `json:"output,omitempty"`
	// TraceID is the ID of the trace the command was issued in (32 hex
	// digits; "" when it was issued outside one): its attempts' spans
	// are in that trace (docs/operations.md, "Tracing").
	TraceID string `json:"traceId,omitempty"`
	// OrderKey is the command's order key (OrderKey), if any: the
	// commands sharing it run one at a time, in issue order.
	OrderKey string `json:"orderKey,omitempty"`
	// Deferrals counts the deferred events (RetryAfter) since the command
	// was created or last requeued: attempts that did not count toward
	// the poison ceiling, which applies to Attempts − Deferrals.
	Deferrals int `json:"deferrals,omitempty"`
	// deferred: the last outcome is a deferred event (for Waiting).
	deferred bool
	// Waiting says why a command that is neither running nor final has
	// not started, as this Client sees it when it reads the status: nil
	// for a running or final command (docs/lifecycle.md, "Why a command
	// waits"). Listings leave it out.
	Waiting *Waiting `json:"waiting,omitempty"`
}

// Waiting says why a command waits (Status.Waiting).
type Waiting struct {
	// Reason is why: one of the WaitReason values.
	Reason WaitReason `json:"reason"`
	// Until is when the command becomes due (WaitScheduled,
	// WaitRetrying, WaitDeferred).
	Until time.Time `json:"until,omitzero"`
	// By and Since say who paused the command's queue, and when
	// (WaitPaused).
	By    string    `json:"by,omitempty"`
	Since time.Time `json:"since,omitzero"`
	// Command and Key: the head of the command's order key, which runs
	// first, and the key (WaitOrder). Key is also the command's limit key
	// when it waits for a permit of that key (WaitPermit, under
	// GlobalConcurrencyPerKey).
	Command string `json:"command,omitempty"`
	Key     string `json:"key,omitempty"`
	// Held and Limit: the permits of the command's type (or of its limit
	// key, when Key is set) held and its global concurrency limit, and
	// HeldBy the processors that hold them (WaitPermit).
	Held   int      `json:"held,omitempty"`
	Limit  int      `json:"limit,omitempty"`
	HeldBy []string `json:"heldBy,omitempty"`
}

// WaitReason says why a command waits (Waiting.Reason).
type WaitReason string

// The reasons a command waits, in the order they are checked.
const (
	// WaitScheduled: issued with a run-at time that is still ahead
	// (Until).
	WaitScheduled WaitReason = "scheduled"
	// WaitRetrying: an attempt failed; the next one is due at Until.
	WaitRetrying WaitReason = "retrying"
	// WaitDeferred: the handler deferred its last attempt (RetryAfter);
	// the next one is due at Until.
	WaitDeferred WaitReason = "deferred"
	// WaitPaused: its queue is paused (By, Since); it starts once the
	// queue is resumed.
	WaitPaused WaitReason = "paused"
	// WaitNoProcessor: due, but no live processor polls its queue (no
	// heartbeat of the last three intervals names it): it starts when a
	// processor of its queue runs.
	WaitNoProcessor WaitReason = "no_processor"
	// WaitOrder: due, and another command of its order key (Command) is
	// the key's head: it starts once the head is final (docs/lifecycle.md,
	// "Order keys").
	WaitOrder WaitReason = "order"
	// WaitPermit: due, its type has a global concurrency limit (Limit),
	// and every permit is held (Held, HeldBy): it starts when one is
	// given back (docs/processor.md, "Global concurrency").
	WaitPermit WaitReason = "permit"
	// WaitSlot: due, and every processor of its queue was running as
	// many handlers as it has slots (at its last heartbeat; for this
	// Client's own processor, now): it starts when a handler slot frees.
	WaitSlot WaitReason = "slot"
	// WaitDue: due, and a processor of its queue has free slots: it
	// starts at that processor's next dequeue (at once when it was woken;
	// docs/processor.md, "Wake-ups").
	WaitDue WaitReason = "due"
)

// JSON is a JSON value kept as its compact text (Status.Output): it
// encodes as that value, not as a string, and "" is none (encoded as
// null, or left out with omitempty). A string type keeps Status
// comparable with ==.
type JSON string

// MarshalJSON returns the value's text (null for "").
func (j JSON) MarshalJSON() ([]byte, error) {
	if j == "" {
		return []byte("null"), nil
	}
	return []byte(j), nil
}

// UnmarshalJSON keeps the value's text, compacted ("" for null).
func (j *JSON) UnmarshalJSON(b []byte) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return err
	}
	if buf.String() == "null" {
		*j = ""
		return nil
	}
	*j = JSON(buf.String())
	return nil
}

// Decode decodes the value into v (json.Unmarshal); "" leaves v as it is.
func (j JSON) Decode(v any) error {
	if j == "" {
		return nil
	}
	return json.Unmarshal([]byte(j), v)
}

// MaxOutputBytes is the largest recorded output (Attempt.SetOutput): 32 KiB of
// compact JSON. Record an ID or a URL for larger results.
const MaxOutputBytes = model.MaxOutputBytes

// AsOf returns s as a reader sees it at now: State StateScheduled while it
// is pending with a RunAt after now (docs/lifecycle.md, "Scheduled
// commands"). The Client's reads return statuses this way already.
func (s Status) AsOf(now time.Time) Status {
	if s.State == StatePending && s.RunAt.After(now) {
		s.State = StateScheduled
	}
	return s
}

// Get returns a command's status: one point read, or none for a
// completed, discarded or cancelled command read before (see Config.FinalCache).
// Unknown ID → an error wrapping ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (Status, error) {
	if st, ok := c.cachedFinal(id); ok {
		return st, nil
	}
	st, err := c.readStatus(ctx, id)
	if err != nil {
		return st, err
	}
	return c.withWaiting(ctx, st), nil
}

// GetParams returns a command's status and its JSON parameters: the same
// one point read as Get. Unknown ID → an error wrapping ErrNotFound.
func (c *Client) GetParams(ctx context.Context, id string) (Status, json.RawMessage, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return Status{}, nil, err
	}
	rec, err := r.Load(ctx, id)
	if err != nil {
		return Status{}, nil, err
	}
	return c.withWaiting(ctx, statusOut(rec.Status).AsOf(c.now())), json.RawMessage(rec.Params), nil
}

// Events returns a command's lifecycle events, oldest first (one query per
// 1000 events). Unknown ID → an error wrapping ErrNotFound.
func (c *Client) Events(ctx context.Context, id string) ([]Event, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return nil, err
	}
	evs, err := r.Events(ctx, id)
	if n := len(evs); n > 0 {
		c.hub.sawEvent(id, evs[n-1].Time)
	}
	return eventsOut(evs), err
}

// Statuses returns the status of each command in ids, read at once (16
// point reads at a time; none for a completed, discarded or cancelled command read
// before): the "are these done?" query. A command that does
// not exist is missing from the map; any other failure fails the call.
func (c *Client) Statuses(ctx context.Context, ids ...string) (map[string]Status, error) {
	if _, err := c.reader(ctx); err != nil {
		return nil, err
	}
	out := make(map[string]Status, len(ids))
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, 16)
	for _, id := range ids {
		if st, ok := c.cachedFinal(id); ok {
			out[id] = st
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			st, err := c.readStatus(ctx, id)
			if err == nil {
				st = c.withWaiting(ctx, st)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				out[id] = st
			case !errors.Is(err, model.ErrNotFound):
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}
