// Package cmdqtest is a test kit for programs that use cmdq: a Client on a
// temporary embedded store, a way to process everything issued, and
// assertions on commands' states and events and on what a piece of code
// issued. It needs nothing but the Go toolchain (no Azurite, no files
// outside the test's temporary directory) and works from any module.
//
//	func TestResize(t *testing.T) {
//		c := cmdqtest.New(t)
//		cmdq.Register(c, resizeHandler)
//		res, _ := c.Issue(ctx, ResizeImage{URL: "a.png"})
//		cmdqtest.Drain(t, c)
//		cmdqtest.RequireState(t, c, res.ID, cmdq.StateCompleted)
//		cmdqtest.RequireEvents(t, c, res.ID, cmdq.EventCreated, cmdq.EventStarted, cmdq.EventCompleted)
//	}
//
// To test code that issues without running the handlers, call it with the
// Client and check with RequireIssued.
//
// The Client runs on a test Clock (ClockOf): retry delays pass without
// waiting (the kit advances the clock when only waiting is left), and
// ClockOf(c).Advance(d) makes a command scheduled within d, or a periodic
// tick, due at once. Work runs one handler without a store, and its
// options inject faults (Redeliver, DeliverConcurrently,
// LoseLeaseAfterStep, CancelAfterStep, FailWrites) to prove the handler
// idempotent. See docs/testing.md.
package cmdqtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// Timeout bounds Drain and the assertions' reads (1 minute, or less when
// the test's own deadline comes sooner).
const Timeout = time.Minute

// Polling of the test Client's processor: New sets these where cfg leaves
// them zero, so retries and requeues are picked up within 100 ms.
const (
	// MinPollInterval is the test processor's first wait after an empty
	// poll (10 ms).
	MinPollInterval = 10 * time.Millisecond
	// MaxPollInterval caps the test processor's poll backoff (100 ms).
	MaxPollInterval = 100 * time.Millisecond
)

// Option changes how New and NewWith make a test Client.
type Option func(*options)

type options struct {
	clock  *Clock
	manual bool
}

// WithClock makes the test Client run on clk instead of a Clock of its
// own: several Clients (or a Client and the code under test) on one
// clock. Default: each Client has its own (ClockOf).
func WithClock(clk *Clock) Option { return func(o *options) { o.clock = clk } }

// ManualClock turns the kit's automatic advance off: the Client's Clock
// moves with real time and with the test's Advance only, so a retry waits
// its whole delay unless the test moves the clock. Default: the kit
// advances it (see New).
func ManualClock() Option { return func(o *options) { o.manual = true } }

// kits are the test Clients' clocks (ClockOf), removed when the test ends.
var kits sync.Map // *cmdq.Client → cmdq.Clock

// ClockOf returns the Clock a test Client made by New or NewWith runs on,
// or nil for any other Client (or one given a cmdq.Config.Clock that is
// not a *Clock).
func ClockOf(c *cmdq.Client) *Clock {
	v, _ := kits.Load(c)
	clk, _ := v.(*Clock)
	return clk
}

// now returns the time on c's clock.
func now(c *cmdq.Client) time.Time {
	if v, ok := kits.Load(c); ok {
		return v.(cmdq.Clock).Now()
	}
	return time.Now()
}

// New returns a Client on a fresh embedded store in t.TempDir(), with
// fast polls (MinPollInterval to MaxPollInterval), the reconciler off, the
// worker named "cmdqtest" and a Clock of its own (ClockOf) that the store
// and the Client both run on. Register handlers on it, then Drain (or
// Start it yourself). When the test ends it is stopped and its store
// closed.
//
// Retries do not wait in real time: while the Client processes, whenever
// its processor finds its queues empty and no handler runs, and no
// command is due, the kit advances the clock to the earliest retry, or to
// the earliest scheduled command due within Timeout (1 minute) of the
// clock. So a type with the default retry policy (5 attempts, 1 s
// doubling) is poisoned in a fraction of a second. A command scheduled
// further ahead, and a periodic schedule's ticks, wait for the test to
// move the clock (ClockOf(c).Advance). ManualClock turns this off.
func New(t testing.TB, opts ...Option) *cmdq.Client {
	t.Helper()
	return NewWith(t, cmdq.Config{}, opts...)
}

// NewWith is New with a configuration: where cfg leaves them zero, polls
// are fast, the reconciler is off, the worker is named "cmdqtest" and the
// clock is a new Clock (or the one WithClock gives). A cfg.Clock that is
// not a *Clock is used as it is, never advanced by the kit.
func NewWith(t testing.TB, cfg cmdq.Config, opts ...Option) *cmdq.Client {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	c := cfg
	c.MinPollInterval = cmp.Or(c.MinPollInterval, MinPollInterval)
	c.MaxPollInterval = cmp.Or(c.MaxPollInterval, max(MaxPollInterval, c.MinPollInterval))
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, cmdq.NoReconcile)
	c.Worker = cmp.Or(c.Worker, "cmdqtest")
	if c.Clock == nil {
		if o.clock == nil {
			o.clock = NewClock()
		}
		c.Clock = o.clock
	}
	clk, _ := c.Clock.(*Clock)
	var adv *advancer
	if clk != nil && !o.manual {
		adv = &advancer{clk: clk, kick: make(chan struct{}, 1), done: make(chan struct{})}
		c.Observers = append(append([]cmdq.Observer(nil), c.Observers...), adv)
	}
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), &embedded.Options{Now: c.Clock.Now})
	if err != nil {
		t.Fatalf("cmdqtest: open a store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("cmdqtest: close the store: %v", err)
		}
	})
	client, err := cmdq.New(st, c)
	if err != nil {
		t.Fatalf("cmdqtest: %v", err)
	}
	kits.Store(client, c.Clock)
	t.Cleanup(func() {
		kits.Delete(client)
		if err := client.Stop(context.Background()); err != nil {
			t.Errorf("cmdqtest: stop the client: %v", err)
		}
	})
	if adv != nil {
		adv.c = client
		stopped := make(chan struct{})
		go func() { defer close(stopped); adv.loop() }()
		t.Cleanup(func() { close(adv.done); <-stopped })
	}
	return client
}

// advancer is the kit's automatic advance of a test Client's clock (New).
type advancer struct {
	c    *cmdq.Client
	clk  *Clock
	kick chan struct{} // an empty poll happened (capacity one)
	done chan struct{}
}

// Observe kicks the advancer after a poll that found nothing.
func (a *advancer) Observe(o cmdq.Observation) {
	if o.Kind == cmdq.ObservedPolled && o.Received == 0 && o.Err == nil {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}

func (a *advancer) loop() {
	for {
		select {
		case <-a.done:
			return
		case <-a.kick:
			if a.c != nil {
				a.step()
			}
		}
	}
}

// step advances the clock when the Client only waits: its processor runs
// no handler and no command is due or running; then to the earliest retry,
// or scheduled command due within Timeout of the clock.
func (a *advancer) step() {
	if st := a.c.Stats(); !st.Running || st.InFlight > 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := a.clk.Now()
	var next time.Time
	q := cmdq.CommandQuery{}
	for {
		page, err := a.c.ListCommands(ctx, q)
		if err != nil {
			return
		}
		for _, s := range page.Commands {
			if s.State.Final() {
				continue
			}
			if s.State == cmdq.StateRunning || !s.RunAt.After(now) {
				return // something runs, or is due: the processor takes it
			}
			if s.State == cmdq.StateScheduled && s.RunAt.After(now.Add(Timeout)) {
				continue // far ahead: for the test to Advance to
			}
			if next.IsZero() || s.RunAt.Before(next) {
				next = s.RunAt
			}
		}
		if page.Continuation == "" {
			break
		}
		q.Continuation = page.Continuation
	}
	if !next.IsZero() {
		a.clk.AdvanceTo(next)
	}
}

// ctx returns a context bounded by Timeout and the test's deadline.
func ctx(t testing.TB) (context.Context, context.CancelFunc) {
	d := time.Now().Add(Timeout)
	if tt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if td, ok := tt.Deadline(); ok && td.Before(d) {
			d = td.Add(-time.Second)
		}
	}
	return context.WithDeadline(context.Background(), d)
}

// Drain processes every command issued so far (and those its handlers
// issue) until none is pending, running or retrying, and returns their
// final statuses in ID order. It starts c if it is not processing yet (c
// needs handlers for every type issued); on a Client of New, retries and
// commands scheduled within Timeout run without waiting (the kit advances
// its clock), and a command scheduled later than Timeout from the clock's
// now is not waited for: it is returned scheduled (Advance the clock,
// then Drain again). It fails the test after Timeout (real time), naming
// the commands still not final.
func Drain(t testing.TB, c *cmdq.Client) []cmdq.Status {
	t.Helper()
	ctx, cancel := ctx(t)
	defer cancel()
	if !c.Stats().Running {
		if !c.Handles() {
			t.Fatal("cmdqtest.Drain: the client has no handlers; register them with cmdq.Register first")
		}
		// Processing goes on after Drain returns (until the test ends):
		// Drain again, or Wait, after moving the clock.
		if err := c.Start(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, cmdq.ErrStarted) {
			t.Fatalf("cmdqtest.Drain: start: %v", err)
		}
	}
	for {
		all := list(t, ctx, c, cmdq.CommandQuery{})
		var open []cmdq.Status
		for _, s := range all {
			if !s.State.Final() && !(s.State == cmdq.StateScheduled && s.RunAt.After(now(c).Add(Timeout))) {
				open = append(open, s)
			}
		}
		if len(open) == 0 {
			return all
		}
		for _, s := range open {
			if _, err := c.Wait(ctx, s.ID); err != nil {
				t.Fatalf("cmdqtest.Drain: %d commands not final within %s: %s", len(open), Timeout, describe(ctx, c, open))
			}
		}
	}
}

// describe lists commands with their current state.
func describe(ctx context.Context, c *cmdq.Client, sts []cmdq.Status) string {
	var b strings.Builder
	for i, s := range sts {
		if i == 8 {
			fmt.Fprintf(&b, " (and %d more)", len(sts)-i)
			break
		}
		if cur, err := c.Get(context.WithoutCancel(ctx), s.ID); err == nil {
			s = cur
		}
		fmt.Fprintf(&b, "\n  %s %s: %s after %d attempts", s.Type, s.ID, s.State, s.Attempts)
		if s.LastError != "" {
			fmt.Fprintf(&b, " (last error: %s)", s.LastError)
		}
	}
	return b.String()
}

// list reads every page of a command listing.
func list(t testing.TB, ctx context.Context, c *cmdq.Client, q cmdq.CommandQuery) []cmdq.Status {
	t.Helper()
	var out []cmdq.Status
	for {
		page, err := c.ListCommands(ctx, q)
		if err != nil {
			t.Fatalf("cmdqtest: list commands: %v", err)
		}
		out = append(out, page.Commands...)
		if page.Continuation == "" {
			return out
		}
		q.Continuation = page.Continuation
	}
}

// RequireState fails the test unless command id is in state, and returns
// its status. It reads the status once: Drain (or c.Wait) first for a
// final state.
func RequireState(t testing.TB, c *cmdq.Client, id string, state cmdq.State) cmdq.Status {
	t.Helper()
	ctx, cancel := ctx(t)
	defer cancel()
	s, err := c.Get(ctx, id)
	if err != nil {
		t.Fatalf("cmdqtest: command %s: %v", id, err)
	}
	if s.State != state {
		msg := fmt.Sprintf("cmdqtest: command %s (%s) is %s after %d attempts, want %s", id, s.Type, s.State, s.Attempts, state)
		if s.LastError != "" {
			msg += "; last error: " + s.LastError
		}
		t.Fatal(msg)
	}
	return s
}

// RequireEvents fails the test unless command id's events are exactly
// kinds, in order, and returns them.
func RequireEvents(t testing.TB, c *cmdq.Client, id string, kinds ...cmdq.EventKind) []cmdq.Event {
	t.Helper()
	ctx, cancel := ctx(t)
	defer cancel()
	evs, err := c.Events(ctx, id)
	if err != nil {
		t.Fatalf("cmdqtest: events of %s: %v", id, err)
	}
	got := make([]cmdq.EventKind, len(evs))
	for i, e := range evs {
		got[i] = e.Kind
	}
	if !slices.Equal(got, kinds) {
		t.Fatalf("cmdqtest: command %s has events %v, want %v", id, got, kinds)
	}
	return evs
}

// RequireIssued fails the test unless at least one command of cmdType was
// issued on c, and returns the status of each (in ID order): what the code
// under test issued. Read their parameters with c.GetParams.
func RequireIssued(t testing.TB, c *cmdq.Client, cmdType string) []cmdq.Status {
	t.Helper()
	ctx, cancel := ctx(t)
	defer cancel()
	got := list(t, ctx, c, cmdq.CommandQuery{Type: cmdType})
	if len(got) == 0 {
		var types []string
		for _, s := range list(t, ctx, c, cmdq.CommandQuery{}) {
			if !slices.Contains(types, s.Type) {
				types = append(types, s.Type)
			}
		}
		t.Fatalf("cmdqtest: no command of type %s was issued (issued types: %v)", cmdType, types)
	}
	return got
}
