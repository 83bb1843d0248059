package days

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/storage"
)

// Tables finds the table of a command ID (docs/lifecycle.md, "Retention"):
// its day table when the ID carries a day, else the base table. Day tables
// are created on first write (one Table call per process and day table:
// Azure's Create Table, cached), never on a read: a read of an old day
// opens the table without creating it, so it cannot bring back a table
// that retention dropped.
type Tables struct {
	st    storage.Store // nil: every command is in the base table
	names layout.Names
	base  storage.Table
	now   func() time.Time

	// creating serialises the first use of a day table, so that issuers
	// arriving together register and create it once, not once each.
	creating sync.Mutex

	mu   sync.Mutex
	open map[string]storage.Table // day tables created or found, by name
	list []string                 // the last listing (see List)
	at   time.Time                // when list was read
	gen  int64                    // created's count for the base table when list was read
}

// created counts, per base table name, the day tables created in this
// process (ForWrite): a listing older than a creation by another Tables
// of this process (a Client's Issuer and its reader each have one) is
// read again, so that a command issued here is listed at once. A key is
// a base table's name: another store's base table of the same name only
// costs a listing more, once per day table created.
var created sync.Map // base table name → *atomic.Int64

// createdCount returns the creation counter of base table name.
func createdCount(name string) *atomic.Int64 {
	v, _ := created.LoadOrStore(name, new(atomic.Int64))
	return v.(*atomic.Int64)
}

// New returns the tables of the commands named by names on st,
// with base the base commands table and now the clock (of the listing's
// reuse). A nil st keeps every command in the base table.
func New(st storage.Store, names layout.Names, base storage.Table, now func() time.Time) *Tables {
	return &Tables{st: st, names: names, base: base, now: now, open: map[string]storage.Table{}}
}

// Register upserts the registration of day table name into the base
// table (over several accounts, into every account that answers, at once:
// package shared).
func (t *Tables) Register(ctx context.Context, name string) error {
	e := storage.Entity{PartitionKey: layout.DaysPartition, RowKey: layout.DayRowPrefix + name, Properties: map[string]any{"Table": name}}
	var err error
	if reps := storage.ReplicasOf(t.base); reps != nil {
		err = shared.FromAny(shared.Each(reps, func(_ int, tb storage.Table) error {
			_, err := tb.Upsert(ctx, e, storage.Replace)
			return err
		}))
	} else {
		_, err = t.base.Upsert(ctx, e, storage.Replace)
	}
	if err != nil {
		return fmt.Errorf("cmdq: register day table %q: %w", name, err)
	}
	return nil
}

// listTTL is how long a listing of the day tables is reused by ListCommands
// and the reconciler's scan (tables this process creates are added at once, in
// every Tables of the process: created).
const listTTL = time.Minute

// Routed reports whether commands are routed to day tables (false: a
// Store made by New without Options.Store keeps every command in the base
// table).
func (t *Tables) Routed() bool { return t.st != nil }

// Names returns the storage names the tables are named by.
func (t *Tables) Names() layout.Names { return t.names }

// ForWrite returns the table to create command id in (creating its day
// table on first use).
func (t *Tables) ForWrite(ctx context.Context, id string) (storage.Table, error) {
	if !t.Routed() {
		return t.base, nil
	}
	name := t.names.TableOf(id)
	if name == t.base.Name() {
		return t.base, nil
	}
	if tb, ok := t.cached(name); ok {
		return tb, nil
	}
	t.creating.Lock()
	defer t.creating.Unlock()
	if tb, ok := t.cached(name); ok {
		return tb, nil // another issuer created it while this one waited
	}
	// Registered first: a crash in between leaves a registration of a
	// table that does not exist (skipped, and removed by the sweep), never
	// a table nobody scans. Both calls are made once per process and day.
	if err := t.Register(ctx, name); err != nil {
		return nil, err
	}
	tb, err := t.st.Table(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("cmdq: open day table %q: %w", name, err)
	}
	createdCount(t.base.Name()).Add(1)
	t.mu.Lock()
	t.open[name] = tb
	if !t.at.IsZero() {
		if i := sort.SearchStrings(t.list, name); i == len(t.list) || t.list[i] != name {
			t.list = append(t.list, name)
			sort.Strings(t.list)
		}
	}
	t.mu.Unlock()
	return tb, nil
}

// Recreate forgets the cached handle of id's day table and creates the
// table again (a write found it missing: dropped by hand, or an old handle).
func (t *Tables) Recreate(ctx context.Context, id string) (storage.Table, error) {
	t.Forget(t.names.TableOf(id))
	return t.ForWrite(ctx, id)
}

// Drop deletes day table name (storage.Store.DeleteTable) and forgets
// its handle, whatever the delete's outcome.
func (t *Tables) Drop(ctx context.Context, name string) error {
	err := t.st.DeleteTable(ctx, name)
	t.Forget(name)
	return err
}

// Forget drops the cached handle of a table (after DeleteTable).
func (t *Tables) Forget(name string) {
	t.mu.Lock()
	delete(t.open, name)
	for i, n := range t.list {
		if n == name {
			t.list = append(t.list[:i:i], t.list[i+1:]...)
			break
		}
	}
	t.mu.Unlock()
}

// ForRead returns id's day table and true when the ID carries a day; the
// table may not exist (its calls then give storage.ErrNotFound), or
// (nil, true, nil) when the driver knows it does not exist. It returns
// (nil, false, nil) for an ID without a day: read the base table.
func (t *Tables) ForRead(ctx context.Context, id string) (storage.Table, bool, error) {
	if !t.Routed() {
		return nil, false, nil
	}
	name := t.names.TableOf(id)
	if name == t.base.Name() {
		return nil, false, nil
	}
	t.mu.Lock()
	tb, ok := t.open[name]
	t.mu.Unlock()
	if ok {
		return tb, true, nil
	}
	tb, err := storage.OpenExisting(ctx, t.st, name)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, true, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("cmdq: open day table %q: %w", name, err)
	}
	return tb, true, nil
}

// List lists the existing day tables of the prefix, oldest first (one
// Tables call, reused for listTTL unless fresh).
func (t *Tables) List(ctx context.Context, fresh bool) ([]string, error) {
	if !t.Routed() {
		return nil, nil
	}
	gen := createdCount(t.base.Name()).Load()
	t.mu.Lock()
	if !fresh && !t.at.IsZero() && t.now().Sub(t.at) < listTTL && t.gen == gen {
		out := append([]string(nil), t.list...)
		t.mu.Unlock()
		return out, nil
	}
	t.mu.Unlock()
	names, err := t.st.Tables(ctx, t.names.CommandsTable())
	if err != nil {
		return nil, fmt.Errorf("cmdq: list day tables: %w", err)
	}
	var days []string
	for _, n := range names {
		if _, ok := t.names.ParseDayTable(n); ok {
			days = append(days, n)
		}
	}
	sort.Strings(days) // yyyymmdd: oldest first
	t.mu.Lock()
	t.list, t.at, t.gen = days, t.now(), gen
	t.mu.Unlock()
	return append([]string(nil), days...), nil
}

// Table returns a handle on an existing table by name (the base table,
// a cached day table, or one opened without creating it).
func (t *Tables) Table(ctx context.Context, name string) (storage.Table, error) {
	if name == t.base.Name() || !t.Routed() {
		return t.base, nil
	}
	if tb, ok := t.cached(name); ok {
		return tb, nil
	}
	return storage.OpenExisting(ctx, t.st, name)
}

// cached returns the handle of table name this process opened, if any.
func (t *Tables) cached(name string) (storage.Table, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tb, ok := t.open[name]
	return tb, ok
}

// All returns the commands tables to read in a whole-store listing: the
// day tables, oldest first, then the base table.
func (t *Tables) All(ctx context.Context) ([]string, error) {
	days, err := t.List(ctx, false)
	if err != nil {
		return nil, err
	}
	return append(days, t.base.Name()), nil
}
