package testenv

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
)

// What the engine's own tests (record, enqueue, read, reconcile, retention,
// shared) share: a context per test, an injected clock, and commands
// written straight into an Env's store.

// Ctx returns a context that ends 60 s from now, or with the test.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Clock is an injected clock (no test sleeps for retention). Safe for
// concurrent use.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a Clock at t.
func NewClock(t time.Time) *Clock { c := &Clock{}; c.Set(t); return c }

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// Now returns the clock's time, in UTC.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// OpenReader opens a Reader of env's prefix (the default clock) and
// returns it with its Store.
func OpenReader(t testing.TB, env Env) (*read.Reader, *record.Store) {
	t.Helper()
	r, err := read.Open(Ctx(t), env.Store, layout.Names{Prefix: env.Prefix}, record.Options{}, nil)
	if err != nil {
		t.Fatalf("OpenReader: %v", err)
	}
	return r, r.Store
}

// OpenAt opens a Reader of env's prefix on clock c.
func OpenAt(t testing.TB, env Env, c *Clock) *read.Reader {
	t.Helper()
	r, err := read.Open(Ctx(t), env.Store, layout.Names{Prefix: env.Prefix}, record.Options{Now: c.Now}, nil)
	if err != nil {
		t.Fatalf("OpenReader: %v", err)
	}
	return r
}

// Create stores a command of type typ with params (JSON) and correlation ID
// "corr-1", under a new UUIDv4 (kept in the base table), and returns its ID.
func Create(t testing.TB, s *record.Store, typ, params string) string {
	t.Helper()
	id := uuid.NewString()
	if err := s.Create(Ctx(t), record.NewCommand{ID: id, Type: typ, Params: []byte(params), CorrelationID: "corr-1", Queue: model.DefaultQueue}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return id
}

// IssueAt stores a command with an ID that carries c's day (as the Issuer
// makes them) and returns its ID.
func IssueAt(t testing.TB, s *record.Store, c *Clock, typ string) string {
	t.Helper()
	id := layout.NewDayID(c.Now())
	if err := s.Create(Ctx(t), record.NewCommand{ID: id, Type: typ, Params: []byte(`{"n":1}`), Queue: model.DefaultQueue}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return id
}

// IssueScheduled stores a command issued at c's time with run-at time
// runAt, with an ID that carries c's day (as the Issuer makes them).
func IssueScheduled(t testing.TB, s *record.Store, c *Clock, runAt time.Time) string {
	t.Helper()
	id := layout.NewDayID(c.Now())
	if err := s.Create(Ctx(t), record.NewCommand{ID: id, Type: "demo.Later", Params: []byte(`{}`), Queue: model.DefaultQueue, RunAt: runAt}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return id
}

// Complete records attempt 1 of command id as started and completed.
func Complete(t testing.TB, s *record.Store, id string) {
	t.Helper()
	rec, err := s.Load(Ctx(t), id)
	if err != nil {
		t.Fatalf("Load %s: %v", id, err)
	}
	if err := s.Append(Ctx(t), rec, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventCompleted, Attempt: 1}); err != nil {
		t.Fatalf("complete %s: %v", id, err)
	}
}

// PoisonAt5 poisons command id at its fifth attempt (started, failed
// "boom", over the ceiling).
func PoisonAt5(t testing.TB, s *record.Store, id string) {
	t.Helper()
	rec, err := s.Load(Ctx(t), id)
	if err != nil {
		t.Fatalf("Load %s: %v", id, err)
	}
	if err := s.Poison(Ctx(t), rec, model.PoisonEntry{DequeueCount: 5, Reason: "ceiling"},
		model.Event{Kind: model.EventStarted, Attempt: 5}, model.Event{Kind: model.EventFailed, Attempt: 5, Error: "boom"}); err != nil {
		t.Fatalf("poison %s: %v", id, err)
	}
}

// DayTables lists the day tables of env's prefix.
func DayTables(t testing.TB, env Env) []string {
	t.Helper()
	names, err := env.Store.Tables(Ctx(t), env.Prefix+"commands")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if _, ok := (layout.Names{Prefix: env.Prefix}).ParseDayTable(n); ok {
			out = append(out, n)
		}
	}
	return out
}

// Day0 is the issue day of the engine tests' commands (a Monday, 10:00
// UTC), and Day a day.
var Day0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// Day is 24 hours.
const Day = 24 * time.Hour
