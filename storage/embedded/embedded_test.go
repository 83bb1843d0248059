package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

func openStore(t testing.TB, opts *embedded.Options) *embedded.Store {
	t.Helper()
	s, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq.db"), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// fakeClock is a settable clock for Options.Now.
type fakeClock struct{ ns atomic.Int64 }

func newClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustQ(t testing.TB, s storage.Store, name string) storage.Queue {
	t.Helper()
	q, err := s.Queue(ctxT(t), name)
	if err != nil {
		t.Fatalf("Queue(%q): %v", name, err)
	}
	return q
}

func TestSecondOpenSameProcessFailsFast(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cmdq.db")
	s, err := embedded.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	s2, err := embedded.Open(path, nil)
	if err == nil {
		s2.Close()
		t.Fatal("second Open of the same file succeeded; want ErrInUse")
	}
	if !errors.Is(err, embedded.ErrInUse) {
		t.Fatalf("second Open: %v; want ErrInUse", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("second Open took %s; want a quick failure", el)
	}
	// After Close the file opens again.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s3, err := embedded.Open(path, nil)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s3.Close()
}

func TestClosedStore(t *testing.T) {
	t.Parallel()
	s, err := embedded.Open(filepath.Join(t.TempDir(), "x.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	q := mustQ(t, s, "closedq")
	tb, err := s.Table(ctx, "closedt")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := q.Enqueue(ctx, "x", 0, 0); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Enqueue after Close: %v; want ErrClosed", err)
	}
	if _, err := q.Peek(ctx, 1); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Peek after Close: %v; want ErrClosed", err)
	}
	if _, err := tb.Get(ctx, "a", "b"); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Get after Close: %v; want ErrClosed", err)
	}
	if _, err := s.Queue(ctx, "closedq"); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Queue after Close: %v; want ErrClosed", err)
	}
}

func TestOpenEmptyPath(t *testing.T) {
	t.Parallel()
	if _, err := embedded.Open("", nil); !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("Open(\"\"): %v; want ErrInvalidArgument", err)
	}
}

func TestExpiryPurge(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := openStore(t, &embedded.Options{Now: clk.Now, PurgeInterval: -1})
	ctx := ctxT(t)
	// A queue with nothing expired, created first, must not stop the purge.
	if _, err := mustQ(t, s, "aaa-fresh").Enqueue(ctx, "fresh", 0, 0); err != nil {
		t.Fatal(err)
	}
	q := mustQ(t, s, "expiry")
	for i := range 5 {
		if _, err := q.Enqueue(ctx, fmt.Sprintf("short-%d", i), 0, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	keep, err := q.Enqueue(ctx, "long", 0, storage.NoExpiry)
	if err != nil {
		t.Fatal(err)
	}
	if !keep.ExpiresAt.IsZero() {
		t.Fatalf("NoExpiry message ExpiresAt = %v; want zero", keep.ExpiresAt)
	}
	clk.Advance(time.Minute) // expiresAt <= now: expired
	peek, err := q.Peek(ctx, 32)
	if err != nil {
		t.Fatal(err)
	}
	if len(peek) != 1 || peek[0].Text != "long" {
		t.Fatalf("Peek after expiry = %+v; want only the NoExpiry message", peek)
	}
	if n, _ := q.ApproximateCount(ctx); n != 6 {
		t.Fatalf("count before purge = %d; want 6 (Peek does not purge)", n)
	}
	n, err := s.PurgeExpired(ctx)
	if err != nil || n != 5 {
		t.Fatalf("PurgeExpired = %d, %v; want 5, nil", n, err)
	}
	if n, _ := q.ApproximateCount(ctx); n != 1 {
		t.Fatalf("count after purge = %d; want 1", n)
	}
	// Dequeue also purges what it meets.
	for i := range 3 {
		if _, err := q.Enqueue(ctx, fmt.Sprintf("d-%d", i), 0, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Second)
	got, err := q.Dequeue(ctx, 32, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Text != "long" {
		t.Fatalf("Dequeue = %+v; want only the NoExpiry message", got)
	}
	if n, _ := q.ApproximateCount(ctx); n != 1 {
		t.Fatalf("count after dequeue purge = %d; want 1", n)
	}
	// An expired message's receipt gives ErrNotFound.
	m, err := q.Enqueue(ctx, "gone", 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if err := q.Delete(ctx, m.ID, m.PopReceipt); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Delete of expired message: %v; want ErrNotFound", err)
	}
	if _, _, err := q.UpdateVisibility(ctx, m.ID, m.PopReceipt, 0); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("UpdateVisibility of expired message: %v; want ErrNotFound", err)
	}
}

func TestBackgroundSweeper(t *testing.T) {
	t.Parallel()
	s := openStore(t, &embedded.Options{PurgeInterval: 20 * time.Millisecond})
	ctx := ctxT(t)
	q := mustQ(t, s, "sweep")
	m, err := q.Enqueue(ctx, "x", 0, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := q.ApproximateCount(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sweeper did not purge message expiring at %v; count %d", m.ExpiresAt, n)
		}
		<-tick.C
	}
}

// TestVisibilityOrderAndIndex drives many dequeues and visibility updates
// with a fake clock and checks order, counts and that the index holds each
// message exactly once.
func TestVisibilityOrderAndIndex(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := openStore(t, &embedded.Options{Now: clk.Now, PurgeInterval: -1})
	ctx := ctxT(t)
	q := mustQ(t, s, "order")
	const n = 100
	ids := make([]string, n)
	for i := range n {
		m, err := q.Enqueue(ctx, fmt.Sprintf("m%03d", i), 0, storage.NoExpiry)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = m.ID
	}
	// FIFO on insertion when all are visible.
	peek, err := q.Peek(ctx, 32)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range peek {
		if m.Text != fmt.Sprintf("m%03d", i) || m.PopReceipt != "" || !m.NextVisibleAt.IsZero() {
			t.Fatalf("peek[%d] = %+v; want m%03d without receipt or NextVisibleAt", i, m, i)
		}
	}
	// Round after round: dequeue everything, shorten some leases to 0,
	// extend the others; every message is seen exactly once per visible window.
	receipts := map[string]string{}
	counts := map[string]int64{}
	for round := 1; round <= 5; round++ {
		seen := map[string]bool{}
		for {
			got, err := q.Dequeue(ctx, 32, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				break
			}
			for _, m := range got {
				if seen[m.ID] {
					t.Fatalf("round %d: message %s dequeued twice while invisible", round, m.ID)
				}
				seen[m.ID] = true
				if old := receipts[m.ID]; old == m.PopReceipt {
					t.Fatalf("pop receipt did not change on dequeue")
				}
				if m.DequeueCount != counts[m.ID]+1 {
					t.Fatalf("round %d: DequeueCount %d; want %d", round, m.DequeueCount, counts[m.ID]+1)
				}
				counts[m.ID] = m.DequeueCount
				if !m.NextVisibleAt.Equal(clk.Now().Add(time.Minute)) {
					t.Fatalf("NextVisibleAt = %v; want now+1m", m.NextVisibleAt)
				}
				receipts[m.ID] = m.PopReceipt
			}
		}
		if len(seen) != n {
			t.Fatalf("round %d: saw %d messages; want %d", round, len(seen), n)
		}
		// Update each lease several times; the old receipt must then fail.
		for i, id := range ids {
			r := receipts[id]
			for j := range 3 {
				nr, nv, err := q.UpdateVisibility(ctx, id, r, time.Duration(i+j)*time.Second)
				if err != nil {
					t.Fatalf("UpdateVisibility: %v", err)
				}
				if nr == r {
					t.Fatal("UpdateVisibility returned the same receipt")
				}
				if !nv.Equal(clk.Now().Add(time.Duration(i+j) * time.Second)) {
					t.Fatalf("UpdateVisibility next visible %v; want now+%ds", nv, i+j)
				}
				if _, _, err := q.UpdateVisibility(ctx, id, r, 0); !errors.Is(err, storage.ErrLeaseLost) {
					t.Fatalf("stale receipt: %v; want ErrLeaseLost", err)
				}
				r = nr
			}
			receipts[id] = r
		}
		// Message i is visible after i+2 seconds: advancing 50s exposes 49 in order.
		clk.Advance(50 * time.Second)
		peek, err := q.Peek(ctx, 32)
		if err != nil {
			t.Fatal(err)
		}
		for k, m := range peek {
			if m.ID != ids[k] {
				t.Fatalf("round %d: peek[%d] = %s; want %s (visibility order)", round, k, m.Text, fmt.Sprintf("m%03d", k))
			}
		}
		clk.Advance(10 * time.Minute)
		if c, _ := q.ApproximateCount(ctx); c != n {
			t.Fatalf("count = %d; want %d", c, n)
		}
	}
	// Delete all with current receipts: each exactly once, then ErrNotFound.
	for _, id := range ids {
		if err := q.Delete(ctx, id, receipts[id]); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if err := q.Delete(ctx, id, receipts[id]); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("second Delete: %v; want ErrNotFound", err)
		}
	}
	if c, _ := q.ApproximateCount(ctx); c != 0 {
		t.Fatalf("count after deleting all = %d; want 0", c)
	}
	if got, _ := q.Dequeue(ctx, 32, 0); len(got) != 0 {
		t.Fatalf("Dequeue on empty queue returned %d messages (index left stale entries)", len(got))
	}
}

func TestBadReferences(t *testing.T) {
	t.Parallel()
	s := openStore(t, nil)
	ctx := ctxT(t)
	q := mustQ(t, s, "badref")
	m, err := q.Enqueue(ctx, "x", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Delete(ctx, "", m.PopReceipt); !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("Delete with empty id: %v", err)
	}
	if err := q.Delete(ctx, m.ID, ""); !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("Delete with empty receipt: %v", err)
	}
	if err := q.Delete(ctx, "not-an-id", m.PopReceipt); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Delete with malformed id: %v", err)
	}
	if err := q.Delete(ctx, m.ID, "zz-not-a-receipt"); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("Delete with foreign receipt: %v", err)
	}
	// The receipt Enqueue returned deletes the message.
	if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil {
		t.Fatalf("Delete with Enqueue's receipt: %v", err)
	}
}

func TestConcurrentWritersShareCommits(t *testing.T) {
	t.Parallel()
	s := openStore(t, nil)
	ctx := ctxT(t)
	q := mustQ(t, s, "conc")
	tb, err := s.Table(ctx, "conc")
	if err != nil {
		t.Fatal(err)
	}
	const workers, per = 16, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if _, err := q.Enqueue(ctx, fmt.Sprintf("%d-%d", w, i), 0, 0); err != nil {
					errs <- err
					return
				}
				e := storage.Entity{PartitionKey: fmt.Sprint(w), RowKey: fmt.Sprint(i), Properties: map[string]any{"N": int64(i)}}
				if _, err := tb.Insert(ctx, e); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if c, _ := q.ApproximateCount(ctx); c != workers*per {
		t.Fatalf("count = %d; want %d", c, workers*per)
	}
	if st := s.Stats(); st.Commits >= st.Writes {
		t.Fatalf("Stats %+v: %d concurrent writers never shared a commit", st, workers)
	}
	seen := map[string]bool{}
	for {
		got, err := q.Dequeue(ctx, 32, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		for _, m := range got {
			if seen[m.Text] {
				t.Fatalf("duplicate %s", m.Text)
			}
			seen[m.Text] = true
		}
	}
	if len(seen) != workers*per {
		t.Fatalf("dequeued %d distinct; want %d", len(seen), workers*per)
	}
	total := 0
	cont := ""
	for {
		p, err := tb.Query(ctx, storage.Query{Top: 77, Continuation: cont})
		if err != nil {
			t.Fatal(err)
		}
		total += len(p.Entities)
		if cont = p.Continuation; cont == "" {
			break
		}
	}
	if total != workers*per {
		t.Fatalf("query found %d entities; want %d", total, workers*per)
	}
}

func TestBatchFailureAppliesNothing(t *testing.T) {
	t.Parallel()
	s := openStore(t, nil)
	ctx := ctxT(t)
	tb, err := s.Table(ctx, "batchfail")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "exists"}); err != nil {
		t.Fatal(err)
	}
	ops := []storage.BatchOp{
		{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: "p", RowKey: "a"}},
		{Kind: storage.OpUpsert, Entity: storage.Entity{PartitionKey: "p", RowKey: "b"}},
		{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: "p", RowKey: "exists"}},
	}
	_, err = tb.Batch(ctx, "p", ops)
	var be *storage.BatchError
	if !errors.As(err, &be) || be.Index != 2 || !errors.Is(err, storage.ErrExists) {
		t.Fatalf("Batch: %v; want *BatchError index 2 wrapping ErrExists", err)
	}
	for _, rk := range []string{"a", "b"} {
		if _, err := tb.Get(ctx, "p", rk); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("Get(%s) after failed batch: %v; want ErrNotFound", rk, err)
		}
	}
	// A concurrent successful write in the same commit is unaffected.
	var wg sync.WaitGroup
	var okErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = tb.Batch(ctx, "p", ops)
	}()
	go func() {
		defer wg.Done()
		_, okErr = tb.Insert(ctx, storage.Entity{PartitionKey: "q", RowKey: "r"})
	}()
	wg.Wait()
	if okErr != nil {
		t.Fatal(okErr)
	}
	if _, err := tb.Get(ctx, "q", "r"); err != nil {
		t.Fatal(err)
	}
}

func TestTypesRoundTrip(t *testing.T) {
	t.Parallel()
	s := openStore(t, nil)
	ctx := ctxT(t)
	tb, err := s.Table(ctx, "types")
	if err != nil {
		t.Fatal(err)
	}
	when := time.Date(1700, 3, 4, 5, 6, 7, 123456789, time.UTC)
	props := map[string]any{
		"S": "héllo", "E": "", "B": []byte{0, 1, 2}, "T": true, "F": false,
		"I32": int32(-7), "I64": int64(1) << 60, "D": 3.25, "W": when,
	}
	before := time.Now()
	etag, err := tb.Insert(ctx, storage.Entity{PartitionKey: "", RowKey: "", Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tb.Get(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if got.ETag != etag {
		t.Fatalf("ETag %q; want %q", got.ETag, etag)
	}
	if got.Timestamp.Before(before.Add(-time.Second)) || got.Timestamp.Location() != time.UTC {
		t.Fatalf("Timestamp %v", got.Timestamp)
	}
	if len(got.Properties) != len(props) {
		t.Fatalf("got %d properties; want %d", len(got.Properties), len(props))
	}
	for k, v := range props {
		g := got.Properties[k]
		if fmt.Sprintf("%T %v", g, g) != fmt.Sprintf("%T %v", v, v) {
			t.Fatalf("property %s = %T %v; want %T %v", k, g, g, v, v)
		}
	}
	if g := got.Properties["W"].(time.Time); !g.Equal(when) || g.Location() != time.UTC {
		t.Fatalf("time %v; want %v UTC", g, when)
	}
}
