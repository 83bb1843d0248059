package storagetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// sampleText exercises XML and JSON special characters, multi-byte UTF-8 and
// whitespace. (A carriage return is left out: XML transports normalise it.)
const sampleText = `{"id":"1","type":"x"} <tag attr='v'> & &amp; "quoted" ünïcödé 日本語 🚀` + "\t tab\n newline  "

// leaseLong is a visibility the suite never waits out.
const leaseLong = 30 * time.Second

func queueCases() []testCase {
	return []testCase{
		{"RoundTrip", testQueueRoundTrip},
		{"DequeueCountAndReceipts", testQueueDequeueCountAndReceipts},
		{"UpdateVisibilityStaleReceipt", testQueueUpdateVisibilityStaleReceipt},
		{"DeleteThenGone", testQueueDeleteThenGone},
		{"InvisibleUntilTimeout", testQueueInvisibleUntilTimeout},
		{"UpdateVisibilityZero", testQueueUpdateVisibilityZero},
		{"UpdateVisibilityPreservesText", testQueueUpdateVisibilityPreservesText},
		{"EnqueueVisibilityDelay", testQueueEnqueueVisibilityDelay},
		{"EnqueueReceiptHoldsTheMessage", testQueueEnqueueReceiptHoldsTheMessage},
		{"TTLExpiry", testQueueTTLExpiry},
		{"NoExpiry", testQueueNoExpiry},
		{"BatchSizes", testQueueBatchSizes},
		{"PeekChangesNothing", testQueuePeekChangesNothing},
		{"ApproximateCount", testQueueApproximateCount},
		{"MessageSizeLimit", testQueueMessageSizeLimit},
		{"LeaseExpiry", testQueueLeaseExpiry},
		{"EmptyDequeue", testQueueEmptyDequeue},
		{"OpenIdempotent", testQueueOpenIdempotent},
	}
}

func testQueueRoundTrip(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	before := time.Now()
	m, err := q.Enqueue(ctx, sampleText, 0, 0)
	must(t, "Enqueue", err)
	if m.ID == "" || m.PopReceipt == "" {
		t.Fatalf("Enqueue result has ID %q, PopReceipt %q; want both set", m.ID, m.PopReceipt)
	}
	if m.Text != "" {
		t.Fatalf("Enqueue result Text = %q, want empty (the contract leaves it empty)", m.Text)
	}
	if m.DequeueCount != 0 {
		t.Fatalf("Enqueue result DequeueCount = %d, want 0", m.DequeueCount)
	}
	near(t, "Enqueue InsertedAt", m.InsertedAt, before, clockTolerance)
	near(t, "Enqueue ExpiresAt (ttl 0 = DefaultTTL)", m.ExpiresAt, m.InsertedAt.Add(storage.DefaultTTL), clockTolerance)
	near(t, "Enqueue NextVisibleAt (no delay)", m.NextVisibleAt, m.InsertedAt, clockTolerance)

	ms, err := q.Dequeue(ctx, 1, leaseLong)
	must(t, "Dequeue", err)
	if len(ms) != 1 {
		t.Fatalf("Dequeue returned %d messages, want 1", len(ms))
	}
	d := ms[0]
	if d.ID != m.ID {
		t.Fatalf("dequeued ID %q, want %q", d.ID, m.ID)
	}
	if d.Text != sampleText {
		t.Fatalf("dequeued Text %q, want %q", d.Text, sampleText)
	}
	if d.DequeueCount != 1 {
		t.Fatalf("DequeueCount = %d, want 1", d.DequeueCount)
	}
	if d.PopReceipt == "" || d.PopReceipt == m.PopReceipt {
		t.Fatalf("dequeued PopReceipt %q; want a new, non-empty receipt (enqueue gave %q)", d.PopReceipt, m.PopReceipt)
	}
	near(t, "dequeued InsertedAt", d.InsertedAt, m.InsertedAt, time.Second)
	near(t, "dequeued ExpiresAt", d.ExpiresAt, m.ExpiresAt, time.Second)
	near(t, "dequeued NextVisibleAt", d.NextVisibleAt, time.Now().Add(leaseLong), clockTolerance)
}

func testQueueDequeueCountAndReceipts(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	m, err := q.Enqueue(ctx, "count", 0, 0)
	must(t, "Enqueue", err)
	seen := map[string]string{m.PopReceipt: "enqueue"}
	record := func(r, where string) {
		t.Helper()
		if r == "" {
			t.Fatalf("%s returned an empty pop receipt", where)
		}
		if prev, dup := seen[r]; dup {
			t.Fatalf("%s returned pop receipt %q, already returned by %s; receipts must change every time", where, r, prev)
		}
		seen[r] = where
	}
	for i := int64(1); i <= 3; i++ {
		d := dequeueOneEventually(ctx, t, q, leaseLong, time.Now().Add(5*time.Second), fmt.Sprintf("dequeue #%d", i))
		if d.ID != m.ID {
			t.Fatalf("dequeue #%d got ID %q, want %q", i, d.ID, m.ID)
		}
		if d.DequeueCount != i {
			t.Fatalf("dequeue #%d: DequeueCount = %d, want %d", i, d.DequeueCount, i)
		}
		record(d.PopReceipt, fmt.Sprintf("dequeue #%d", i))
		r1, _, err := q.UpdateVisibility(ctx, d.ID, d.PopReceipt, leaseLong)
		must(t, "UpdateVisibility", err)
		record(r1, fmt.Sprintf("UpdateVisibility #%d.1", i))
		r2, _, err := q.UpdateVisibility(ctx, d.ID, r1, 0)
		must(t, "UpdateVisibility(0)", err)
		record(r2, fmt.Sprintf("UpdateVisibility #%d.2", i))
	}
}

func testQueueUpdateVisibilityStaleReceipt(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	_, err := q.Enqueue(ctx, "stale", 0, 0)
	must(t, "Enqueue", err)
	d := dequeueOneEventually(ctx, t, q, leaseLong, time.Now().Add(5*time.Second), "the message")
	r2, next, err := q.UpdateVisibility(ctx, d.ID, d.PopReceipt, 2*leaseLong)
	must(t, "UpdateVisibility", err)
	if r2 == "" || r2 == d.PopReceipt {
		t.Fatalf("UpdateVisibility returned receipt %q; want a new one (old %q)", r2, d.PopReceipt)
	}
	near(t, "UpdateVisibility nextVisibleAt", next, time.Now().Add(2*leaseLong), clockTolerance)

	_, _, err = q.UpdateVisibility(ctx, d.ID, d.PopReceipt, leaseLong)
	wantErr(t, "UpdateVisibility with the replaced receipt", err, storage.ErrLeaseLost)
	err = q.Delete(ctx, d.ID, d.PopReceipt)
	wantErr(t, "Delete with the replaced receipt", err, storage.ErrLeaseLost)
	// The failed calls must not have disturbed the current lease.
	ms, err := q.Peek(ctx, 1)
	must(t, "Peek", err)
	if len(ms) != 0 {
		t.Fatalf("Peek after failed stale calls returned %d messages; the message must stay invisible", len(ms))
	}
	must(t, "Delete with the current receipt", q.Delete(ctx, d.ID, r2))
}

// testQueueDeleteThenGone: a second delete of a deleted message may give
// ErrNotFound or ErrLeaseLost — Azure answers 404 MessageNotFound, which the
// Azure driver reports as a lost lease because Azure also uses it for stale
// receipts.
func testQueueDeleteThenGone(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	_, err := q.Enqueue(ctx, "gone", 0, 0)
	must(t, "Enqueue", err)
	d := dequeueOneEventually(ctx, t, q, leaseLong, time.Now().Add(5*time.Second), "the message")
	must(t, "Delete", q.Delete(ctx, d.ID, d.PopReceipt))
	wantErrEither(t, "second Delete", q.Delete(ctx, d.ID, d.PopReceipt), storage.ErrNotFound, storage.ErrLeaseLost)
	_, _, err = q.UpdateVisibility(ctx, d.ID, d.PopReceipt, 0)
	wantErrEither(t, "UpdateVisibility of a deleted message", err, storage.ErrNotFound, storage.ErrLeaseLost)
	ms, err := q.Peek(ctx, 32)
	must(t, "Peek", err)
	if len(ms) != 0 {
		t.Fatalf("Peek after Delete returned %d messages, want 0", len(ms))
	}
	ms, err = q.Dequeue(ctx, 32, leaseLong)
	must(t, "Dequeue", err)
	if len(ms) != 0 {
		t.Fatalf("Dequeue after Delete returned %d messages, want 0", len(ms))
	}
	n, err := q.ApproximateCount(ctx)
	must(t, "ApproximateCount", err)
	if n != 0 {
		t.Fatalf("ApproximateCount after Delete = %d, want 0", n)
	}
}

func testQueueInvisibleUntilTimeout(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	_, err := q.Enqueue(ctx, "invisible", 0, 0)
	must(t, "Enqueue", err)
	// 3 s leaves a wide margin for the "still invisible" checks on a loaded machine.
	d1 := dequeueOneEventually(ctx, t, q, 3*time.Second, time.Now().Add(5*time.Second), "the message")
	near(t, "NextVisibleAt", d1.NextVisibleAt, time.Now().Add(3*time.Second), clockTolerance)
	ms, err := q.Dequeue(ctx, 32, leaseLong)
	must(t, "Dequeue while invisible", err)
	if len(ms) != 0 {
		t.Fatalf("Dequeue while the message is invisible (until %s, now %s) returned %d messages", d1.NextVisibleAt.Format(time.RFC3339Nano), time.Now().Format(time.RFC3339Nano), len(ms))
	}
	ms, err = q.Peek(ctx, 32)
	must(t, "Peek while invisible", err)
	if len(ms) != 0 {
		t.Fatalf("Peek while the message is invisible returned %d messages", len(ms))
	}
	waitUntil(ctx, t, d1.NextVisibleAt)
	d2 := dequeueOneEventually(ctx, t, q, leaseLong, d1.NextVisibleAt.Add(5*time.Second), "the message to become visible again")
	if d2.ID != d1.ID || d2.DequeueCount != 2 || d2.Text != "invisible" {
		t.Fatalf("after the timeout got ID %q count %d text %q; want ID %q count 2 text %q", d2.ID, d2.DequeueCount, d2.Text, d1.ID, "invisible")
	}
	if d2.PopReceipt == d1.PopReceipt {
		t.Fatal("second dequeue returned the same pop receipt")
	}
}

func testQueueUpdateVisibilityZero(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	_, err := q.Enqueue(ctx, "zero", 0, 0)
	must(t, "Enqueue", err)
	d1 := dequeueOneEventually(ctx, t, q, leaseLong, time.Now().Add(5*time.Second), "the message")
	_, next, err := q.UpdateVisibility(ctx, d1.ID, d1.PopReceipt, 0)
	must(t, "UpdateVisibility(0)", err)
	near(t, "UpdateVisibility(0) nextVisibleAt", next, time.Now(), clockTolerance)
	// Visible at once: well before the 30 s lease would have ended.
	d2 := dequeueOneEventually(ctx, t, q, leaseLong, time.Now().Add(3*time.Second), "the message to be visible at once")
	if d2.ID != d1.ID || d2.DequeueCount != 2 {
		t.Fatalf("got ID %q count %d; want ID %q count 2", d2.ID, d2.DequeueCount, d1.ID)
	}
}

func testQueueUpdateVisibilityPreservesText(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	_, err := q.Enqueue(ctx, sampleText, 0, 0)
	must(t, "Enqueue", err)
	d := dequeueOneEventually(ctx, t, q, leaseLong, time.Now().Add(5*time.Second), "the message")
	r, _, err := q.UpdateVisibility(ctx, d.ID, d.PopReceipt, leaseLong)
	must(t, "UpdateVisibility", err)
	_, _, err = q.UpdateVisibility(ctx, d.ID, r, 0)
	must(t, "UpdateVisibility(0)", err)
	d2 := dequeueOneEventually(ctx, t, q, leaseLong, time.Now().Add(3*time.Second), "the message")
	if d2.Text != sampleText {
		t.Fatalf("text after UpdateVisibility = %q, want %q", d2.Text, sampleText)
	}
}

func testQueueEnqueueVisibilityDelay(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	before := time.Now()
	m, err := q.Enqueue(ctx, "delayed", 3*time.Second, 0)
	must(t, "Enqueue with delay", err)
	after := time.Now()
	// Not early (a wake-up at NextVisibleAt finds the message), and no later
	// than the answer plus the delay (within the clocks' tolerance).
	if m.NextVisibleAt.Before(before.Add(3 * time.Second)) {
		t.Fatalf("NextVisibleAt of a delayed message = %s, early: the call started at %s with a 3 s delay", m.NextVisibleAt.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano))
	}
	if lim := after.Add(3*time.Second + clockTolerance); m.NextVisibleAt.After(lim) {
		t.Fatalf("NextVisibleAt of a delayed message = %s, later than the answer (%s) plus the 3 s delay and the clock tolerance %s", m.NextVisibleAt.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano), clockTolerance)
	}
	ms, err := q.Dequeue(ctx, 32, leaseLong)
	must(t, "Dequeue", err)
	if len(ms) != 0 {
		t.Fatalf("Dequeue before the delay ended (visible at %s, now %s) returned %d messages", m.NextVisibleAt.Format(time.RFC3339Nano), time.Now().Format(time.RFC3339Nano), len(ms))
	}
	ms, err = q.Peek(ctx, 32)
	must(t, "Peek", err)
	if len(ms) != 0 {
		t.Fatalf("Peek before the delay ended returned %d messages", len(ms))
	}
	n, err := q.ApproximateCount(ctx)
	must(t, "ApproximateCount", err)
	if n != 1 {
		t.Fatalf("ApproximateCount with one delayed message = %d, want 1", n)
	}
	waitUntil(ctx, t, m.NextVisibleAt)
	d := dequeueOneEventually(ctx, t, q, leaseLong, m.NextVisibleAt.Add(5*time.Second), "the delayed message")
	if d.ID != m.ID || d.DequeueCount != 1 || d.Text != "delayed" {
		t.Fatalf("got ID %q count %d text %q; want ID %q count 1 text %q", d.ID, d.DequeueCount, d.Text, m.ID, "delayed")
	}
}

// testQueueEnqueueReceiptHoldsTheMessage: the pop receipt Enqueue returns
// lets its caller hold a message enqueued invisible (renew it with
// UpdateVisibility, delete it) without dequeuing it — the processor's
// in-process hand-off — and the message's dequeue count stays 0 until it
// is dequeued.
func testQueueEnqueueReceiptHoldsTheMessage(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	m, err := q.Enqueue(ctx, "held", leaseLong, 0)
	must(t, "Enqueue invisible", err)
	if m.ID == "" || m.PopReceipt == "" || m.NextVisibleAt.IsZero() || m.InsertedAt.IsZero() {
		t.Fatalf("Enqueue returned %+v: want ID, pop receipt, inserted and next-visible times", m)
	}
	near(t, "NextVisibleAt of the held message", m.NextVisibleAt, m.InsertedAt.Add(leaseLong), 1500*time.Millisecond)
	r, next, err := q.UpdateVisibility(ctx, m.ID, m.PopReceipt, leaseLong)
	must(t, "UpdateVisibility with the enqueue's receipt", err)
	near(t, "renewed nextVisibleAt", next, time.Now().Add(leaseLong), clockTolerance+time.Second)
	if _, _, err := q.UpdateVisibility(ctx, m.ID, m.PopReceipt, leaseLong); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("UpdateVisibility with the enqueue's receipt after a renewal: %v, want ErrLeaseLost", err)
	}
	// Released at once: dequeued for the first time (count 1).
	r, _, err = q.UpdateVisibility(ctx, m.ID, r, 0)
	must(t, "UpdateVisibility(0)", err)
	d := dequeueOneEventually(ctx, t, q, leaseLong, time.Now().Add(5*time.Second), "the released message")
	if d.ID != m.ID || d.DequeueCount != 1 || d.Text != "held" {
		t.Fatalf("got ID %q count %d text %q; want ID %q count 1 text held", d.ID, d.DequeueCount, d.Text, m.ID)
	}
	if err := q.Delete(ctx, m.ID, r); !errors.Is(err, storage.ErrLeaseLost) && !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Delete with a receipt from before the dequeue: %v, want ErrLeaseLost", err)
	}
	must(t, "Delete", q.Delete(ctx, d.ID, d.PopReceipt))
	// Deleted with the enqueue's own receipt, never dequeued.
	m2, err := q.Enqueue(ctx, "held2", leaseLong, 0)
	must(t, "Enqueue invisible", err)
	must(t, "Delete with the enqueue's receipt", q.Delete(ctx, m2.ID, m2.PopReceipt))
	n, err := q.ApproximateCount(ctx)
	must(t, "ApproximateCount", err)
	if n != 0 {
		t.Fatalf("ApproximateCount after deleting both = %d, want 0", n)
	}
}

func testQueueTTLExpiry(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	// Azure counts TTL in whole seconds; 3 s leaves room to see it alive first.
	m, err := q.Enqueue(ctx, "short-lived", 0, 3*time.Second)
	must(t, "Enqueue with ttl 3s", err)
	near(t, "ExpiresAt", m.ExpiresAt, m.InsertedAt.Add(3*time.Second), 1500*time.Millisecond)
	ms, err := q.Peek(ctx, 32)
	must(t, "Peek", err)
	if len(ms) != 1 {
		t.Fatalf("Peek before expiry returned %d messages, want 1", len(ms))
	}
	waitUntil(ctx, t, m.ExpiresAt)
	poll(ctx, t, m.ExpiresAt.Add(5*time.Second), "the expired message to disappear from Peek", func() bool {
		ms, err := q.Peek(ctx, 32)
		must(t, "Peek", err)
		return len(ms) == 0
	})
	ms, err = q.Dequeue(ctx, 32, leaseLong)
	must(t, "Dequeue", err)
	if len(ms) != 0 {
		t.Fatalf("Dequeue after expiry returned %d messages (%q), want 0", len(ms), ms[0].Text)
	}
}

func testQueueNoExpiry(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	m, err := q.Enqueue(ctx, "forever", 0, storage.NoExpiry)
	must(t, "Enqueue NoExpiry", err)
	if !m.ExpiresAt.IsZero() {
		t.Fatalf("Enqueue with NoExpiry: ExpiresAt = %s, want the zero time", m.ExpiresAt)
	}
	ms, err := q.Peek(ctx, 1)
	must(t, "Peek", err)
	if len(ms) != 1 || !ms[0].ExpiresAt.IsZero() {
		t.Fatalf("Peek of a NoExpiry message: %+v; want one message with zero ExpiresAt", ms)
	}
	d := dequeueOneEventually(ctx, t, q, leaseLong, time.Now().Add(5*time.Second), "the message")
	if !d.ExpiresAt.IsZero() {
		t.Fatalf("dequeued NoExpiry message: ExpiresAt = %s, want the zero time", d.ExpiresAt)
	}
	// A long explicit ttl is honoured too.
	m2, err := q.Enqueue(ctx, "hour", 0, time.Hour)
	must(t, "Enqueue ttl 1h", err)
	near(t, "ExpiresAt (ttl 1h)", m2.ExpiresAt, m2.InsertedAt.Add(time.Hour), clockTolerance)
}

func enqueueN(t testing.TB, q storage.Queue, n int, prefix string) map[string]bool {
	t.Helper()
	ctx := caseCtx(t)
	var mu sync.Mutex
	ids := make(map[string]bool, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := int64(-1)
	for range 16 {
		wg.Go(func() {
			for {
				i := atomic.AddInt64(&next, 1)
				if i >= int64(n) {
					return
				}
				m, err := q.Enqueue(ctx, fmt.Sprintf("%s-%d", prefix, i), 0, 0)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				ids[m.ID] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Enqueue: %v", err)
	}
	if len(ids) != n {
		t.Fatalf("%d enqueues returned %d distinct IDs", n, len(ids))
	}
	return ids
}

func testQueueBatchSizes(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	ids := enqueueN(t, q, 40, "batch")
	for n := 1; n <= storage.MaxDequeue; n++ {
		ms, err := q.Peek(ctx, n)
		must(t, fmt.Sprintf("Peek(%d)", n), err)
		if len(ms) != n {
			t.Fatalf("Peek(%d) with 40 visible messages returned %d", n, len(ms))
		}
	}
	got := map[string]bool{}
	for _, n := range []int{1, 7, 32} {
		ms, err := q.Dequeue(ctx, n, leaseLong)
		must(t, fmt.Sprintf("Dequeue(%d)", n), err)
		want := min(n, 40-len(got))
		if len(ms) != want {
			t.Fatalf("Dequeue(%d) with %d visible messages returned %d, want %d", n, 40-len(got), len(ms), want)
		}
		for _, m := range ms {
			if !ids[m.ID] || got[m.ID] {
				t.Fatalf("Dequeue(%d) returned unknown or repeated ID %q", n, m.ID)
			}
			got[m.ID] = true
		}
	}
	if len(got) != 40 {
		t.Fatalf("dequeued %d distinct messages, want 40", len(got))
	}
	ms, err := q.Dequeue(ctx, 32, leaseLong)
	must(t, "Dequeue", err)
	if len(ms) != 0 {
		t.Fatalf("Dequeue after taking all 40 returned %d", len(ms))
	}
}

func testQueuePeekChangesNothing(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	m, err := q.Enqueue(ctx, "peek", 0, 0)
	must(t, "Enqueue", err)
	for i := range 2 {
		ms, err := q.Peek(ctx, 32)
		must(t, "Peek", err)
		if len(ms) != 1 {
			t.Fatalf("Peek #%d returned %d messages, want 1", i+1, len(ms))
		}
		p := ms[0]
		if p.ID != m.ID || p.Text != "peek" || p.DequeueCount != 0 || p.PopReceipt != "" || !p.NextVisibleAt.IsZero() {
			t.Fatalf("Peek #%d = ID %q text %q count %d receipt %q next %s; want ID %q text %q count 0, empty receipt, zero NextVisibleAt", i+1, p.ID, p.Text, p.DequeueCount, p.PopReceipt, p.NextVisibleAt, m.ID, "peek")
		}
		near(t, "peeked InsertedAt", p.InsertedAt, m.InsertedAt, time.Second)
	}
	d := dequeueOneEventually(ctx, t, q, leaseLong, time.Now().Add(5*time.Second), "the message")
	if d.DequeueCount != 1 {
		t.Fatalf("DequeueCount after two peeks and one dequeue = %d, want 1", d.DequeueCount)
	}
	ms, err := q.Peek(ctx, 32)
	must(t, "Peek", err)
	if len(ms) != 0 {
		t.Fatalf("Peek of a dequeued (invisible) message returned %d, want 0", len(ms))
	}
	// Peek must not have changed the receipt Dequeue handed out.
	must(t, "Delete after Peek", q.Delete(ctx, d.ID, d.PopReceipt))
}

func testQueueApproximateCount(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	count := func() int {
		n, err := q.ApproximateCount(ctx)
		must(t, "ApproximateCount", err)
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("ApproximateCount of a new queue = %d, want 0", n)
	}
	enqueueN(t, q, 5, "count")
	if n := count(); n != 5 {
		t.Fatalf("ApproximateCount after 5 enqueues = %d, want 5", n)
	}
	ms, err := q.Dequeue(ctx, 2, leaseLong)
	must(t, "Dequeue", err)
	if len(ms) != 2 {
		t.Fatalf("Dequeue(2) returned %d", len(ms))
	}
	if n := count(); n != 5 {
		t.Fatalf("ApproximateCount with 2 of 5 invisible = %d, want 5 (invisible messages count)", n)
	}
	for _, m := range ms {
		must(t, "Delete", q.Delete(ctx, m.ID, m.PopReceipt))
	}
	if n := count(); n != 3 {
		t.Fatalf("ApproximateCount after deleting 2 of 5 = %d, want 3", n)
	}
}

func testQueueMessageSizeLimit(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	// 64 KiB exactly, with a multi-byte and XML-special tail.
	tail := "é<&>"
	text := strings.Repeat("x", storage.MaxMessageBytes-len(tail)) + tail
	if len(text) != storage.MaxMessageBytes {
		t.Fatalf("test bug: text is %d bytes", len(text))
	}
	m, err := q.Enqueue(ctx, text, 0, 0)
	must(t, "Enqueue of exactly 64 KiB", err)
	d := dequeueOneEventually(ctx, t, q, leaseLong, time.Now().Add(5*time.Second), "the 64 KiB message")
	if d.ID != m.ID || d.Text != text {
		t.Fatalf("64 KiB message came back with ID %q (want %q) and %d bytes of text (equal: %v)", d.ID, m.ID, len(d.Text), d.Text == text)
	}
	_, err = q.Enqueue(ctx, text+"y", 0, 0)
	wantErr(t, "Enqueue of 64 KiB + 1 byte", err, storage.ErrTooLarge, "64 KiB")
	_, err = q.Enqueue(ctx, strings.Repeat("é", storage.MaxMessageBytes/2)+"y", 0, 0)
	wantErr(t, "Enqueue of 64 KiB + 1 byte of 2-byte runes", err, storage.ErrTooLarge, "64 KiB")
	n, err := q.ApproximateCount(ctx)
	must(t, "ApproximateCount", err)
	if n != 1 {
		t.Fatalf("ApproximateCount after refused enqueues = %d, want 1", n)
	}
}

func testQueueLeaseExpiry(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	// A second handle on the same queue plays the second dequeuer.
	q2, err := s.Queue(ctx, q.Name())
	must(t, "Store.Queue (second handle)", err)
	_, err = q.Enqueue(ctx, "lease", 0, 0)
	must(t, "Enqueue", err)
	d1 := dequeueOneEventually(ctx, t, q, time.Second, time.Now().Add(5*time.Second), "the message")
	waitUntil(ctx, t, d1.NextVisibleAt)
	d2 := dequeueOneEventually(ctx, t, q2, leaseLong, d1.NextVisibleAt.Add(5*time.Second), "the second dequeuer to take the expired lease")
	if d2.ID != d1.ID || d2.DequeueCount != 2 {
		t.Fatalf("second dequeuer got ID %q count %d; want ID %q count 2", d2.ID, d2.DequeueCount, d1.ID)
	}
	_, _, err = q.UpdateVisibility(ctx, d1.ID, d1.PopReceipt, leaseLong)
	wantErr(t, "UpdateVisibility with the first dequeuer's receipt", err, storage.ErrLeaseLost)
	wantErr(t, "Delete with the first dequeuer's receipt", q.Delete(ctx, d1.ID, d1.PopReceipt), storage.ErrLeaseLost)
	must(t, "Delete by the second dequeuer", q2.Delete(ctx, d2.ID, d2.PopReceipt))
}

func testQueueEmptyDequeue(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	ms, err := q.Dequeue(ctx, 32, leaseLong)
	must(t, "Dequeue of an empty queue", err)
	if len(ms) != 0 {
		t.Fatalf("Dequeue of an empty queue returned %d messages", len(ms))
	}
	ms, err = q.Peek(ctx, 32)
	must(t, "Peek of an empty queue", err)
	if len(ms) != 0 {
		t.Fatalf("Peek of an empty queue returned %d messages", len(ms))
	}
}

func testQueueOpenIdempotent(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q1 := newQueue(t, s)
	m, err := q1.Enqueue(ctx, "shared", 0, 0)
	must(t, "Enqueue", err)
	q2, err := s.Queue(ctx, q1.Name())
	must(t, "Store.Queue on an existing name", err)
	ms, err := q2.Peek(ctx, 32)
	must(t, "Peek", err)
	if len(ms) != 1 || ms[0].ID != m.ID {
		t.Fatalf("second handle sees %d messages; want the one enqueued through the first", len(ms))
	}
}
