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
package cmdqtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
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

// New returns a Client on a fresh embedded store in t.TempDir(), with
// fast polls (MinPollInterval to MaxPollInterval), the reconciler off and
// the worker named "cmdqtest". Register handlers on it, then Drain (or
// Start it yourself). When the test ends it is stopped and its store
// closed.
func New(t testing.TB) *cmdq.Client {
	t.Helper()
	return NewWith(t, cmdq.Config{})
}

// NewWith is New with a configuration: where cfg leaves them zero, polls
// are fast, the reconciler is off and the worker is named "cmdqtest".
func NewWith(t testing.TB, cfg cmdq.Config) *cmdq.Client {
	t.Helper()
	c := cfg
	c.MinPollInterval = cmp.Or(c.MinPollInterval, MinPollInterval)
	c.MaxPollInterval = cmp.Or(c.MaxPollInterval, max(MaxPollInterval, c.MinPollInterval))
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, cmdq.NoReconcile)
	c.Worker = cmp.Or(c.Worker, "cmdqtest")
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
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
	t.Cleanup(func() {
		if err := client.Stop(context.Background()); err != nil {
			t.Errorf("cmdqtest: stop the client: %v", err)
		}
	})
	return client
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
// needs handlers for every type issued); retries take their policy's
// delays, scheduled commands their time. A command scheduled later than
// Timeout from now is not waited for: it is returned scheduled. It fails
// the test after Timeout, naming the commands still not final.
func Drain(t testing.TB, c *cmdq.Client) []cmdq.Status {
	t.Helper()
	ctx, cancel := ctx(t)
	defer cancel()
	if !c.Stats().Running {
		if !c.Handles() {
			t.Fatal("cmdqtest.Drain: the client has no handlers; register them with cmdq.Register first")
		}
		if err := c.Start(ctx); err != nil && !errors.Is(err, cmdq.ErrStarted) {
			t.Fatalf("cmdqtest.Drain: start: %v", err)
		}
	}
	for {
		all := list(t, ctx, c, cmdq.CommandQuery{})
		var open []cmdq.Status
		for _, s := range all {
			if !s.State.Final() && !(s.State == cmdq.StateScheduled && s.RunAt.After(time.Now().Add(Timeout))) {
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
