package cmdq

import (
	"context"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// PoisonEntry is one poisoned command in the poison table.
type PoisonEntry struct {
	// CommandID is the poisoned command's ID (for a malformed queue
	// message, the message's ID).
	CommandID string `json:"commandId"`
	// Type is the command type.
	Type string `json:"type"`
	// DequeueCount is the queue message's dequeue count when it was
	// poisoned: the delivery that poisoned it, counted as attempts count
	// (one more than Attempts when the poison ceiling was exceeded without
	// running the handler, after attempts whose outcome was never
	// recorded).
	DequeueCount int64 `json:"dequeueCount"`
	// Attempts is the command's attempt count when it was poisoned: the
	// attempts recorded as started since it was issued or last requeued
	// (Status.Attempts). 0 for a malformed message or a command that was
	// never stored, and for entries written before cmdq recorded it.
	Attempts int `json:"attempts,omitempty"`
	// ParamsPreview is the start of the command's compact JSON parameters
	// (at most PoisonParamsPreview bytes, cut at a character boundary;
	// "" for a malformed message and for older entries). The command holds
	// them whole (Client.GetParams).
	ParamsPreview string `json:"paramsPreview,omitempty"`
	// Reason says why it was poisoned (ceiling exceeded, permanent error,
	// malformed message, unknown type, …).
	Reason string `json:"reason"`
	// LastError is the last attempt's error message.
	LastError string `json:"lastError,omitempty"`
	// PoisonedAt is when it was poisoned (UTC).
	PoisonedAt time.Time `json:"poisonedAt"`
	// Queue is the logical queue the command was on.
	Queue string `json:"queue"`
	// Worker is the processor that poisoned it.
	Worker string `json:"worker,omitempty"`
}

// Why a command was poisoned: PoisonEntry.Reason and the poisoned event's
// Reason (part of the data layout: tools read them).
const (
	// ReasonAttemptsSpent: the last attempt the poison ceiling allows failed.
	ReasonAttemptsSpent = model.ReasonAttemptsSpent
	// ReasonCeiling: the message was dequeued more times than the ceiling
	// allows (attempts whose outcome was never recorded: crashes, lost
	// leases); the handler did not run again.
	ReasonCeiling = model.ReasonCeiling
	// ReasonPermanent: the handler returned an error marked Permanent.
	ReasonPermanent = model.ReasonPermanent
	// ReasonDecode: the stored params do not decode into the handler's Go
	// type.
	ReasonDecode = model.ReasonDecode
	// ReasonMalformed: the queue message is not a cmdq message (kept under
	// the message's ID).
	ReasonMalformed = model.ReasonMalformed
	// ReasonNoCommand: the message names a command that is not stored.
	ReasonNoCommand = model.ReasonNoCommand
	// ReasonUnknownType: no processor polling the queue has a handler for
	// the command's type.
	ReasonUnknownType = model.ReasonUnknownType
	// ReasonTypeMismatch: the message's type is not the stored command's.
	ReasonTypeMismatch = model.ReasonTypeMismatch
)

// PoisonParamsPreview is the most bytes of a command's parameters its
// poison entry keeps (PoisonEntry.ParamsPreview): 256.
const PoisonParamsPreview = model.PoisonParamsPreview

// DefaultPoisonLimit is the page size of a poison listing when
// PoisonQuery.Limit is 0 (50).
const DefaultPoisonLimit = model.DefaultPoisonLimit

// MaxPoisonLimit is the largest PoisonQuery.Limit (1000).
const MaxPoisonLimit = model.MaxPoisonLimit

// PoisonQuery selects poison entries.
type PoisonQuery struct {
	// Type, when set, keeps only entries of this command type.
	Type string
	// Limit is the most entries in one page (0 = DefaultPoisonLimit, at most
	// MaxPoisonLimit).
	Limit int
	// Continuation resumes from a previous page's token. The token is an
	// opaque offset into the newest-first listing: entries poisoned or
	// removed between pages shift it (poison tables are small and change
	// rarely; an entry may be seen twice or skipped across pages).
	Continuation string
}

// PoisonPage is one page of poison entries, newest first.
type PoisonPage struct {
	// Entries are the page's entries, newest first (empty, not nil, when none).
	Entries []PoisonEntry `json:"entries"`
	// Continuation is "" on the last page.
	Continuation string `json:"continuation,omitempty"`
}

// ListPoison lists poison entries, newest first, a page at a time (it
// reads the whole poison table: poison tables are small).
func (c *Client) ListPoison(ctx context.Context, q PoisonQuery) (PoisonPage, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return PoisonPage{}, err
	}
	p, err := r.ListPoison(ctx, model.PoisonQuery(q))
	return poisonPageOut(p), err
}

// GetPoison returns one poison entry: one point read. Unknown → an error
// wrapping ErrNotFound.
func (c *Client) GetPoison(ctx context.Context, id string) (PoisonEntry, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return PoisonEntry{}, err
	}
	e, err := r.GetPoison(ctx, id)
	return PoisonEntry(e), err
}

// Requeue puts a poisoned command back on its queue as pending (a requeued
// event with By = by, attempts from 1 again) and removes its poison entry;
// an in-process processor is woken at once. Not poisoned →
// ErrNotPoisoned; unknown → ErrNotFound; an entry with no stored command
// (a malformed message) → ErrNoCommand (Discard it). If the enqueue fails
// the command is pending and marked for the reconciler, and the error says
// so.
func (c *Client) Requeue(ctx context.Context, id, by string) error {
	r, err := c.reader(ctx)
	if err != nil {
		return err
	}
	return r.Requeue(ctx, id, by)
}

// Discard gives up on a poisoned command: a discarded event (By = by), its
// poison entry removed; the command is final. Not poisoned →
// ErrNotPoisoned; unknown → ErrNotFound. An entry with no stored command is
// just removed.
func (c *Client) Discard(ctx context.Context, id, by string) error {
	r, err := c.reader(ctx)
	if err != nil {
		return err
	}
	return r.Discard(ctx, id, by)
}
