package storagetest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq/storage"
)

// typedProps returns props as Props (storage.PropOf each, by name).
func typedProps(t testing.TB, props map[string]any) []storage.Prop {
	t.Helper()
	ps := make([]storage.Prop, 0, len(props))
	for name, v := range props {
		p, err := storage.PropOf(name, v)
		must(t, "PropOf", err)
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b storage.Prop) int { return strings.Compare(a.Name, b.Name) })
	return ps
}

func typed(t testing.TB, pk, rk string, props map[string]any) storage.Entity {
	return storage.Entity{PartitionKey: pk, RowKey: rk, Props: typedProps(t, props)}
}

// testTableTypedProps: an entity written with Props reads back as the same
// properties written with Properties, through every write.
func testTableTypedProps(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	props := allTypes()
	etag, err := tb.Insert(ctx, typed(t, "pk", "ins", props))
	must(t, "Insert with Props", err)
	got, err := tb.Get(ctx, "pk", "ins")
	must(t, "Get", err)
	if got.ETag != etag {
		t.Fatalf("Get ETag %q, want the one Insert returned, %q", got.ETag, etag)
	}
	if got.Props != nil {
		t.Fatalf("Get filled Props (%d): reads return Properties only", len(got.Props))
	}
	sameProps(t, "Get after Insert with Props", got.Properties, props)

	// Merge and Replace with Props, mixed with Properties.
	_, err = tb.Update(ctx, typed(t, "pk", "ins", map[string]any{"Str": "changed", "New": int32(5)}), storage.Merge, etag)
	must(t, "Update Merge with Props", err)
	got, err = tb.Get(ctx, "pk", "ins")
	must(t, "Get", err)
	want := allTypes()
	want["Str"], want["New"] = "changed", int32(5)
	for _, k := range []string{"TimeRecent"} { // allTypes' now differs per call
		want[k] = props[k]
	}
	sameProps(t, "after Merge with Props", got.Properties, want)
	_, err = tb.Update(ctx, ent("pk", "ins", map[string]any{"Extra": true}), storage.Merge, "")
	must(t, "Update Merge with Properties", err)
	_, err = tb.Update(ctx, typed(t, "pk", "ins", map[string]any{"Only": int64(1)}), storage.Replace, "")
	must(t, "Update Replace with Props", err)
	got, err = tb.Get(ctx, "pk", "ins")
	must(t, "Get", err)
	sameProps(t, "after Replace with Props", got.Properties, map[string]any{"Only": int64(1)})

	// Upsert both ways, and a batch.
	_, err = tb.Upsert(ctx, typed(t, "pk", "ups", map[string]any{"A": "a", "B": 2.5}), storage.Merge)
	must(t, "Upsert with Props", err)
	_, err = tb.Upsert(ctx, typed(t, "pk", "ups", map[string]any{"B": 3.5}), storage.Merge)
	must(t, "Upsert Merge with Props", err)
	got, err = tb.Get(ctx, "pk", "ups")
	must(t, "Get", err)
	sameProps(t, "after Upserts with Props", got.Properties, map[string]any{"A": "a", "B": 3.5})
	_, err = tb.Batch(ctx, "pk", []storage.BatchOp{
		{Kind: storage.OpInsert, Entity: typed(t, "pk", "b1", map[string]any{"X": int64(-1), "T": props["TimeMs"]})},
		{Kind: storage.OpUpdate, Mode: storage.Merge, Entity: typed(t, "pk", "ups", map[string]any{"C": []byte{0, 1}})},
	})
	must(t, "Batch with Props", err)
	got, err = tb.Get(ctx, "pk", "b1")
	must(t, "Get", err)
	sameProps(t, "batch insert with Props", got.Properties, map[string]any{"X": int64(-1), "T": props["TimeMs"]})
	got, err = tb.Get(ctx, "pk", "ups")
	must(t, "Get", err)
	sameProps(t, "batch merge with Props", got.Properties, map[string]any{"A": "a", "B": 3.5, "C": []byte{0, 1}})

	// An empty, non-nil Props is an entity without properties.
	wantNoProps(t, tb, storage.Entity{PartitionKey: "pk", RowKey: "empty", Props: []storage.Prop{}}, "with empty Props")
}

// testValidationTypedProps: Props follow the rules of Properties, and
// repeat no name.
func testValidationTypedProps(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	both := typed(t, "p", "r", map[string]any{"A": "a"})
	both.Properties = map[string]any{"B": "b"}
	_, err := tb.Insert(ctx, both)
	wantErr(t, "Insert with Props and Properties", err, storage.ErrInvalidArgument, "both")
	dup := storage.Entity{PartitionKey: "p", RowKey: "r", Props: []storage.Prop{storage.StringProp("A", "1"), storage.Int32Prop("B", 2), storage.StringProp("A", "3")}}
	_, err = tb.Insert(ctx, dup)
	wantErr(t, "Insert with a name twice in Props", err, storage.ErrInvalidArgument, "twice")
	_, err = tb.Upsert(ctx, storage.Entity{PartitionKey: "p", RowKey: "r", Props: []storage.Prop{{Name: "Z"}}}, storage.Merge)
	wantErr(t, "Upsert with a zero Prop", err, storage.ErrInvalidArgument, "zero Prop")
	for _, name := range []string{"", "1abc", "PartitionKey", "ETag"} {
		_, err = tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "r", Props: []storage.Prop{storage.BoolProp(name, true)}})
		wantErr(t, "Insert with Prop name "+name, err, storage.ErrInvalidArgument)
	}
	long := storage.StringProp("S", strings.Repeat("x", storage.MaxPropertyBytes/2+1))
	_, err = tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "r", Props: []storage.Prop{long}})
	wantErr(t, "Insert with a too long string Prop", err, storage.ErrTooLarge)
	_, err = tb.Batch(ctx, "p", []storage.BatchOp{
		{Kind: storage.OpInsert, Entity: typed(t, "p", "ok", map[string]any{"A": "a"})},
		{Kind: storage.OpInsert, Entity: dup},
	})
	var be *storage.BatchError
	if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("Batch with a bad Props entity at index 1: got %v, want a *BatchError at 1 wrapping ErrInvalidArgument", err)
	}
	wantRows(t, "after refused writes", tb, "p")
	if _, err := storage.PropOf("V", 1); !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("PropOf with an int: got %v, want ErrInvalidArgument", err)
	}
	// The size Props count is the size Properties count.
	props := allTypes()
	if a, b := storage.EntitySize(ent("p", "r", props)), storage.EntitySize(typed(t, "p", "r", props)); a != b {
		t.Fatalf("EntitySize with Props = %d, with Properties = %d", b, a)
	}
}
