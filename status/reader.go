package status

import (
	"context"

	"github.com/cmdq-dev/cmdq/storage"
)

// DefaultPoisonLimit is the page size of ListPoison when PoisonQuery.Limit is 0.
const DefaultPoisonLimit = 50

// MaxPoisonLimit is the largest PoisonQuery.Limit.
const MaxPoisonLimit = 1000

// PoisonQuery selects poison entries.
type PoisonQuery struct {
	// Type, when set, keeps only entries of this command type.
	Type string
	// Limit is the most entries in one page (0 = DefaultPoisonLimit, at most
	// MaxPoisonLimit).
	Limit int
	// Continuation resumes from a previous page's token. The token is an
	// opaque offset into the newest-first listing: entries poisoned between
	// pages shift it (poison tables are small; this is documented).
	Continuation string
}

// PoisonPage is one page of poison entries, newest first.
type PoisonPage struct {
	Entries []PoisonEntry `json:"entries"`
	// Continuation is "" on the last page.
	Continuation string `json:"continuation,omitempty"`
}

// Reader answers status queries and carries out operator actions on poisoned
// commands. It is safe for concurrent use.
type Reader struct {
	st    storage.Store
	names Names
	store *Store
}

// OpenReader opens the tables named by names on st and returns a Reader.
func OpenReader(ctx context.Context, st storage.Store, names Names, opts Options) (*Reader, error) {
	panic("TODO")
}

// Store returns the writer the Reader uses.
func (r *Reader) Store() *Store { return r.store }

// Get returns a command's status (one query). Unknown ID → error wrapping ErrNotFound.
func (r *Reader) Get(ctx context.Context, id string) (Status, error) {
	panic("TODO")
}

// Events returns a command's events, oldest first, reading every page.
// Unknown ID → error wrapping ErrNotFound.
func (r *Reader) Events(ctx context.Context, id string) ([]Event, error) {
	panic("TODO")
}

// ListPoison lists poison entries newest first (by PoisonedAt), filtered by
// type, one page at a time. It reads the whole poison table (poison tables
// are small).
func (r *Reader) ListPoison(ctx context.Context, q PoisonQuery) (PoisonPage, error) {
	panic("TODO")
}

// GetPoison returns one poison entry (one point read). Unknown → error
// wrapping ErrNotFound.
func (r *Reader) GetPoison(ctx context.Context, id string) (PoisonEntry, error) {
	panic("TODO")
}

// Requeue puts a poisoned command back: projection → pending with a requeued
// event (Worker = by), a new message on the command's queue, the poison entry
// removed. Not poisoned → ErrNotPoisoned; unknown → ErrNotFound.
func (r *Reader) Requeue(ctx context.Context, id, by string) error {
	panic("TODO")
}

// Discard gives up on a poisoned command: a discarded event (Worker = by),
// the poison entry removed. Not poisoned → ErrNotPoisoned; unknown → ErrNotFound.
func (r *Reader) Discard(ctx context.Context, id, by string) error {
	panic("TODO")
}
