package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/retention"
	"github.com/cmdq-dev/cmdq/storage"
)

// Log writes commands straight into a store's tables, as another process
// would: a processor's events, poison entries, the poison entry of a
// malformed message, the retention sweep. Tests of what a cmdq.Client, the
// HTTP API, the console and the CLI show plant their data with it, so that
// those public packages' tests never import the engine. Nothing it writes
// is pushed to a Client's watchers (as nothing another process writes is):
// they find it by reading storage.
type Log struct {
	r *read.Reader
}

// OpenLog returns the Log of the commands under prefix on st.
func OpenLog(t testing.TB, st storage.Store, prefix string) *Log {
	t.Helper()
	r, err := read.Open(context.Background(), st, layout.Names{Prefix: prefix}, record.Options{}, nil)
	if err != nil {
		t.Fatalf("testenv: open the log of %q: %v", prefix, err)
	}
	return &Log{r: r}
}

// Append records events on command id after its last one, as a processor
// does (one point read, one batch); a zero Time is now. It fails the test
// on error, so call it from the test's goroutine.
func (l *Log) Append(t testing.TB, id string, events ...model.Event) {
	t.Helper()
	ctx := context.Background()
	rec, err := l.r.Store.Load(ctx, id)
	if err != nil {
		t.Fatalf("testenv: load %s: %v", id, err)
	}
	if err := l.r.Store.Append(ctx, rec, events...); err != nil {
		t.Fatalf("testenv: append to %s: %v", id, err)
	}
}

// Poison moves command id to the poison table as a processor does:
// events, then a poisoned event, the projection poisoned and the poison
// entry e (its CommandID, Type and Queue taken from the command; a zero
// PoisonedAt is now).
func (l *Log) Poison(t testing.TB, id string, e model.PoisonEntry, events ...model.Event) {
	t.Helper()
	ctx := context.Background()
	rec, err := l.r.Store.Load(ctx, id)
	if err != nil {
		t.Fatalf("testenv: load %s: %v", id, err)
	}
	if err := l.r.Store.Poison(ctx, rec, e, events...); err != nil {
		t.Fatalf("testenv: poison %s: %v", id, err)
	}
}

// PoisonMessage writes the poison entry of a queue message that names no
// stored command (a malformed message), keyed by e.CommandID.
func (l *Log) PoisonMessage(t testing.TB, e model.PoisonEntry) {
	t.Helper()
	if err := l.r.Store.PoisonMessage(context.Background(), e); err != nil {
		t.Fatalf("testenv: poison message %s: %v", e.CommandID, err)
	}
}

// Sweep runs the retention sweep once, as the reconciler does, and
// returns how many day tables it dropped.
func (l *Log) Sweep(t testing.TB) int {
	t.Helper()
	rep, err := retention.Sweep(context.Background(), l.r.Store, retention.Options{})
	if err != nil {
		t.Fatalf("testenv: sweep: %+v %v", rep, err)
	}
	return len(rep.Dropped)
}

// DayID returns a new command ID that carries day's date, as cmdq.NewID
// does for today: for tests of IDs issued on other days (the issue
// window, retention).
func DayID(day time.Time) string { return layout.NewDayID(day) }

// UnqueuedPartition is the partition of the commands table that holds the
// enqueue-failure markers the reconciler reads (docs/lifecycle.md): a
// fault proxy that refuses it makes marking fail.
const UnqueuedPartition = layout.UnqueuedPartition
