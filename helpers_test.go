package cmdq_test

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// The set-up the root package's tests share lives in this file, and only
// here: each driver's store (a thin wrapper over internal/testenv), the
// Clients built on it, waiting helpers, and the commands and recorders
// that more than one test file uses. A helper of one file's tests lives
// in that file.

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// store is one driver's store for a test (testenv.Open): a fresh embedded
// data directory, or Azurite with a prefix of the test's own. st is the
// real store, not testenv's counting wrapper, which would hide the
// embedded store's storage.Combiner.
type store struct {
	driver string
	st     storage.Store
	prefix string
}

func storeOf(env testenv.Env) store {
	return store{driver: env.Driver, st: env.Store.Store, prefix: env.Prefix}
}

// eachDriver runs f as parallel subtests "embedded" and "azure"
// (testenv.Each).
func eachDriver(t *testing.T, f func(t *testing.T, s store)) {
	t.Helper()
	testenv.Each(t, func(t *testing.T, env testenv.Env) { f(t, storeOf(env)) })
}

// openStore opens a fresh store of the named driver for the test
// (testenv.Open).
func openStore(t *testing.T, driver string) store {
	t.Helper()
	return storeOf(testenv.Open(t, driver))
}

// fast is a processor configuration for tests: short polls, no reconciler.
func fast() cmdq.Config {
	return cmdq.Config{Worker: "w-test", MinPollInterval: 10 * time.Millisecond, MaxPollInterval: 100 * time.Millisecond,
		DrainTimeout: 5 * time.Second, ReconcileInterval: cmdq.NoReconcile}
}

func newClient(t *testing.T, s store, cfg cmdq.Config) *cmdq.Client {
	t.Helper()
	cfg.Prefix = s.prefix
	c, err := cmdq.New(s.st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// testControlInterval is the processors' ControlInterval in the tests of
// cancels and pauses (and what a test's cancel of a young pending command
// waits for them).
const testControlInterval = 200 * time.Millisecond

// newTuned is newClient with engine switches (internal/engine/tuning).
func newTuned(t *testing.T, st storage.Store, prefix string, cfg cmdq.Config, sw tuning.Switches) *cmdq.Client {
	t.Helper()
	cfg.Prefix = prefix
	if sw.ControlInterval == 0 {
		sw.ControlInterval = testControlInterval
	}
	c, err := cmdq.NewTuned(st, cfg, sw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// otherProcess returns a store handle on s's storage that this process's
// in-process shortcuts do not recognise as s (Azure: a new client, as
// another process has; embedded: the same store behind a wrapper, since
// one data directory has one owner), so that two Clients on the two
// handles only meet through storage, as two processes do.
func otherProcess(t *testing.T, s store) storage.Store {
	t.Helper()
	if s.driver == "embedded" {
		return instrument.Wrap(s.st, instrument.Hooks{})
	}
	return openStore(t, s.driver).st
}

// waitFor receives from ch, failing the test after a minute.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting until %s", what)
		panic("unreachable")
	}
}

// waitUntil polls cond every 10 ms until it holds, failing after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// counting wraps s's store: the returned counter counts its point reads
// (table gets) and table queries.
type counts struct{ gets, queries atomic.Int64 }

func counting(st storage.Store) (storage.Store, *counts) {
	n := &counts{}
	return instrument.Wrap(st, instrument.Hooks{After: func(c instrument.Call) {
		switch c.Op {
		case instrument.TableGet:
			n.gets.Add(1)
		case instrument.TableQuery:
			n.queries.Add(1)
		}
	}}), n
}

// resize declares its queue and defaults.
type resize struct {
	URL string `json:"url"`
}

func (resize) CommandType() string { return "images.resize" }
func (resize) CommandOptions() cmdq.CommandOptions {
	return cmdq.CommandOptions{Queue: "images", Lease: 2 * time.Minute, PoisonCeiling: 3}
}

type greet struct {
	Name string `json:"name"`
}

func (greet) CommandType() string { return "greet" }

func kinds(evs []cmdq.Event) []cmdq.EventKind {
	out := make([]cmdq.EventKind, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

// testClock is a clock a test moves by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// observed collects one Client's observations of one kind set.
type observed struct {
	mu     sync.Mutex
	events []cmdq.Observation
	notify chan struct{}
}

func newObserved() *observed { return &observed{notify: make(chan struct{}, 1)} }

func (o *observed) Observe(ob cmdq.Observation) {
	o.mu.Lock()
	o.events = append(o.events, ob)
	o.mu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// count returns how many observations since index from match f.
func (o *observed) count(from int, f func(cmdq.Observation) bool) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, ob := range o.events[min(from, len(o.events)):] {
		if f(ob) {
			n++
		}
	}
	return n
}

func (o *observed) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.events)
}

// await waits (at most a minute) until cond holds.
func (o *observed) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(time.Minute)
	for !cond() {
		select {
		case <-o.notify:
		case <-deadline:
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// shardJob is the command of the sharded-queue tests.
type shardJob struct {
	N     int  `json:"n"`
	Quiet bool `json:"quiet"`
}

func (shardJob) CommandType() string { return "test.shardjob" }

// order records the handler runs of shardJob, in order.
type order struct {
	mu   sync.Mutex
	runs []shardJob
	done chan struct{}
	want int
}

func newOrder(want int) *order { return &order{done: make(chan struct{}), want: want} }

func (o *order) handler(_ context.Context, j shardJob, _ *cmdq.Attempt) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.runs = append(o.runs, j)
	if len(o.runs) == o.want {
		close(o.done)
	}
	return nil
}

func (o *order) wait(t *testing.T, ctx context.Context) []shardJob {
	t.Helper()
	select {
	case <-o.done:
	case <-ctx.Done():
		o.mu.Lock()
		defer o.mu.Unlock()
		t.Fatalf("%d of %d commands ran before the test's deadline", len(o.runs), o.want)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]shardJob(nil), o.runs...)
}

// startTimes records when each command's handler began, by ID.
type startTimes struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (s *startTimes) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string][]time.Time{}
	}
	s.at[id] = append(s.at[id], time.Now())
}

func (s *startTimes) of(id string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at[id]...)
}

// recordStarts registers a greet handler on c that notes when it began.
func recordStarts(t *testing.T, c *cmdq.Client) *startTimes {
	t.Helper()
	st := &startTimes{}
	if err := cmdq.Register(c, func(ctx context.Context, _ greet, run *cmdq.Attempt) error {
		st.add(run.ID())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return st
}

// callsMeter is a Client on env's counting store that polls only at its
// start (the commands are handed off in process, or found by that poll),
// rings no doorbell, and counts completions, for the tests that measure
// storage calls per command.
type callsMeter struct {
	c    *cmdq.Client
	env  testenv.Env
	done *observed
}

func newCallsMeter(t *testing.T, env testenv.Env) *callsMeter {
	t.Helper()
	m := &callsMeter{env: env, done: newObserved()}
	cfg := fast()
	cfg.Prefix = env.Prefix
	cfg.Doorbell.Off = true
	cfg.MinPollInterval, cfg.MaxPollInterval = time.Minute, time.Minute
	cfg.Observers = []cmdq.Observer{m.done}
	c, err := cmdq.New(env.Store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	m.c = c
	return m
}

// perCommand issues 40 commands one at a time (issue(i)), each waited for
// until it completes, and returns the storage calls per command.
func (m *callsMeter) perCommand(t *testing.T, issue func(i int) error) float64 {
	t.Helper()
	const n = 40
	completed := func(o cmdq.Observation) bool { return o.Kind == cmdq.ObservedCompleted }
	mark := m.done.len()
	m.env.Store.Reset()
	for i := range n {
		if err := issue(i); err != nil {
			t.Fatal(err)
		}
		m.done.await(t, "the command completes", func() bool { return m.done.count(mark, completed) > i })
	}
	return float64(m.env.Store.Total()) / n
}

// completedStartedOnce waits until each command of ids is completed and
// checks that it started once, with no failed or lease_lost event: what
// it waited for (a permit, a token) spent no attempt. It returns each
// command's started event time.
func completedStartedOnce(ctx context.Context, t *testing.T, c *cmdq.Client, ids []string, what string) map[string]time.Time {
	t.Helper()
	startedAt := map[string]time.Time{}
	for _, id := range ids {
		st, err := c.Wait(ctx, id)
		if err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("command %s: %+v %v", id, st, err)
		}
		evs, err := c.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		started := 0
		for _, e := range evs {
			switch e.Kind {
			case cmdq.EventStarted:
				started++
				startedAt[id] = e.Time
			case cmdq.EventFailed, cmdq.EventLeaseLost:
				t.Errorf("command %s: %s event %+v: %s must not fail an attempt", id, e.Kind, e, what)
			}
		}
		if started != 1 {
			t.Errorf("command %s: %d started events, want 1 (a wait spends no attempt): %v", id, started, kinds(evs))
		}
	}
	return startedAt
}
