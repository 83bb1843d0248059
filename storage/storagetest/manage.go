package storagetest

import (
	"slices"
	"testing"

	"github.com/cmdq-dev/cmdq/storage"
)

func storeCases() []testCase {
	return []testCase{
		{"DeleteQueue", testStoreDeleteQueue},
		{"DeleteTable", testStoreDeleteTable},
		{"ListQueuesByPrefix", testStoreListQueues},
		{"ListTablesByPrefix", testStoreListTables},
		{"OpenExistingTable", testStoreOpenExisting},
	}
}

func testStoreDeleteQueue(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	_, err := q.Enqueue(ctx, "doomed", 0, 0)
	must(t, "Enqueue", err)
	names, err := s.Queues(ctx, q.Name())
	must(t, "Queues", err)
	if !slices.Equal(names, []string{q.Name()}) {
		t.Fatalf("Queues(%q) = %q, want just the queue", q.Name(), names)
	}
	must(t, "DeleteQueue", s.DeleteQueue(ctx, q.Name()))
	names, err = s.Queues(ctx, q.Name())
	must(t, "Queues after DeleteQueue", err)
	if len(names) != 0 {
		t.Fatalf("Queues(%q) after DeleteQueue = %q, want none", q.Name(), names)
	}
	_, err = q.Enqueue(ctx, "after", 0, 0)
	wantErr(t, "Enqueue on a deleted queue", err, storage.ErrNotFound)
	_, err = q.Dequeue(ctx, 1, leaseLong)
	wantErr(t, "Dequeue on a deleted queue", err, storage.ErrNotFound)
	_, err = q.Peek(ctx, 1)
	wantErr(t, "Peek on a deleted queue", err, storage.ErrNotFound)
	wantErr(t, "DeleteQueue of a deleted queue", s.DeleteQueue(ctx, q.Name()), storage.ErrNotFound)
	wantErr(t, "DeleteQueue of a bad name", s.DeleteQueue(ctx, "Bad_Name"), storage.ErrInvalidName)
}

func testStoreDeleteTable(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	_, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"V": "x"}})
	must(t, "Insert", err)
	names, err := s.Tables(ctx, tb.Name())
	must(t, "Tables", err)
	if !slices.Equal(names, []string{tb.Name()}) {
		t.Fatalf("Tables(%q) = %q, want just the table", tb.Name(), names)
	}
	must(t, "DeleteTable", s.DeleteTable(ctx, tb.Name()))
	names, err = s.Tables(ctx, tb.Name())
	must(t, "Tables after DeleteTable", err)
	if len(names) != 0 {
		t.Fatalf("Tables(%q) after DeleteTable = %q, want none", tb.Name(), names)
	}
	_, err = tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "r2"})
	wantErr(t, "Insert into a deleted table", err, storage.ErrNotFound)
	_, err = tb.Query(ctx, storage.Query{})
	wantErr(t, "Query of a deleted table", err, storage.ErrNotFound)
	wantErr(t, "DeleteTable of a deleted table", s.DeleteTable(ctx, tb.Name()), storage.ErrNotFound)
	wantErr(t, "DeleteTable of a bad name", s.DeleteTable(ctx, "bad-name"), storage.ErrInvalidName)
}

// siblingName returns a name that shares all but the last character of p
// (so it does not start with p).
func siblingName(p string) string {
	last := p[len(p)-1]
	if last == 'z' {
		return p[:len(p)-1] + "y"
	}
	return p[:len(p)-1] + "z"
}

func testStoreListQueues(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	p := uniqueName(t)
	want := []string{p + "a", p + "b1", p + "c"}
	for _, n := range append([]string{siblingName(p)}, want...) {
		_, err := s.Queue(ctx, n)
		must(t, "Queue "+n, err)
		t.Cleanup(func() { _ = s.DeleteQueue(caseCtx(t), n) })
	}
	got, err := s.Queues(ctx, p)
	must(t, "Queues", err)
	if !slices.Equal(got, want) {
		t.Fatalf("Queues(%q) = %q, want %q (sorted, without %q)", p, got, want, siblingName(p))
	}
	all, err := s.Queues(ctx, "")
	must(t, "Queues(\"\")", err)
	for _, n := range append(want, siblingName(p)) {
		if !slices.Contains(all, n) {
			t.Fatalf("Queues(\"\") does not list %q", n)
		}
	}
}

func testStoreListTables(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	p := uniqueName(t)
	want := []string{p + "a", p + "b1", p + "c"}
	for _, n := range append([]string{siblingName(p)}, want...) {
		_, err := s.Table(ctx, n)
		must(t, "Table "+n, err)
		t.Cleanup(func() { _ = s.DeleteTable(caseCtx(t), n) })
	}
	got, err := s.Tables(ctx, p)
	must(t, "Tables", err)
	if !slices.Equal(got, want) {
		t.Fatalf("Tables(%q) = %q, want %q (sorted, without %q)", p, got, want, siblingName(p))
	}
	all, err := s.Tables(ctx, "")
	must(t, "Tables(\"\")", err)
	for _, n := range append(want, siblingName(p)) {
		if !slices.Contains(all, n) {
			t.Fatalf("Tables(\"\") does not list %q", n)
		}
	}
}

// testStoreOpenExisting: storage.OpenExisting (TableOpener where the driver
// has it) never creates a table: a missing one gives ErrNotFound (at once,
// or from its calls), and stays missing; an existing one reads as usual,
// also after DeleteTable and a new Table.
func testStoreOpenExisting(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	name := uniqueName(t)
	if tb, err := storage.OpenExisting(ctx, s, name); err == nil {
		_, err = tb.Get(ctx, "p", "r")
		wantErr(t, "Get through OpenExisting of a missing table", err, storage.ErrNotFound)
		_, err = tb.Query(ctx, storage.Query{})
		wantErr(t, "Query through OpenExisting of a missing table", err, storage.ErrNotFound)
	} else {
		wantErr(t, "OpenExisting of a missing table", err, storage.ErrNotFound)
	}
	names, err := s.Tables(ctx, name)
	must(t, "Tables", err)
	if len(names) != 0 {
		t.Fatalf("OpenExisting created table %q: Tables = %q", name, names)
	}
	tb, err := s.Table(ctx, name)
	must(t, "Table", err)
	t.Cleanup(func() { _ = s.DeleteTable(caseCtx(t), name) })
	_, err = tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"V": "x"}})
	must(t, "Insert", err)
	ot, err := storage.OpenExisting(ctx, s, name)
	must(t, "OpenExisting of an existing table", err)
	e, err := ot.Get(ctx, "p", "r")
	must(t, "Get through OpenExisting", err)
	if e.Properties["V"] != "x" {
		t.Fatalf("Get through OpenExisting = %v, want V=x", e.Properties)
	}
	must(t, "DeleteTable", s.DeleteTable(ctx, name))
	if ot, err := storage.OpenExisting(ctx, s, name); err == nil {
		_, err = ot.Get(ctx, "p", "r")
		wantErr(t, "Get through OpenExisting of a deleted table", err, storage.ErrNotFound)
	} else {
		wantErr(t, "OpenExisting of a deleted table", err, storage.ErrNotFound)
	}
	names, err = s.Tables(ctx, name)
	must(t, "Tables after DeleteTable", err)
	if len(names) != 0 {
		t.Fatalf("OpenExisting recreated deleted table %q: Tables = %q", name, names)
	}
}
