package shared

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// RatePartition holds the ledgers of the command types with a rate limit,
// in the base commands table (data layout, docs/processor.md "Rate
// limits"): one row per type, RowKey the type (for a per-key rate the
// type and the key's hash: Scope; property Key holds the key's first
// MaxKeyDisplay characters); properties Grants (the
// grants that still count: "<unix ms>:<tokens>" pairs, comma-separated,
// oldest first), Limit and PerMs (the rate of the last writer, for
// readers that do not rate the type themselves). A process takes tokens
// with one conditional write of the row (insert when missing); a write
// that finds the row changed since read reads it again. A query of the
// partition reads every ledger (GET /v1/limits).
//
// Over several accounts the ledgers live in the first account's base
// table only, as the permits do: while that account does not answer,
// rated types wait.
const RatePartition = "~rates"

// ErrRateChanged: the ledger was written by another process since it was
// read (storage.ErrConflict, or ErrExists for a first write); read it
// again.
var ErrRateChanged = errors.New("cmdq: rate ledger changed since read")

// MaxRateGrants is the most grants a ledger keeps: past it the two
// closest in time are merged into one at the later time (which counts the
// earlier one's tokens a little longer: never more starts).
const MaxRateGrants = 100

// Rate is a rate limit as the ledger applies it: at most Limit tokens
// (handler starts) in any window of Per.
type Rate struct {
	Limit int
	Per   time.Duration
}

// StartAllowance is how long after its grant a token's handler may start
// and still be counted in the grant's window: Per/10, at most 100 ms. A
// grant counts for Per plus the allowance (Span), so that handlers
// starting within the allowance of their grants start at most Limit times
// in any window of Per.
func (r Rate) StartAllowance() time.Duration { return min(r.Per/10, 100*time.Millisecond) }

// Span is how long a grant counts against the limit: Per plus the start
// allowance.
func (r Rate) Span() time.Duration { return r.Per + r.StartAllowance() }

// MaxBlock is the most tokens one grant takes: a tenth of the limit, at
// least 1.
func (r Rate) MaxBlock() int { return max(1, r.Limit/10) }

// RateGrant is n tokens granted at At (by the writer's clock, never
// before the ledger's latest grant).
type RateGrant struct {
	At time.Time
	N  int
}

// RateLedger is one rated type's ledger row.
type RateLedger struct {
	// Type is the command type.
	Type string
	// Key is the limit key of a per-key ledger, "" for the type's own.
	Key string
	// Grants are the grants that still counted when it was last written,
	// oldest first.
	Grants []RateGrant
	// Rate is the last writer's rate (zero when never written).
	Rate Rate
	// ETag is the row's ETag ("" when the row does not exist).
	ETag string
}

// Used returns the tokens that count against r at now: those granted
// within r's span before now.
func (l RateLedger) Used(now time.Time, r Rate) int {
	from := now.Add(-r.Span())
	n := 0
	for _, g := range l.Grants {
		if g.At.After(from) {
			n += g.N
		}
	}
	return n
}

// NextFree returns when a token is free under r: now when fewer than
// r.Limit count at now, else when the oldest grant that counts stops
// counting (exact: later grants only make it later).
func (l RateLedger) NextFree(now time.Time, r Rate) time.Time {
	if l.Used(now, r) < r.Limit {
		return now
	}
	from := now.Add(-r.Span())
	for _, g := range l.Grants {
		if g.At.After(from) {
			return g.At.Add(r.Span())
		}
	}
	return now
}

// Take grants up to want tokens at now under r: as many as are free (at
// most want), none when the limit is reached. It returns how many, the
// ledger to write (the grants that no longer count dropped, the new one
// added) and, when none was granted, when one is free (NextFree).
//
// The new grant is stamped lead after now (when its handlers are
// expected to start: after the write that takes it), and never before
// the ledger's latest grant (a writer whose clock is behind). Stamping
// later only counts it longer.
func (l RateLedger) Take(now time.Time, r Rate, want int, lead time.Duration) (n int, out RateLedger, next time.Time) {
	free := r.Limit - l.Used(now, r)
	if free <= 0 || want <= 0 {
		return 0, l, l.NextFree(now, r)
	}
	n = min(want, free)
	from := now.Add(-r.Span())
	at := layout.Millis(now.Add(max(lead, 0)))
	if at.Before(now.Add(max(lead, 0))) {
		at = at.Add(time.Millisecond) // stored in whole ms: rounded up, so that it counts no shorter
	}
	out = RateLedger{Type: l.Type, Key: l.Key, Rate: r, ETag: l.ETag}
	for _, g := range l.Grants {
		if g.At.After(from) {
			out.Grants = append(out.Grants, g)
		}
		if g.At.After(at) {
			at = g.At // a writer whose clock is behind stamps no earlier than the latest grant
		}
	}
	out.Grants = append(out.Grants, RateGrant{At: at, N: n})
	sort.SliceStable(out.Grants, func(i, j int) bool { return out.Grants[i].At.Before(out.Grants[j].At) })
	for len(out.Grants) > MaxRateGrants {
		out.Grants = mergeClosest(out.Grants)
	}
	return n, out, time.Time{}
}

// mergeClosest merges the two grants closest in time (gs sorted) into one
// at the later time.
func mergeClosest(gs []RateGrant) []RateGrant {
	best := 1
	for i := 2; i < len(gs); i++ {
		if gs[i].At.Sub(gs[i-1].At) < gs[best].At.Sub(gs[best-1].At) {
			best = i
		}
	}
	gs[best].N += gs[best-1].N
	return append(gs[:best-1], gs[best:]...)
}

func encodeGrants(gs []RateGrant) string {
	var b strings.Builder
	for i, g := range gs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(g.At.UnixMilli(), 10))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(g.N))
	}
	return b.String()
}

func decodeGrants(s string) []RateGrant {
	var out []RateGrant
	for _, f := range strings.Split(s, ",") {
		at, n, ok := strings.Cut(f, ":")
		ms, err1 := strconv.ParseInt(at, 10, 64)
		k, err2 := strconv.Atoi(n)
		if !ok || err1 != nil || err2 != nil || k <= 0 {
			continue // a damaged pair counts nothing
		}
		out = append(out, RateGrant{At: time.UnixMilli(ms).UTC(), N: k})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

func rateEntity(l RateLedger) storage.Entity {
	props := map[string]any{
		"Grants": encodeGrants(l.Grants), "Limit": int64(l.Rate.Limit), "PerMs": l.Rate.Per.Milliseconds(),
	}
	if l.Key != "" {
		props["Key"] = layout.Truncate(l.Key, MaxKeyDisplay)
	}
	return storage.Entity{PartitionKey: RatePartition, RowKey: Scope(l.Type, l.Key), Properties: props}
}

func decodeRate(e storage.Entity) RateLedger {
	typ, keyed := splitScope(e.RowKey)
	key := ""
	if keyed {
		if key = layout.StrProp(e, "Key"); key == "" {
			key = e.RowKey[len(typ)+1:]
		}
	}
	return RateLedger{Type: typ, Key: key, Grants: decodeGrants(layout.StrProp(e, "Grants")), ETag: e.ETag,
		Rate: Rate{Limit: int(layout.IntProp(e, "Limit")), Per: time.Duration(layout.IntProp(e, "PerMs")) * time.Millisecond}}
}

// ReadRate reads cmdType's ledger (key "") or the ledger of one of its
// limit keys: one point read. One not written yet gives an empty ledger
// (ETag "").
func (s *Partitions) ReadRate(ctx context.Context, cmdType, key string) (RateLedger, error) {
	e, err := s.permits().Get(ctx, RatePartition, Scope(cmdType, key))
	if errors.Is(err, storage.ErrNotFound) {
		return RateLedger{Type: cmdType, Key: key}, nil
	}
	if err != nil {
		return RateLedger{}, fmt.Errorf("cmdq: read the rate ledger of %s: %w", cmdType, err)
	}
	return decodeRate(e), nil
}

// WriteRate writes l (as Take returned it) over the ledger it was read
// as: one insert when l.ETag is "", else one replace conditional on it.
// A ledger written by another process since gives an error wrapping
// ErrRateChanged. The ledger as written (its new ETag) is returned.
func (s *Partitions) WriteRate(ctx context.Context, l RateLedger) (RateLedger, error) {
	if err := model.ValidateType(l.Type); err != nil {
		return l, fmt.Errorf("cmdq: write a rate ledger: %w", err)
	}
	var etag string
	var err error
	if l.ETag == "" {
		etag, err = s.permits().Insert(ctx, rateEntity(l))
	} else {
		etag, err = s.permits().Update(ctx, rateEntity(l), storage.Replace, l.ETag)
	}
	if errors.Is(err, storage.ErrExists) || errors.Is(err, storage.ErrConflict) || errors.Is(err, storage.ErrNotFound) {
		return l, fmt.Errorf("%w: %s: %w", ErrRateChanged, l.Type, err)
	}
	if err != nil {
		return l, fmt.Errorf("cmdq: write the rate ledger of %s: %w", l.Type, err)
	}
	l.ETag = etag
	return l, nil
}

// ReadRates reads every ledger (types' and keys'): one query (one request per 1000
// types), by type name.
func (s *Partitions) ReadRates(ctx context.Context) ([]RateLedger, error) {
	q := storage.Query{PartitionKey: RatePartition, Top: 1000}
	var out []RateLedger
	for {
		page, err := s.permits().Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("cmdq: read the rate ledgers: %w", err)
		}
		for _, e := range page.Entities {
			out = append(out, decodeRate(e))
		}
		if page.Continuation == "" {
			return out, nil
		}
		q.Continuation = page.Continuation
	}
}
