package embedded

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cmdq-dev/cmdq/storage"
)

// checkIndex asserts that the visibility index holds exactly one entry per
// message, each carrying the message's lease state (format 4), that no
// entry lies below the scan start, and that the counter (stored and in
// memory) equals the number of messages.
func checkIndex(t *testing.T, s *Store, name string) int {
	t.Helper()
	sq, err := s.Queue(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	q := sq.(*queue)
	msgs := map[string]int{} // id → index entries
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: q.msgKey(nil), UpperBound: prefixEnd(q.msgKey(nil))})
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		if len(it.Value()) < headerLen {
			t.Fatalf("message record %x of %d bytes", it.Key(), len(it.Value()))
		}
		msgs[string(it.Key()[len(q.prefix)+1:])] = 0
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	it, err = s.db.NewIter(&pebble.IterOptions{LowerBound: q.indexStart(), UpperBound: q.indexEnd()})
	if err != nil {
		t.Fatal(err)
	}
	idx := 0
	for ok := it.First(); ok; ok = it.Next() {
		idx++
		_, id, good := q.indexParts(it.Key())
		if !good {
			t.Fatalf("malformed index key %x", it.Key())
		}
		n, found := msgs[string(id)]
		if !found {
			t.Fatalf("index entry %x has no message", it.Key())
		}
		if n > 0 {
			t.Fatalf("index entry %x is the message's second", it.Key())
		}
		msgs[string(id)] = n + 1
		if len(it.Value()) != ivLen {
			t.Fatalf("index entry %x has a value of %d bytes, want its lease state (%d)", it.Key(), len(it.Value()), ivLen)
		}
		if bytes.Compare(it.Key(), q.low) < 0 {
			t.Fatalf("index entry %x lies below the scan start %x", it.Key(), q.low)
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if idx != len(msgs) {
		t.Fatalf("%d index entries for %d messages", idx, len(msgs))
	}
	c, found, err := s.get(q.countKey())
	if err != nil || !found {
		t.Fatalf("counter: %v, found %v", err, found)
	}
	if i64(c) != int64(len(msgs)) || q.count.Load() != int64(len(msgs)) {
		t.Fatalf("counter %d (in memory %d) for %d messages", i64(c), q.count.Load(), len(msgs))
	}
	return len(msgs)
}

// TestIndexConsistencyUnderChurn runs concurrent enqueues, dequeues,
// visibility updates, deletes and expiries on a fake clock and checks the
// index after every phase.
func TestIndexConsistencyUnderChurn(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	s, err := Open(filepath.Join(t.TempDir(), "churn.db"), &Options{Now: now, PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	qi, err := s.Queue(ctx, "churn")
	if err != nil {
		t.Fatal(err)
	}
	q := qi.(*queue)
	for phase := range 6 {
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(phase), uint64(w)))
				for range 40 {
					ttl := []time.Duration{0, storage.NoExpiry, 3 * time.Second}[r.IntN(3)]
					if _, err := q.Enqueue(ctx, "x", time.Duration(r.IntN(3))*time.Second, ttl); err != nil {
						errs <- err
						return
					}
					msgs, err := q.Dequeue(ctx, 1+r.IntN(5), time.Duration(r.IntN(4))*time.Second)
					if err != nil {
						errs <- err
						return
					}
					for _, m := range msgs {
						switch r.IntN(3) {
						case 0:
							err = q.Delete(ctx, m.ID, m.PopReceipt)
						case 1:
							_, _, err = q.UpdateVisibility(ctx, m.ID, m.PopReceipt, time.Duration(r.IntN(3))*time.Second)
						}
						// Another worker may have re-dequeued it after a
						// zero-length lease: that is the only allowed failure.
						if err != nil && !errors.Is(err, storage.ErrLeaseLost) && !errors.Is(err, storage.ErrNotFound) {
							errs <- err
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		checkIndex(t, s, "churn")
		clock.Add(int64(2 * time.Second))
	}
	// Let everything become visible and expire what can expire, then drain.
	clock.Add(int64(time.Hour))
	for {
		msgs, err := q.Dequeue(ctx, 32, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := checkIndex(t, s, "churn"); n != 0 {
		t.Fatalf("%d messages left after draining", n)
	}
}
