package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

func insertOps(pk string, rks ...string) []storage.BatchOp {
	ops := make([]storage.BatchOp, len(rks))
	for i, rk := range rks {
		ops[i] = storage.BatchOp{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: pk, RowKey: rk, Properties: map[string]any{"N": int32(i)}}}
	}
	return ops
}

func TestBatchEnqueueAppliesBoth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, nil)
	if _, err := s.Table(ctx, "combined"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Queue(ctx, "combined-q"); err != nil {
		t.Fatal(err)
	}
	before := s.Stats().Commits
	etags, msg, err := s.BatchEnqueue(ctx, "combined", "p1", insertOps("p1", "a", "b"), "combined-q", "hello", 0, storage.NoExpiry)
	if err != nil {
		t.Fatalf("BatchEnqueue: %v", err)
	}
	if got := s.Stats().Commits - before; got != 1 {
		t.Errorf("BatchEnqueue took %d commits, want 1", got)
	}
	if len(etags) != 2 || etags[0] == "" || etags[1] == "" || msg.ID == "" || msg.PopReceipt == "" {
		t.Fatalf("etags %q, message %+v: want two ETags and a message ID and receipt", etags, msg)
	}
	tbl, _ := s.Table(ctx, "combined")
	for i, rk := range []string{"a", "b"} {
		e, err := tbl.Get(ctx, "p1", rk)
		if err != nil || e.ETag != etags[i] {
			t.Fatalf("Get %s: %+v, %v; want ETag %s", rk, e, err, etags[i])
		}
	}
	q, _ := s.Queue(ctx, "combined-q")
	got, err := q.Dequeue(ctx, 32, time.Minute)
	if err != nil || len(got) != 1 || got[0].Text != "hello" || got[0].ID != msg.ID || !got[0].ExpiresAt.IsZero() {
		t.Fatalf("Dequeue: %+v, %v; want the one message %s without expiry", got, err, msg.ID)
	}
}

func TestBatchEnqueueFailedBatchEnqueuesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, nil)
	if _, _, err := s.BatchEnqueue(ctx, "combined", "p1", insertOps("p1", "a"), "combined-q", "first", 0, 0); err != nil {
		t.Fatal(err)
	}
	// "a" exists: the batch fails at index 1, "c" is not written, nothing is enqueued.
	_, _, err := s.BatchEnqueue(ctx, "combined", "p1", insertOps("p1", "c", "a"), "combined-q", "second", 0, 0)
	var be *storage.BatchError
	if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, storage.ErrExists) {
		t.Fatalf("err = %v, want a *BatchError at index 1 wrapping ErrExists", err)
	}
	tbl, _ := s.Table(ctx, "combined")
	if _, err := tbl.Get(ctx, "p1", "c"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Get c after the failed batch: %v, want ErrNotFound", err)
	}
	q, _ := s.Queue(ctx, "combined-q")
	if n, err := q.ApproximateCount(ctx); err != nil || n != 1 {
		t.Errorf("queue holds %d messages (%v), want only the first", n, err)
	}
}

func TestBatchEnqueueInvalidWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, nil)
	big := strings.Repeat("x", storage.MaxMessageBytes+1)
	if _, _, err := s.BatchEnqueue(ctx, "combined", "p1", insertOps("p1", "a"), "combined-q", big, 0, 0); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("oversized message: err = %v, want ErrTooLarge", err)
	}
	if _, _, err := s.BatchEnqueue(ctx, "combined", "p1", insertOps("p2", "a"), "combined-q", "x", 0, 0); !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("batch across partitions: err = %v, want ErrInvalidArgument", err)
	}
	if _, _, err := s.BatchEnqueue(ctx, "combined", "p1", insertOps("p1", "a"), "Bad_Queue", "x", 0, 0); !errors.Is(err, storage.ErrInvalidName) {
		t.Fatalf("bad queue name: err = %v, want ErrInvalidName", err)
	}
	tbl, _ := s.Table(ctx, "combined")
	if _, err := tbl.Get(ctx, "p1", "a"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Get after refused calls: %v, want ErrNotFound", err)
	}
	q, _ := s.Queue(ctx, "combined-q")
	if n, _ := q.ApproximateCount(ctx); n != 0 {
		t.Errorf("queue holds %d messages, want 0", n)
	}
}

// Concurrent combined writes share commits (group commit) and each is whole.
func TestBatchEnqueueConcurrentGroupCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, nil)
	if _, _, err := s.BatchEnqueue(ctx, "combined", "warm", insertOps("warm", "a"), "combined-q", "w", 0, 0); err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	const n = 200
	var wg, ready sync.WaitGroup
	errs := make(chan error, n)
	// Every writer is started and waiting before any writes: they then
	// arrive together even on a loaded machine that would otherwise run
	// the goroutines one after another (one commit each).
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			pk := fmt.Sprintf("p%03d", i)
			ops := insertOps(pk, "cmd", "status", "e1")
			ready.Done()
			<-gate
			_, _, err := s.BatchEnqueue(ctx, "combined", pk, ops, "combined-q", pk, 0, 0)
			errs <- err
		}()
	}
	ready.Wait()
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	after := s.Stats()
	if w := after.Writes - before.Writes; w != n {
		t.Errorf("%d writes, want %d (one per BatchEnqueue)", w, n)
	}
	if c := after.Commits - before.Commits; c >= n {
		t.Errorf("%d commits for %d concurrent writes: no group commit", c, n)
	}
	q, _ := s.Queue(ctx, "combined-q")
	if c, _ := q.ApproximateCount(ctx); c != n+1 {
		t.Errorf("queue holds %d messages, want %d", c, n+1)
	}
}

func TestBatchDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, nil)
	tbl, err := s.Table(ctx, "combined")
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.Queue(ctx, "combined-q")
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"one", "two", "three"} {
		if _, err := q.Enqueue(ctx, text, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := q.Dequeue(ctx, 3, time.Minute)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("Dequeue: %d, %v", len(msgs), err)
	}

	// Success: the batch and the delete in one commit.
	before := s.Stats().Commits
	etags, derr, err := s.BatchDelete(ctx, "combined", "p1", insertOps("p1", "a"), "combined-q", msgs[0].ID, msgs[0].PopReceipt)
	if err != nil || derr != nil || len(etags) != 1 {
		t.Fatalf("BatchDelete: etags %q, deleteErr %v, err %v", etags, derr, err)
	}
	if got := s.Stats().Commits - before; got != 1 {
		t.Errorf("BatchDelete took %d commits, want 1", got)
	}
	if e, err := tbl.Get(ctx, "p1", "a"); err != nil || e.ETag != etags[0] {
		t.Errorf("Get: %+v, %v", e, err)
	}
	if n, _ := q.ApproximateCount(ctx); n != 2 {
		t.Errorf("queue holds %d messages, want 2", n)
	}

	// A stale receipt: the batch is applied, the delete reports ErrLeaseLost.
	if _, _, err := q.UpdateVisibility(ctx, msgs[1].ID, msgs[1].PopReceipt, time.Minute); err != nil {
		t.Fatal(err)
	}
	_, derr, err = s.BatchDelete(ctx, "combined", "p1", insertOps("p1", "b"), "combined-q", msgs[1].ID, msgs[1].PopReceipt)
	if err != nil || !errors.Is(derr, storage.ErrLeaseLost) {
		t.Fatalf("stale receipt: deleteErr %v, err %v; want ErrLeaseLost and no error", derr, err)
	}
	if _, err := tbl.Get(ctx, "p1", "b"); err != nil {
		t.Errorf("the batch with a stale receipt was not applied: %v", err)
	}

	// A failed batch: nothing is deleted.
	_, derr, err = s.BatchDelete(ctx, "combined", "p1", insertOps("p1", "a"), "combined-q", msgs[2].ID, msgs[2].PopReceipt)
	if !errors.Is(err, storage.ErrExists) || derr != nil {
		t.Fatalf("failed batch: deleteErr %v, err %v; want ErrExists", derr, err)
	}
	if n, _ := q.ApproximateCount(ctx); n != 2 {
		t.Errorf("queue holds %d messages after the failed batch, want 2", n)
	}
	if err := q.Delete(ctx, msgs[2].ID, msgs[2].PopReceipt); err != nil {
		t.Errorf("the message of the failed batch cannot be deleted with its receipt: %v", err)
	}
}

// TestBatchEnqueueManyOneCommit: many items in one durable write; an item
// whose batch fails, that is invalid or that repeats a partition is left
// out with its own error, the others are applied with their messages.
func TestBatchEnqueueManyOneCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, nil)
	if _, _, err := s.BatchEnqueue(ctx, "many", "p000", insertOps("p000", "cmd"), "many-q", "taken", 0, 0); err != nil {
		t.Fatal(err)
	}
	const n = 100
	items := make([]storage.CombinedItem, n)
	for i := range items {
		pk := fmt.Sprintf("p%03d", i)
		items[i] = storage.CombinedItem{PartitionKey: pk, Ops: insertOps(pk, "cmd", "e1"), Text: pk}
	}
	items[7].PartitionKey = "p006"                                                                      // repeats item 6's partition (and mismatches its ops)
	items[8] = storage.CombinedItem{PartitionKey: "p008", Ops: insertOps("p008", "bad#key"), Text: "x"} // invalid key
	before := s.Stats()
	res, err := s.BatchEnqueueMany(ctx, "many", "many-q", items, 0, storage.NoExpiry)
	if err != nil {
		t.Fatal(err)
	}
	after := s.Stats()
	if c := after.Commits - before.Commits; c != 1 {
		t.Errorf("%d commits for one BatchEnqueueMany, want 1", c)
	}
	var be *storage.BatchError
	if !errors.As(res[0].Err, &be) || !errors.Is(res[0].Err, storage.ErrExists) {
		t.Errorf("item 0 (existing partition): %v, want a BatchError wrapping ErrExists", res[0].Err)
	}
	if !errors.Is(res[7].Err, storage.ErrInvalidArgument) || !errors.Is(res[8].Err, storage.ErrInvalidKey) {
		t.Errorf("item 7: %v; item 8: %v", res[7].Err, res[8].Err)
	}
	tbl, _ := s.Table(ctx, "many")
	for i, r := range res {
		if i == 0 || i == 7 || i == 8 {
			continue
		}
		if r.Err != nil || len(r.ETags) != 2 || r.Message.ID == "" {
			t.Fatalf("item %d: %+v", i, r)
		}
		if _, err := tbl.Get(ctx, items[i].PartitionKey, "e1"); err != nil {
			t.Fatalf("item %d's entity: %v", i, err)
		}
	}
	q, _ := s.Queue(ctx, "many-q")
	if c, _ := q.ApproximateCount(ctx); c != 1+n-3 {
		t.Errorf("queue holds %d messages, want %d", c, 1+n-3)
	}
	msgs, err := q.Dequeue(ctx, 32, time.Minute)
	if err != nil || len(msgs) != 32 || msgs[0].Text != "taken" || msgs[1].Text != "p001" {
		t.Fatalf("dequeue after the batch: %d messages, first %q, %q, %v", len(msgs), msgs[0].Text, msgs[1].Text, err)
	}
}
