package storagetest

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

func tableCases() []testCase {
	return []testCase{
		{"PropertyTypes", testTablePropertyTypes},
		{"TypedProps", testTableTypedProps},
		{"InsertDuplicate", testTableInsertDuplicate},
		{"GetMissing", testTableGetMissing},
		{"ETagChangesOnEveryWrite", testTableETagChanges},
		{"UpdateConditional", testTableUpdateConditional},
		{"UpdateMissing", testTableUpdateMissing},
		{"MergeAndReplace", testTableMergeAndReplace},
		{"Upsert", testTableUpsert},
		{"DeleteConditional", testTableDeleteConditional},
		{"QueryPartitionOrder", testTableQueryPartition},
		{"QueryRowKeyPrefix", testTableQueryRowKeyPrefix},
		{"QueryWholeTable", testTableQueryWholeTable},
		{"QueryPaging", testTableQueryPaging},
		{"EmptyKeys", testTableEmptyKeys},
		{"LongKeys", testTableLongKeys},
		{"LargestString", testTableLargestString},
		{"OpenIdempotent", testTableOpenIdempotent},
	}
}

func ent(pk, rk string, props map[string]any) storage.Entity {
	return storage.Entity{PartitionKey: pk, RowKey: rk, Properties: props}
}

// allTypes returns one property of every supported type, with edge values.
func allTypes() map[string]any {
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	return map[string]any{
		"Str":        "ünïcödé 日本語 🚀 <&> \"q\" 'a'",
		"EmptyStr":   "",
		"Bin":        bin,
		"True":       true,
		"False":      false,
		"I32":        int32(-2147483648),
		"I32Max":     int32(math.MaxInt32),
		"I64Big":     int64(1)<<53 + 1, // not representable in a float64
		"I64Max":     int64(math.MaxInt64),
		"I64Neg":     int64(-9007199254740993),
		"I64Small":   int64(7),   // small, but must stay int64
		"F64Whole":   float64(3), // whole, but must stay float64
		"F64Zero":    float64(0),
		"F64Frac":    -0.25,
		"F64Big":     1e300,
		"TimeMs":     time.Date(2024, 2, 29, 23, 59, 58, 123_000_000, time.UTC),
		"TimeEpoch":  time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		"TimeRecent": time.Now().UTC().Truncate(time.Millisecond),
	}
}

// sameProps fails unless got has exactly the properties of want, with the
// same Go types and values (times compared with Equal and required in UTC).
func sameProps(t testing.TB, what string, got, want map[string]any) {
	t.Helper()
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Fatalf("%s: property %q missing", what, name)
		}
		if fmt.Sprintf("%T", g) != fmt.Sprintf("%T", w) {
			t.Fatalf("%s: property %q has type %T (%v), want %T (%v)", what, name, g, g, w, w)
		}
		switch wv := w.(type) {
		case []byte:
			if !bytes.Equal(g.([]byte), wv) {
				t.Fatalf("%s: property %q = %x, want %x", what, name, g, wv)
			}
		case time.Time:
			gv := g.(time.Time)
			if !gv.Equal(wv) {
				t.Fatalf("%s: property %q = %s, want %s", what, name, gv.Format(time.RFC3339Nano), wv.Format(time.RFC3339Nano))
			}
			if _, off := gv.Zone(); off != 0 {
				t.Fatalf("%s: property %q = %s, want it in UTC", what, name, gv)
			}
		default:
			if g != w {
				t.Fatalf("%s: property %q = %#v, want %#v", what, name, g, w)
			}
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			t.Fatalf("%s: unexpected property %q = %#v (want exactly %d properties; system properties belong in the Entity fields)", what, name, g, len(want))
		}
	}
}

func testTablePropertyTypes(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	props := allTypes()
	before := time.Now()
	etag, err := tb.Insert(ctx, ent("pk", "rk", props))
	must(t, "Insert", err)
	if etag == "" {
		t.Fatal("Insert returned an empty ETag")
	}
	got, err := tb.Get(ctx, "pk", "rk")
	must(t, "Get", err)
	if got.PartitionKey != "pk" || got.RowKey != "rk" {
		t.Fatalf("Get returned keys (%q, %q)", got.PartitionKey, got.RowKey)
	}
	if got.ETag != etag {
		t.Fatalf("Get ETag %q, want the one Insert returned, %q", got.ETag, etag)
	}
	near(t, "Timestamp", got.Timestamp, before, clockTolerance)
	sameProps(t, "Get", got.Properties, props)

	page, err := tb.Query(ctx, storage.Query{PartitionKey: "pk"})
	must(t, "Query", err)
	if len(page.Entities) != 1 {
		t.Fatalf("Query returned %d entities, want 1", len(page.Entities))
	}
	q := page.Entities[0]
	if q.ETag != etag {
		t.Fatalf("Query ETag %q, want %q", q.ETag, etag)
	}
	sameProps(t, "Query", q.Properties, props)

	// An entity with no custom properties.
	wantNoProps(t, tb, ent("pk", "empty", nil), "without properties")
}

// wantNoProps inserts e, which has no custom properties (the how of it
// said by what), and fails unless it reads back with none.
func wantNoProps(t testing.TB, tb storage.Table, e storage.Entity, what string) {
	t.Helper()
	ctx := caseCtx(t)
	_, err := tb.Insert(ctx, e)
	must(t, "Insert "+what, err)
	got, err := tb.Get(ctx, e.PartitionKey, e.RowKey)
	must(t, "Get", err)
	if len(got.Properties) != 0 {
		t.Fatalf("entity inserted %s came back with %v", what, got.Properties)
	}
}

// testTableEmptyKeys: empty keys are valid in Azure and in storage.ValidateKey.
func testTableEmptyKeys(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	for _, k := range [][2]string{{"", ""}, {"", "r"}, {"p", ""}} {
		what := fmt.Sprintf("(%q, %q)", k[0], k[1])
		etag, err := tb.Insert(ctx, ent(k[0], k[1], map[string]any{"V": int32(1)}))
		must(t, "Insert "+what, err)
		e, err := tb.Get(ctx, k[0], k[1])
		must(t, "Get "+what, err)
		sameProps(t, "Get "+what, e.Properties, map[string]any{"V": int32(1)})
		etag, err = tb.Update(ctx, ent(k[0], k[1], map[string]any{"V": int32(2)}), storage.Merge, etag)
		must(t, "Update "+what, err)
		must(t, "Delete "+what, tb.Delete(ctx, k[0], k[1], etag))
		_, err = tb.Get(ctx, k[0], k[1])
		wantErr(t, "Get after Delete "+what, err, storage.ErrNotFound)
	}
}

func testTableInsertDuplicate(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	etag, err := tb.Insert(ctx, ent("p", "r", map[string]any{"V": "first"}))
	must(t, "Insert", err)
	_, err = tb.Insert(ctx, ent("p", "r", map[string]any{"V": "second"}))
	wantErr(t, "Insert of an existing key", err, storage.ErrExists)
	e, err := tb.Get(ctx, "p", "r")
	must(t, "Get", err)
	if e.Properties["V"] != "first" || e.ETag != etag {
		t.Fatalf("after a refused duplicate insert: V = %v ETag %q; want %q, %q", e.Properties["V"], e.ETag, "first", etag)
	}
}

func testTableGetMissing(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	_, err := tb.Get(ctx, "nope", "nope")
	wantErr(t, "Get in an empty table", err, storage.ErrNotFound)
	_, err = tb.Insert(ctx, ent("p", "r", nil))
	must(t, "Insert", err)
	_, err = tb.Get(ctx, "p", "other")
	wantErr(t, "Get of a missing row", err, storage.ErrNotFound)
	_, err = tb.Get(ctx, "other", "r")
	wantErr(t, "Get in a missing partition", err, storage.ErrNotFound)
}

func testTableETagChanges(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	seen := map[string]string{}
	record := func(etag, where string) {
		t.Helper()
		if etag == "" {
			t.Fatalf("%s returned an empty ETag", where)
		}
		if prev, dup := seen[etag]; dup {
			t.Fatalf("%s returned ETag %q, already returned by %s", where, etag, prev)
		}
		seen[etag] = where
		got, err := tb.Get(ctx, "p", "r")
		must(t, "Get", err)
		if got.ETag != etag {
			t.Fatalf("after %s Get has ETag %q, want %q", where, got.ETag, etag)
		}
	}
	etag, err := tb.Insert(ctx, ent("p", "r", map[string]any{"N": int32(0)}))
	must(t, "Insert", err)
	record(etag, "Insert")
	for i := int32(1); i <= 2; i++ {
		etag, err = tb.Update(ctx, ent("p", "r", map[string]any{"N": i}), storage.Merge, etag)
		must(t, "Update Merge", err)
		record(etag, fmt.Sprintf("Update Merge #%d", i))
		etag, err = tb.Update(ctx, ent("p", "r", map[string]any{"N": i}), storage.Replace, storage.IfMatchAny)
		must(t, "Update Replace", err)
		record(etag, fmt.Sprintf("Update Replace #%d (same values)", i))
		etag, err = tb.Upsert(ctx, ent("p", "r", map[string]any{"N": i}), storage.Merge)
		must(t, "Upsert Merge", err)
		record(etag, fmt.Sprintf("Upsert Merge #%d", i))
		etag, err = tb.Upsert(ctx, ent("p", "r", map[string]any{"N": i}), storage.Replace)
		must(t, "Upsert Replace", err)
		record(etag, fmt.Sprintf("Upsert Replace #%d", i))
	}
}

func testTableUpdateConditional(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	stale, err := tb.Insert(ctx, ent("p", "r", map[string]any{"V": int64(1)}))
	must(t, "Insert", err)
	cur, err := tb.Update(ctx, ent("p", "r", map[string]any{"V": int64(2)}), storage.Replace, stale)
	must(t, "Update with the current ETag", err)
	_, err = tb.Update(ctx, ent("p", "r", map[string]any{"V": int64(99)}), storage.Replace, stale)
	wantErr(t, "Update with a stale ETag", err, storage.ErrConflict)
	_, err = tb.Update(ctx, ent("p", "r", map[string]any{"V": int64(99)}), storage.Merge, stale)
	wantErr(t, "Update Merge with a stale ETag", err, storage.ErrConflict)
	e, err := tb.Get(ctx, "p", "r")
	must(t, "Get", err)
	if e.Properties["V"] != int64(2) || e.ETag != cur {
		t.Fatalf("after refused stale updates V = %v ETag %q; want 2, %q", e.Properties["V"], e.ETag, cur)
	}
	_, err = tb.Update(ctx, ent("p", "r", map[string]any{"V": int64(3)}), storage.Replace, "")
	must(t, `Update with ifMatch ""`, err)
	e, err = tb.Get(ctx, "p", "r")
	must(t, "Get", err)
	if e.Properties["V"] != int64(3) {
		t.Fatalf(`after unconditional update (ifMatch "") V = %v, want 3`, e.Properties["V"])
	}
	_, err = tb.Update(ctx, ent("p", "r", map[string]any{"V": int64(4)}), storage.Merge, storage.IfMatchAny)
	must(t, `Update with ifMatch "*"`, err)
	e, err = tb.Get(ctx, "p", "r")
	must(t, "Get", err)
	if e.Properties["V"] != int64(4) {
		t.Fatalf(`after unconditional update (ifMatch "*") V = %v, want 4`, e.Properties["V"])
	}
}

func testTableUpdateMissing(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	for _, ifMatch := range []string{"", storage.IfMatchAny} {
		for _, mode := range []storage.UpdateMode{storage.Merge, storage.Replace} {
			_, err := tb.Update(ctx, ent("p", "missing", map[string]any{"V": "x"}), mode, ifMatch)
			wantErr(t, fmt.Sprintf("Update (mode %d, ifMatch %q) of a missing entity", mode, ifMatch), err, storage.ErrNotFound)
		}
	}
	_, err := tb.Get(ctx, "p", "missing")
	wantErr(t, "Get after refused updates (Update must not insert)", err, storage.ErrNotFound)
}

func testTableMergeAndReplace(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	_, err := tb.Insert(ctx, ent("p", "r", map[string]any{"A": "a", "B": int32(2)}))
	must(t, "Insert", err)
	_, err = tb.Update(ctx, ent("p", "r", map[string]any{"B": int32(20), "C": true}), storage.Merge, "")
	must(t, "Update Merge", err)
	e, err := tb.Get(ctx, "p", "r")
	must(t, "Get", err)
	sameProps(t, "after Merge", e.Properties, map[string]any{"A": "a", "B": int32(20), "C": true})
	_, err = tb.Update(ctx, ent("p", "r", map[string]any{"D": 1.5}), storage.Replace, "")
	must(t, "Update Replace", err)
	e, err = tb.Get(ctx, "p", "r")
	must(t, "Get", err)
	sameProps(t, "after Replace", e.Properties, map[string]any{"D": 1.5})
}

func testTableUpsert(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	for _, mode := range []storage.UpdateMode{storage.Merge, storage.Replace} {
		rk := fmt.Sprintf("mode%d", mode)
		etag, err := tb.Upsert(ctx, ent("p", rk, map[string]any{"A": "a", "B": int64(1)}), mode)
		must(t, "Upsert of a missing entity", err)
		e, err := tb.Get(ctx, "p", rk)
		must(t, "Get", err)
		if e.ETag != etag {
			t.Fatalf("Get ETag %q, want the one Upsert returned, %q", e.ETag, etag)
		}
		sameProps(t, "after inserting Upsert", e.Properties, map[string]any{"A": "a", "B": int64(1)})
		_, err = tb.Upsert(ctx, ent("p", rk, map[string]any{"B": int64(2)}), mode)
		must(t, "Upsert of an existing entity", err)
		e, err = tb.Get(ctx, "p", rk)
		must(t, "Get", err)
		want := map[string]any{"B": int64(2)}
		if mode == storage.Merge {
			want["A"] = "a"
		}
		sameProps(t, fmt.Sprintf("after updating Upsert (mode %d)", mode), e.Properties, want)
	}
}

func testTableDeleteConditional(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	stale, err := tb.Insert(ctx, ent("p", "r", map[string]any{"V": int32(1)}))
	must(t, "Insert", err)
	cur, err := tb.Update(ctx, ent("p", "r", map[string]any{"V": int32(2)}), storage.Merge, "")
	must(t, "Update", err)
	wantErr(t, "Delete with a stale ETag", tb.Delete(ctx, "p", "r", stale), storage.ErrConflict)
	_, err = tb.Get(ctx, "p", "r")
	must(t, "Get after a refused delete", err)
	must(t, "Delete with the current ETag", tb.Delete(ctx, "p", "r", cur))
	_, err = tb.Get(ctx, "p", "r")
	wantErr(t, "Get after Delete", err, storage.ErrNotFound)
	for _, ifMatch := range []string{"", storage.IfMatchAny} {
		wantErr(t, fmt.Sprintf("Delete (ifMatch %q) of a missing entity", ifMatch), tb.Delete(ctx, "p", "r", ifMatch), storage.ErrNotFound)
	}
	for i, ifMatch := range []string{"", storage.IfMatchAny} {
		rk := fmt.Sprintf("u%d", i)
		_, err = tb.Insert(ctx, ent("p", rk, nil))
		must(t, "Insert", err)
		must(t, fmt.Sprintf("Delete with ifMatch %q", ifMatch), tb.Delete(ctx, "p", rk, ifMatch))
		_, err = tb.Get(ctx, "p", rk)
		wantErr(t, "Get after Delete", err, storage.ErrNotFound)
	}
}

// insertShuffled inserts the given keys in random order, each with a property
// K = "pk|rk".
func insertShuffled(t testing.TB, tb storage.Table, keys [][2]string) {
	t.Helper()
	ctx := caseCtx(t)
	order := slices.Clone(keys)
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, k := range order {
		_, err := tb.Insert(ctx, ent(k[0], k[1], map[string]any{"K": k[0] + "|" + k[1]}))
		must(t, "Insert", err)
	}
}

// queryAll collects every page of q, checking each page's size against Top
// and, for entities written by insertShuffled, the K property.
func queryAll(t testing.TB, tb storage.Table, q storage.Query) (keys [][2]string, pages int) {
	t.Helper()
	ctx := caseCtx(t)
	for {
		page, err := tb.Query(ctx, q)
		must(t, "Query", err)
		pages++
		if q.Top > 0 && len(page.Entities) > q.Top {
			t.Fatalf("Query with Top %d returned a page of %d", q.Top, len(page.Entities))
		}
		for _, e := range page.Entities {
			if k, ok := e.Properties["K"]; ok && k != e.PartitionKey+"|"+e.RowKey {
				t.Fatalf("entity (%q, %q) has K = %v", e.PartitionKey, e.RowKey, e.Properties["K"])
			}
			if e.ETag == "" {
				t.Fatalf("Query returned entity (%q, %q) without an ETag", e.PartitionKey, e.RowKey)
			}
			keys = append(keys, [2]string{e.PartitionKey, e.RowKey})
		}
		if page.Continuation == "" {
			return keys, pages
		}
		if pages > 1000 {
			t.Fatal("Query kept returning continuation tokens for more than 1000 pages")
		}
		q.Continuation = page.Continuation
	}
}

func wantKeys(t testing.TB, what string, got, want [][2]string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s returned keys\n%v\nwant (in this order)\n%v", what, got, want)
	}
}

func sortedKeys(keys [][2]string) [][2]string {
	out := slices.Clone(keys)
	slices.SortFunc(out, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	return out
}

func filterKeys(keys [][2]string, keep func(k [2]string) bool) [][2]string {
	var out [][2]string
	for _, k := range keys {
		if keep(k) {
			out = append(out, k)
		}
	}
	return out
}

// sampleKeys spans three partitions, with row keys that sort differently as
// bytes than as numbers, and prefixes of one another.
func sampleKeys() [][2]string {
	var keys [][2]string
	for _, pk := range []string{"a", "b", "ba"} {
		for _, rk := range []string{"1", "10", "2", "a", "a1", "a2", "ab", "b", "B", "é"} {
			keys = append(keys, [2]string{pk, rk})
		}
	}
	return keys
}

func testTableQueryPartition(t *testing.T, s storage.Store) {
	tb := newTable(t, s)
	keys := sampleKeys()
	insertShuffled(t, tb, keys)
	for _, pk := range []string{"a", "b", "ba"} {
		got, _ := queryAll(t, tb, storage.Query{PartitionKey: pk})
		wantKeys(t, "Query partition "+pk, got, sortedKeys(filterKeys(keys, func(k [2]string) bool { return k[0] == pk })))
	}
	got, _ := queryAll(t, tb, storage.Query{PartitionKey: "missing"})
	if len(got) != 0 {
		t.Fatalf("Query of a missing partition returned %v", got)
	}
}

func testTableQueryRowKeyPrefix(t *testing.T, s storage.Store) {
	tb := newTable(t, s)
	keys := sampleKeys()
	insertShuffled(t, tb, keys)
	for _, prefix := range []string{"a", "1", "é", "zz"} {
		got, _ := queryAll(t, tb, storage.Query{PartitionKey: "b", RowKeyPrefix: prefix})
		wantKeys(t, fmt.Sprintf("Query partition b prefix %q", prefix), got,
			sortedKeys(filterKeys(keys, func(k [2]string) bool { return k[0] == "b" && strings.HasPrefix(k[1], prefix) })))
	}
	got, _ := queryAll(t, tb, storage.Query{RowKeyPrefix: "a"})
	wantKeys(t, `Query whole table prefix "a"`, got,
		sortedKeys(filterKeys(keys, func(k [2]string) bool { return strings.HasPrefix(k[1], "a") })))
}

func testTableQueryWholeTable(t *testing.T, s storage.Store) {
	tb := newTable(t, s)
	keys := sampleKeys()
	insertShuffled(t, tb, keys)
	got, _ := queryAll(t, tb, storage.Query{})
	wantKeys(t, "Query of the whole table", got, sortedKeys(keys))
}

func testTableQueryPaging(t *testing.T, s storage.Store) {
	tb := newTable(t, s)
	var keys [][2]string
	for _, pk := range []string{"p1", "p2", "p3"} {
		for i := range 25 {
			keys = append(keys, [2]string{pk, fmt.Sprintf("r%03d", i)})
		}
	}
	insertShuffled(t, tb, keys)
	// Pages may be empty and still carry a token; queryAll follows them all.
	got, pages := queryAll(t, tb, storage.Query{Top: 7})
	wantKeys(t, "paged whole-table query (Top 7)", got, sortedKeys(keys))
	if pages < len(keys)/7 {
		t.Fatalf("Top 7 over %d entities gave %d pages; want at least %d", len(keys), pages, len(keys)/7)
	}
	got, pages = queryAll(t, tb, storage.Query{PartitionKey: "p2", Top: 10})
	wantKeys(t, "paged partition query (Top 10)", got, sortedKeys(filterKeys(keys, func(k [2]string) bool { return k[0] == "p2" })))
	if pages < 3 {
		t.Fatalf("Top 10 over 25 entities gave %d pages; want at least 3", pages)
	}
	got, _ = queryAll(t, tb, storage.Query{PartitionKey: "p3", RowKeyPrefix: "r01", Top: 3})
	wantKeys(t, `paged prefix query (p3, "r01", Top 3)`, got,
		sortedKeys(filterKeys(keys, func(k [2]string) bool { return k[0] == "p3" && strings.HasPrefix(k[1], "r01") })))
	got, _ = queryAll(t, tb, storage.Query{Top: 1000})
	wantKeys(t, "Query with Top 1000", got, sortedKeys(keys))
}

// testTableLongKeys: Azure's key limit is "1 KiB" counted in UTF-16, so 512
// code units is the longest key (storage.MaxKeyBytes); testValidationKeyTooLong
// shows 513 are refused before any I/O.
func testTableLongKeys(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	pk := strings.Repeat("p", 511) + "é"
	rk := strings.Repeat("r", 512)
	_, err := tb.Insert(ctx, ent(pk, rk, map[string]any{"V": int32(1)}))
	must(t, "Insert with 512-character keys", err)
	e, err := tb.Get(ctx, pk, rk)
	must(t, "Get with 512-character keys", err)
	if e.PartitionKey != pk || e.RowKey != rk {
		t.Fatal("512-character keys did not round-trip")
	}
	// Unicode keys outside the forbidden ranges are fine.
	_, err = tb.Insert(ctx, ent("ünï cödé 日本", "🚀 -_.~!$&'()*+,;=:@", nil))
	must(t, "Insert with unicode and punctuation keys", err)
	_, err = tb.Get(ctx, "ünï cödé 日本", "🚀 -_.~!$&'()*+,;=:@")
	must(t, "Get with unicode and punctuation keys", err)
}

func testTableLargestString(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	// 32768 UTF-16 code units = 64 KiB: the largest string property.
	str := strings.Repeat("x", storage.MaxPropertyBytes/2)
	bin := bytes.Repeat([]byte{0xAB}, storage.MaxPropertyBytes)
	_, err := tb.Insert(ctx, ent("p", "r", map[string]any{"S": str, "B": bin}))
	must(t, "Insert with a 64 KiB string and a 64 KiB binary", err)
	e, err := tb.Get(ctx, "p", "r")
	must(t, "Get", err)
	sameProps(t, "64 KiB properties", e.Properties, map[string]any{"S": str, "B": bin})
}

func testTableOpenIdempotent(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	t1 := newTable(t, s)
	_, err := t1.Insert(ctx, ent("p", "r", map[string]any{"V": "x"}))
	must(t, "Insert", err)
	t2, err := s.Table(ctx, t1.Name())
	must(t, "Store.Table on an existing name", err)
	e, err := t2.Get(ctx, "p", "r")
	must(t, "Get through the second handle", err)
	if e.Properties["V"] != "x" {
		t.Fatalf("second handle sees V = %v, want x", e.Properties["V"])
	}
}
