package shared

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// PermitPartition holds the permits of the command types with a global
// concurrency limit, in the base commands table (data layout,
// docs/processor.md "Global concurrency"): one row per permit in use,
// RowKey "<type>:<slot>" (slot 000 to limit-1); properties Holder (the
// holding processor's instance ID), Worker (its name), Command (the ID of
// the command it runs), Since (when it was taken) and Expires (when it
// frees itself unless renewed: the holder's lease, renewed with it). A
// permit given back is deleted. A query of the partition with the type's
// row-key prefix reads one type's permits; a query of the whole partition
// reads them all (GET /v1/limits).
//
// Over several accounts the permits live in the first account's base
// table only (a limit counted in two places would not be one): while that
// account does not answer, limited types wait.
const PermitPartition = "~permits"

// ErrPermitHeld: the permit slot asked for is held (storage.ErrExists or
// ErrConflict underneath).
var ErrPermitHeld = errors.New("cmdq: permit held")

// MaxKeyDisplay is how many characters of a limit key a permit or a rate
// ledger keeps for display (the key itself is stored hashed: Scope).
const MaxKeyDisplay = 256

// Scope names what a permit or a rate ledger limits: the command type,
// or for a per-key limit the type, "~" and the first 20 bytes of the
// key's SHA-256 in hex (a type name has no "~", and any key fits a row
// key this way).
func Scope(cmdType, key string) string {
	if key == "" {
		return cmdType
	}
	sum := sha256.Sum256([]byte(key))
	return cmdType + "~" + hex.EncodeToString(sum[:20])
}

// splitScope returns a scope's type ("" key hash for a type-wide one).
func splitScope(scope string) (cmdType string, keyed bool) {
	t, _, keyed := strings.Cut(scope, "~")
	return t, keyed
}

// Permit is one permit row.
type Permit struct {
	// Type is the command type the permit is for.
	Type string
	// Key is the limit key of a per-key permit (its first MaxKeyDisplay
	// characters as read back), "" for a type-wide one.
	Key string
	// Slot is the permit's number, 0 to the limit-1.
	Slot int
	// Holder is the holding processor's instance ID.
	Holder string
	// Worker is the holding processor's name.
	Worker string
	// Command is the ID of the command the holder runs under it.
	Command string
	// Since is when it was taken.
	Since time.Time
	// Expires is when it frees itself unless renewed (by the holder's
	// clock; takers allow model.MaxClockSkew).
	Expires time.Time
	// ETag is the row's ETag.
	ETag string
}

// Expired reports whether the permit has freed itself at now (by the
// reader's clock: Expires plus model.MaxClockSkew, so that a holder
// whose clock is behind by up to that much keeps it).
func (p Permit) Expired(now time.Time) bool {
	return now.After(p.Expires.Add(model.MaxClockSkew))
}

// Scope is what the permit limits (Scope of its type and key).
func (p Permit) Scope() string { return Scope(p.Type, p.Key) }

func permitKey(scope string, slot int) string {
	return scope + ":" + fmt.Sprintf("%03d", slot)
}

func permitEntity(p Permit) storage.Entity {
	props := map[string]any{
		"Holder": p.Holder, "Worker": layout.Truncate(p.Worker, layout.MaxTextUnits), "Command": p.Command,
		"Since": layout.Millis(p.Since), "Expires": layout.Millis(p.Expires),
	}
	if p.Key != "" {
		props["Key"] = layout.Truncate(p.Key, MaxKeyDisplay)
	}
	return storage.Entity{PartitionKey: PermitPartition, RowKey: permitKey(p.Scope(), p.Slot), Properties: props}
}

func decodePermit(e storage.Entity) (Permit, bool) {
	i := strings.LastIndexByte(e.RowKey, ':')
	if i < 0 {
		return Permit{}, false
	}
	slot, err := strconv.Atoi(e.RowKey[i+1:])
	if err != nil {
		return Permit{}, false
	}
	typ, keyed := splitScope(e.RowKey[:i])
	key := ""
	if keyed {
		key = layout.StrProp(e, "Key")
		if key == "" {
			key = e.RowKey[len(typ)+1 : i] // a row without its key: the hash stands for it
		}
	}
	return Permit{Type: typ, Key: key, Slot: slot, Holder: layout.StrProp(e, "Holder"), Worker: layout.StrProp(e, "Worker"),
		Command: layout.StrProp(e, "Command"), Since: layout.TimeProp(e, "Since"), Expires: layout.TimeProp(e, "Expires"), ETag: e.ETag}, true
}

// permits returns the table the permits live in.
func (s *Partitions) permits() storage.Table {
	if s.reps != nil {
		return s.reps[0]
	}
	return s.commands
}

// TakePermit takes free permit slot p.Slot of p.Type for p.Holder: one
// insert. A slot in use gives an error wrapping ErrPermitHeld. Since is
// set to now when zero; the permit as written is returned.
func (s *Partitions) TakePermit(ctx context.Context, p Permit) (Permit, error) {
	if p.Since.IsZero() {
		p.Since = s.nowUTC()
	}
	p.Since, p.Expires = layout.Millis(p.Since), layout.Millis(p.Expires)
	etag, err := s.permits().Insert(ctx, permitEntity(p))
	if errors.Is(err, storage.ErrExists) {
		return p, fmt.Errorf("%w: %s slot %d: %w", ErrPermitHeld, p.Type, p.Slot, err)
	}
	if err != nil {
		return p, fmt.Errorf("cmdq: take a permit of %s: %w", p.Type, err)
	}
	p.ETag = etag
	return p, nil
}

// TakeOverPermit takes the expired permit old (as last read) for p's
// holder: one update conditional on old's ETag. A permit renewed, given
// back or taken over since gives an error wrapping ErrPermitHeld.
func (s *Partitions) TakeOverPermit(ctx context.Context, old, p Permit) (Permit, error) {
	p.Type, p.Key, p.Slot = old.Type, old.Key, old.Slot
	if p.Since.IsZero() {
		p.Since = s.nowUTC()
	}
	p.Since, p.Expires = layout.Millis(p.Since), layout.Millis(p.Expires)
	etag, err := s.permits().Update(ctx, permitEntity(p), storage.Replace, old.ETag)
	if errors.Is(err, storage.ErrConflict) || errors.Is(err, storage.ErrNotFound) {
		return p, fmt.Errorf("%w: %s slot %d changed since read: %w", ErrPermitHeld, p.Type, p.Slot, err)
	}
	if err != nil {
		return p, fmt.Errorf("cmdq: take over an expired permit of %s: %w", p.Type, err)
	}
	p.ETag = etag
	return p, nil
}

// RenewPermit moves p's expiry to expires: one update conditional on its
// ETag. A permit taken over since (it had expired) gives an error
// wrapping ErrPermitHeld.
func (s *Partitions) RenewPermit(ctx context.Context, p Permit, expires time.Time) (Permit, error) {
	q := p
	q.Expires = layout.Millis(expires)
	etag, err := s.permits().Update(ctx, permitEntity(q), storage.Replace, p.ETag)
	if errors.Is(err, storage.ErrConflict) || errors.Is(err, storage.ErrNotFound) {
		return p, fmt.Errorf("%w: %s slot %d was taken over: %w", ErrPermitHeld, p.Type, p.Slot, err)
	}
	if err != nil {
		return p, fmt.Errorf("cmdq: renew a permit of %s: %w", p.Type, err)
	}
	q.ETag = etag
	return q, nil
}

// ReleasePermit gives p back: one delete conditional on its ETag. A
// permit taken over since (it had expired) is left to its new holder and
// is not an error.
func (s *Partitions) ReleasePermit(ctx context.Context, p Permit) error {
	err := s.permits().Delete(ctx, PermitPartition, permitKey(p.Scope(), p.Slot), p.ETag)
	if err == nil || errors.Is(err, storage.ErrConflict) || errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	return fmt.Errorf("cmdq: give back a permit of %s: %w", p.Type, err)
}

// ReadPermits reads the permits in use of scope (Scope: a type's own, or
// one key's of a type; "" = every permit): one query (one request per
// 1000 permits), in scope and slot order.
func (s *Partitions) ReadPermits(ctx context.Context, scope string) ([]Permit, error) {
	q := storage.Query{PartitionKey: PermitPartition, Top: 1000}
	if scope != "" {
		q.RowKeyPrefix = scope + ":"
	}
	var out []Permit
	for {
		page, err := s.permits().Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("cmdq: read the permits: %w", err)
		}
		for _, e := range page.Entities {
			if p, ok := decodePermit(e); ok {
				out = append(out, p)
			}
		}
		if page.Continuation == "" {
			return out, nil
		}
		q.Continuation = page.Continuation
	}
}
