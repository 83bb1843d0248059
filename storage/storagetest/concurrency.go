package storagetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

func concurrencyCases() []testCase {
	return []testCase{
		{"DequeuersNeverShare", testConcurrencyDequeuers},
		{"InsertRace", testConcurrencyInsertRace},
		{"UpdateRounds", testConcurrencyUpdateRounds},
		{"DeleteRace", testConcurrencyDeleteRace},
		{"BatchRace", testConcurrencyBatchRace},
	}
}

// race runs fn(i) in n goroutines released together and returns their errors.
func race(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// oneWinner fails unless exactly one error is nil and every other wraps one
// of losers; it returns the winner's index.
func oneWinner(t testing.TB, what string, errs []error, losers ...error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("%s: goroutines %d and %d both succeeded; want exactly one winner", what, winner, i)
			}
			winner = i
			continue
		}
		ok := false
		for _, l := range losers {
			ok = ok || errors.Is(err, l)
		}
		if !ok {
			t.Fatalf("%s: goroutine %d failed with %v; want one of %v", what, i, err, losers)
		}
	}
	if winner < 0 {
		t.Fatalf("%s: no goroutine succeeded; want exactly one winner (errors: %v)", what, errs)
	}
	return winner
}

// testConcurrencyDequeuers: 8 goroutines drain 200 messages with a 30 s lease;
// every message must be handed out exactly once.
func testConcurrencyDequeuers(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	const total = 200
	ids := enqueueN(t, q, total, "conc")
	var mu sync.Mutex
	seen := make(map[string]int, total)
	var taken atomic.Int64
	deadline := time.Now().Add(30 * time.Second)
	errs := race(8, func(int) error {
		for taken.Load() < total {
			if time.Now().After(deadline) {
				return fmt.Errorf("timed out with %d of %d messages taken", taken.Load(), total)
			}
			ms, err := q.Dequeue(ctx, 16, leaseLong)
			if err != nil {
				return fmt.Errorf("dequeue: %w", err)
			}
			for _, m := range ms {
				mu.Lock()
				seen[m.ID]++
				mu.Unlock()
				taken.Add(1)
				if m.DequeueCount != 1 {
					return fmt.Errorf("message %s has DequeueCount %d, want 1 (it was handed out before)", m.ID, m.DequeueCount)
				}
				if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil {
					return fmt.Errorf("delete: %w", err)
				}
			}
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("dequeuer %d: %v", i, err)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("message %s was handed out %d times under a 30 s lease", id, n)
		}
		if !ids[id] {
			t.Fatalf("dequeued unknown message ID %s", id)
		}
	}
	if len(seen) != total {
		t.Fatalf("dequeued %d distinct messages, want %d", len(seen), total)
	}
	n, err := q.ApproximateCount(ctx)
	must(t, "ApproximateCount", err)
	if n != 0 {
		t.Fatalf("ApproximateCount after draining = %d, want 0", n)
	}
}

func testConcurrencyInsertRace(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	for round := range 5 {
		rk := fmt.Sprintf("r%d", round)
		etags := make([]string, 16)
		errs := race(16, func(i int) error {
			var err error
			etags[i], err = tb.Insert(ctx, ent("p", rk, map[string]any{"W": int32(i)}))
			return err
		})
		w := oneWinner(t, "concurrent inserts of "+rk, errs, storage.ErrExists)
		e, err := tb.Get(ctx, "p", rk)
		must(t, "Get", err)
		if e.Properties["W"] != int32(w) || e.ETag != etags[w] {
			t.Fatalf("%s holds W = %v ETag %q; the winner was %d with ETag %q", rk, e.Properties["W"], e.ETag, w, etags[w])
		}
	}
}

func testConcurrencyUpdateRounds(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	etag, err := tb.Insert(ctx, ent("p", "r", map[string]any{"Round": int32(-1), "W": int32(-1), "Keep": "k"}))
	must(t, "Insert", err)
	for round := range 10 {
		mode := storage.UpdateMode(round % 2)
		etags := make([]string, 8)
		errs := race(8, func(i int) error {
			var err error
			etags[i], err = tb.Update(ctx, ent("p", "r", map[string]any{"Round": int32(round), "W": int32(i), "Keep": "k"}), mode, etag)
			return err
		})
		w := oneWinner(t, fmt.Sprintf("round %d of conditional updates", round), errs, storage.ErrConflict)
		e, err := tb.Get(ctx, "p", "r")
		must(t, "Get", err)
		if e.Properties["Round"] != int32(round) || e.Properties["W"] != int32(w) || e.ETag != etags[w] {
			t.Fatalf("round %d: entity holds Round %v W %v ETag %q; winner %d returned ETag %q", round, e.Properties["Round"], e.Properties["W"], e.ETag, w, etags[w])
		}
		etag = etags[w]
	}
}

func testConcurrencyDeleteRace(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	for round := range 3 {
		rk := fmt.Sprintf("r%d", round)
		etag, err := tb.Insert(ctx, ent("p", rk, nil))
		must(t, "Insert", err)
		errs := race(8, func(int) error { return tb.Delete(ctx, "p", rk, etag) })
		// A loser finds the entity gone (ErrNotFound) or, depending on the
		// order of checks, a different ETag (ErrConflict).
		oneWinner(t, "concurrent deletes of "+rk, errs, storage.ErrNotFound, storage.ErrConflict)
		_, err = tb.Get(ctx, "p", rk)
		wantErr(t, "Get after the delete race", err, storage.ErrNotFound)
	}
}

func testConcurrencyBatchRace(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	errs := race(8, func(i int) error {
		var ops []storage.BatchOp
		for j := range 10 {
			ops = append(ops, storage.BatchOp{Kind: storage.OpInsert, Entity: ent("p", fmt.Sprintf("r%d", j), map[string]any{"W": int32(i)})})
		}
		_, err := tb.Batch(ctx, "p", ops)
		return err
	})
	w := oneWinner(t, "concurrent batches inserting the same rows", errs, storage.ErrExists)
	for i, err := range errs {
		if i != w {
			wantBatchErr(t, fmt.Sprintf("losing batch %d", i), err, 0, storage.ErrExists)
		}
	}
	page, err := tb.Query(ctx, storage.Query{PartitionKey: "p"})
	must(t, "Query", err)
	if len(page.Entities) != 10 {
		t.Fatalf("after the batch race the partition holds %d entities, want 10", len(page.Entities))
	}
	for _, e := range page.Entities {
		if e.Properties["W"] != int32(w) {
			t.Fatalf("entity %s was written by batch %v, but batch %d won: batches interleaved", e.RowKey, e.Properties["W"], w)
		}
	}
}
