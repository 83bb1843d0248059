package embedded_test

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// TestDeleteAndRecreate: a deleted queue or table can be created again at
// once, empty, while handles of the deleted one keep failing; deletions and
// the table registry survive a reopen of the data directory.
func TestDeleteAndRecreate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	s, err := embedded.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	q, err := s.Queue(ctx, "keep-me")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, "one", 0, 0); err != nil {
		t.Fatal(err)
	}
	old, _ := s.Queue(ctx, "drop-me")
	if _, err := old.Enqueue(ctx, "gone", 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteQueue(ctx, "drop-me"); err != nil {
		t.Fatal(err)
	}
	fresh, err := s.Queue(ctx, "drop-me")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := fresh.ApproximateCount(ctx); err != nil || n != 0 {
		t.Fatalf("recreated queue count %d, %v; want 0", n, err)
	}
	if _, err := old.Enqueue(ctx, "x", 0, 0); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("old handle after recreate: %v, want ErrNotFound", err)
	}
	if err := s.DeleteQueue(ctx, "drop-me"); err != nil {
		t.Fatal(err)
	}

	tb, _ := s.Table(ctx, "Orders")
	if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Table(ctx, "Kept"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTable(ctx, "orders"); err != nil { // case-insensitive, as in Azure
		t.Fatal(err)
	}
	tb2, _ := s.Table(ctx, "Orders")
	if page, err := tb2.Query(ctx, storage.Query{}); err != nil || len(page.Entities) != 0 {
		t.Fatalf("recreated table holds %d entities (%v), want 0", len(page.Entities), err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = embedded.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	qs, err := s.Queues(ctx, "")
	if err != nil || !slices.Equal(qs, []string{"keep-me"}) {
		t.Fatalf("queues after reopen %q, %v; want [keep-me]", qs, err)
	}
	ts, err := s.Tables(ctx, "")
	if err != nil || !slices.Equal(ts, []string{"Kept", "Orders"}) {
		t.Fatalf("tables after reopen %q, %v; want [Kept Orders]", ts, err)
	}
	q, _ = s.Queue(ctx, "keep-me")
	if n, _ := q.ApproximateCount(ctx); n != 1 {
		t.Fatalf("kept queue holds %d messages after reopen, want 1", n)
	}
}
