// Package storagetest is the conformance suite every cmdq storage driver runs,
// plus shared benchmarks.
//
// A driver's tests call Run with a function that opens (or returns a shared)
// store:
//
//	func TestConformance(t *testing.T) {
//		storagetest.Run(t, func(t *testing.T) storage.Store { return openStore(t) })
//	}
//
//	func BenchmarkStore(b *testing.B) {
//		storagetest.Benchmark(b, func(b testing.TB) storage.Store { return openStore(b) })
//	}
//
// Every case creates its own queue or table with a unique random name (valid
// under both Azure's queue and table rules), so open may return the same store
// to every case; the suite never closes the store it gets. Cases run as
// parallel subtests grouped as Queue/…, Table/…, Batch/…, Validation/…,
// Concurrency/… and Store/… (deleting and listing queues and tables). Visibility timeouts in the suite are whole seconds (1–3 s for
// cases that wait for expiry, 30 s for cases that must not see expiry), because
// the Azure service counts visibility in seconds; the suite waits for
// visibility changes by waiting for the time the driver reported and then
// polling with a deadline, never by fixed sleeps. The whole suite takes about
// 5–15 seconds per driver.
//
// Where Azure cannot tell two outcomes apart the suite accepts both and says so
// at the case: deleting or updating a message that was already deleted may
// give ErrNotFound or ErrLeaseLost (Azure answers 404 MessageNotFound for both
// a deleted message and, in some cases, a stale receipt).
package storagetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// CaseTimeout bounds the context each conformance case runs with (60 seconds).
const CaseTimeout = 60 * time.Second

// clockTolerance is how far a driver-reported time may be from the local
// clock: Azure reports message times in whole seconds, and the service clock
// may differ slightly from the test machine's.
const clockTolerance = 2 * time.Second

type testCase struct {
	name string
	fn   func(t *testing.T, s storage.Store)
}

// Run runs every conformance case against the stores open returns, as
// parallel subtests grouped Queue/…, Table/…, Batch/…, Validation/…,
// Concurrency/…, Store/… and Combined/… (the optional storage.Combiner and
// storage.GroupCombiner) (deleting and listing queues and tables). open is called once per case and may return a shared store;
// Run never closes it (use t.Cleanup in open to close a per-case store).
//
// Run tests the optional abilities the store offers (group Combined/…);
// RunWithFeatures also fails when an ability the driver declares is
// missing.
func Run(t *testing.T, open func(t *testing.T) storage.Store) {
	run(t, Features{}, open)
}

func run(t *testing.T, f Features, open func(t *testing.T) storage.Store) {
	groups := []struct {
		name  string
		cases []testCase
	}{
		{"Queue", queueCases()},
		{"Table", tableCases()},
		{"Batch", batchCases()},
		{"Validation", validationCases()},
		{"Concurrency", concurrencyCases()},
		{"Store", storeCases()},
		{"Combined", combineCases(f)},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					s := open(t)
					if s == nil {
						t.Fatal("storagetest: open returned a nil store")
					}
					c.fn(t, s)
				})
			}
		})
	}
}

// caseCtx returns a context for one case, cancelled when the case ends or
// after CaseTimeout.
func caseCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), CaseTimeout)
	t.Cleanup(cancel)
	return ctx
}

func randHex(n int) string {
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)[:n]
}

// uniqueName returns a name valid as both an Azure queue name and an Azure
// table name: a letter first, then lowercase letters and digits, built from
// the test's name and a random suffix.
func uniqueName(t testing.TB) string {
	var b strings.Builder
	b.WriteString("st")
	base := t.Name()
	if i := strings.LastIndexByte(base, '/'); i >= 0 {
		base = base[i+1:]
	}
	for _, r := range strings.ToLower(base) {
		if b.Len() >= 30 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
	}
	b.WriteString(randHex(16))
	return b.String()
}

func newQueue(t testing.TB, s storage.Store) storage.Queue {
	t.Helper()
	name := uniqueName(t)
	q, err := s.Queue(caseCtx(t), name)
	if err != nil {
		t.Fatalf("Store.Queue(%q): %v", name, err)
	}
	if q.Name() != name {
		t.Fatalf("Queue.Name() = %q, want %q", q.Name(), name)
	}
	return q
}

func newTable(t testing.TB, s storage.Store) storage.Table {
	t.Helper()
	name := uniqueName(t)
	tb, err := s.Table(caseCtx(t), name)
	if err != nil {
		t.Fatalf("Store.Table(%q): %v", name, err)
	}
	if tb.Name() != name {
		t.Fatalf("Table.Name() = %q, want %q", tb.Name(), name)
	}
	return tb
}

// wantErr fails the test unless err wraps target and its text contains every
// one of contains.
func wantErr(t testing.TB, what string, err, target error, contains ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got nil error, want %v", what, target)
	}
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %q, want one wrapping %v", what, err, target)
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Fatalf("%s: error %q does not mention %q", what, err, c)
		}
	}
}

// wantErrEither fails the test unless err wraps a or b.
func wantErrEither(t testing.TB, what string, err, a, b error) {
	t.Helper()
	if err == nil || !(errors.Is(err, a) || errors.Is(err, b)) {
		t.Fatalf("%s: got error %v, want one wrapping %v or %v", what, err, a, b)
	}
}

func must(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// near fails unless got is within tol of want.
func near(t testing.TB, what string, got, want time.Time, tol time.Duration) {
	t.Helper()
	if got.IsZero() {
		t.Fatalf("%s is the zero time, want about %s", what, want.Format(time.RFC3339Nano))
	}
	if d := got.Sub(want); d > tol || d < -tol {
		t.Fatalf("%s = %s, want within %s of %s (off by %s)", what, got.Format(time.RFC3339Nano), tol, want.Format(time.RFC3339Nano), d)
	}
}

// waitUntil blocks until the wall clock passes at (or ctx ends).
func waitUntil(ctx context.Context, t testing.TB, at time.Time) {
	t.Helper()
	d := time.Until(at)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		t.Fatalf("context ended while waiting until %s: %v", at.Format(time.RFC3339Nano), ctx.Err())
	}
}

// pollInterval is how often poll retries a condition.
const pollInterval = 25 * time.Millisecond

// poll calls cond until it returns true or the deadline passes; then it fails
// the test with what.
func poll(ctx context.Context, t testing.TB, deadline time.Time, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out at %s waiting for %s", deadline.Format(time.RFC3339Nano), what)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("context ended waiting for %s: %v", what, ctx.Err())
		}
	}
}

// dequeueOneEventually polls Dequeue(1, visibility) until it returns a
// message, until deadline.
func dequeueOneEventually(ctx context.Context, t testing.TB, q storage.Queue, visibility time.Duration, deadline time.Time, what string) storage.Message {
	t.Helper()
	var got storage.Message
	poll(ctx, t, deadline, what, func() bool {
		ms, err := q.Dequeue(ctx, 1, visibility)
		must(t, "Dequeue", err)
		if len(ms) > 1 {
			t.Fatalf("Dequeue(1) returned %d messages", len(ms))
		}
		if len(ms) == 1 {
			got = ms[0]
			return true
		}
		return false
	})
	return got
}
