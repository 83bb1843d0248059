package embedded

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// testNames opens a store in a temporary directory and returns its name
// dictionary. full: the dictionary is filled up first (in memory), so
// that every name of the test is written in full in each record.
func testNames(t *testing.T, full bool) *names {
	t.Helper()
	s, err := Open(t.TempDir(), &Options{PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if full {
		snap := &nameSnap{ids: map[string]uint64{}}
		for i := range maxNames {
			n := "filler" + strings.Repeat("_", i%7) + string(rune('A'+i%26)) + string(rune('A'+i/26%26)) + string(rune('A'+i/676))
			snap.names = append(snap.names, n)
			snap.bytes = append(snap.bytes, []byte(n))
			snap.ids[n] = uint64(i + 1)
		}
		s.names.snap.Store(snap)
	}
	return s.names
}

// TestMergeRecordsMatchesEncode checks that the byte-level merge gives
// exactly the record encode gives for the merged property map, with the
// names in the dictionary, written in full (a full dictionary), and both
// in one record.
func TestMergeRecordsMatchesEncode(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"dictionary", "full", "mixed"} {
		t.Run(mode, func(t *testing.T) { testMergeMatchesEncode(t, mode) })
	}
}

func testMergeMatchesEncode(t *testing.T, mode string) {
	d := testNames(t, mode == "full")
	if mode == "mixed" {
		// a, c, e in the dictionary (in an order unlike the names'), the
		// rest written in full.
		for _, n := range []string{"e", "a", "c"} {
			d.id(n)
		}
		old := d.snap.Load()
		snap := &nameSnap{ids: old.ids, names: old.names, bytes: old.bytes, fresh: old.fresh}
		for len(snap.names) < maxNames {
			n := "zz-filler-" + strings.Repeat("x", len(snap.names))
			snap.names = append(snap.names, n)
			snap.bytes = append(snap.bytes, []byte(n))
		}
		d.snap.Store(snap)
	}
	encodeEntity := func(ts time.Time, props map[string]any) []byte {
		b, _ := d.encode(ts, props)
		return b
	}
	mergeRecords := func(cur, patch []byte, ts time.Time, keySize int) ([]byte, error) {
		b, _, err := d.merge(cur, patch, ts, keySize)
		return b, err
	}
	decodeEntity := d.decode
	ts := time.Unix(1700000000, 123456789)
	at := time.Unix(1600000000, 42).UTC()
	cases := []struct {
		name       string
		cur, patch map[string]any
	}{
		{"empty both", map[string]any{}, map[string]any{}},
		{"empty patch", map[string]any{"a": "x", "b": int64(2)}, map[string]any{}},
		{"empty current", map[string]any{}, map[string]any{"a": "x", "b": true}},
		{"replace and add", map[string]any{"a": "old", "c": int32(3), "e": []byte{1, 2}},
			map[string]any{"a": "new", "b": 1.5, "d": at, "f": false}},
		{"all types interleaved", map[string]any{"b": "ünïcode 𝄞", "d": int64(-1), "f": []byte{}},
			map[string]any{"a": int32(-7), "c": true, "d": "now a string", "g": at}},
		{"patch after all", map[string]any{"a": "1"}, map[string]any{"z": "2"}},
		{"patch before all", map[string]any{"z": "1"}, map[string]any{"a": "2"}},
		{"traceparents", map[string]any{"a": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "c": "x"},
			map[string]any{"b": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", "c": "00-00000000000000000000000000000001-0000000000000001-01"}},
	}
	for _, c := range cases {
		cur := encodeEntity(time.Unix(1, 0), c.cur)
		patch := encodeEntity(ts, c.patch)
		got, err := mergeRecords(cur, patch, ts, 10)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		merged := maps.Clone(c.cur)
		maps.Copy(merged, c.patch)
		if want := encodeEntity(ts, merged); !bytes.Equal(got, want) {
			t.Errorf("%s: merged record\n got %x\nwant %x", c.name, got, want)
		}
		_, props, err := decodeEntity(got)
		if err != nil || len(props) != len(merged) {
			t.Errorf("%s: decode merged: %v, %d props, want %d", c.name, err, len(props), len(merged))
		}
	}
}

// TestMergeRecordsLimits checks that a merge past the entity limits fails
// with ErrTooLarge, measured as storage.EntitySize measures.
func TestMergeRecordsLimits(t *testing.T) {
	t.Parallel()
	d := testNames(t, false)
	encodeEntity := func(ts time.Time, props map[string]any) []byte {
		b, _ := d.encode(ts, props)
		return b
	}
	mergeRecords := func(cur, patch []byte, ts time.Time, keySize int) ([]byte, error) {
		b, _, err := d.merge(cur, patch, ts, keySize)
		return b, err
	}
	ts := time.Unix(1700000000, 0)
	big := strings.Repeat("é", 30000) // 60,000 bytes in UTF-16
	cur := map[string]any{}
	for i := range 18 {
		cur[string(rune('a'+i))] = big
	}
	e := storage.Entity{PartitionKey: "pk", RowKey: "rk", Properties: cur}
	keySize := 4 + 2*2 + 2*2
	if err := storage.ValidateEntity(e); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("setup: 18 × 60,000 bytes should be too large, got %v", err)
	}
	base := maps.Clone(cur)
	delete(base, "q")
	rec := encodeEntity(ts, base)
	_, err := mergeRecords(rec, encodeEntity(ts, map[string]any{"q": big}), ts, keySize)
	if !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("merge to %d bytes: got %v, want ErrTooLarge", storage.EntitySize(e), err)
	}
	// Replacing a value (same count, same size) stays within the limit.
	if _, err := mergeRecords(rec, encodeEntity(ts, map[string]any{"a": big}), ts, keySize); err != nil {
		t.Fatalf("replace within limit: %v", err)
	}

	many := map[string]any{}
	for i := range storage.MaxProperties {
		many["p"+strings.Repeat("x", i%5)+string(rune('A'+i%26))+string(rune('a'+i/26))] = true
	}
	if len(many) != storage.MaxProperties {
		t.Fatalf("setup: %d properties", len(many))
	}
	_, err = mergeRecords(encodeEntity(ts, many), encodeEntity(ts, map[string]any{"zz": true}), ts, keySize)
	if !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("merge to %d properties: got %v, want ErrTooLarge", storage.MaxProperties+1, err)
	}
}

// TestUTF16LenBytes checks the UTF-16 length against the rune count rule.
func TestUTF16LenBytes(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "ascii", "é", "𝄞x", "a\xffb", "\xed\xa0\x80", strings.Repeat("z", 100) + "ü"} {
		want := 0
		for _, r := range s {
			if r >= 0x10000 {
				want += 2
			} else {
				want++
			}
		}
		if got := utf16LenBytes([]byte(s)); got != want {
			t.Errorf("utf16LenBytes(%q) = %d, want %d", s, got, want)
		}
	}
}

// TestETagFormat checks the hand-written ETag (etagOf, and appendETag that
// matches compares with) against time.Format.
func TestETagFormat(t *testing.T) {
	t.Parallel()
	for _, ns := range []int64{0, 1, 999999999, 1700000000123456789, -1, time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC).UnixNano(), time.Date(1969, 7, 20, 20, 17, 40, 5, time.UTC).UnixNano()} {
		want := `W/"datetime'` + time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000000000Z") + `'"`
		if got := etagOf(ns); got != want {
			t.Errorf("etagOf(%d) = %s, want %s", ns, got, want)
		}
		if got := string(appendETag([]byte("x"), ns)); got != "x"+want {
			t.Errorf("appendETag(x, %d) = %s, want x%s", ns, got, want)
		}
	}
}

// TestEncodeEntityExactSize checks that encodeEntity sizes its buffer
// exactly (one allocation, nothing unused), long values included.
func TestEncodeEntityExactSize(t *testing.T) {
	for _, full := range []bool{false, true} {
		d := testNames(t, full)
		testEncodeExactSize(t, d)
	}
}

func testEncodeExactSize(t *testing.T, d *names) {
	props := map[string]any{
		"S": "short", "Long": strings.Repeat("x", 70_000), "Empty": "", "B": []byte{1, 2, 3},
		"T": true, "F": false, "I": int32(-7), "L": int64(1 << 40), "D": 2.5, "At": time.Unix(1_700_000_000, 5),
		strings.Repeat("N", 200): "a long name", "TP": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	}
	b, _ := d.encode(time.Unix(0, 42), props)
	if len(b) != cap(b) {
		t.Fatalf("encoded %d bytes into a buffer of %d", len(b), cap(b))
	}
	_, got, err := d.decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(props) || got["Long"] != props["Long"] || got["S"] != "short" {
		t.Fatalf("round trip: got %d properties", len(got))
	}
}

// TestEncodePropsMatchesEncode: a record encoded from Props is byte for
// byte the record encoded from the same Properties, whatever their order.
func TestEncodePropsMatchesEncode(t *testing.T) {
	for _, full := range []bool{false, true} {
		d := testNames(t, full)
		props := map[string]any{
			"S": "short", "Empty": "", "B": []byte{1, 2, 3}, "T": true, "F": false, "I": int32(-7),
			"L": int64(1 << 40), "D": 2.5, "At": time.Unix(1_700_000_000, 5), "Zero": time.Time{},
			strings.Repeat("N", 200): "a long name", "TP": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		}
		want, _ := d.encode(time.Unix(0, 42), props)
		var ps []storage.Prop
		for name, v := range props {
			p, err := storage.PropOf(name, v)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		for i := range 3 {
			rand.Shuffle(len(ps), func(a, b int) { ps[a], ps[b] = ps[b], ps[a] })
			got, _ := d.encodeProps(time.Unix(0, 42), ps)
			if !bytes.Equal(got, want) || len(got) != cap(got) {
				t.Fatalf("full=%v order %d: Props encode to %x (cap %d), Properties to %x", full, i, got, cap(got), want)
			}
		}
		_, back, err := d.decode(want)
		if err != nil {
			t.Fatal(err)
		}
		if z := back["Zero"].(time.Time); !z.IsZero() {
			t.Fatalf("the zero time came back as %s", z)
		}
	}
}

// TestDecodeBothFormats checks that a record of either format decodes to
// the same entity, and that the first byte tells them apart for every
// write time after 1970.
func TestDecodeBothFormats(t *testing.T) {
	t.Parallel()
	d := testNames(t, false)
	props := map[string]any{"Type": "x", "Attempts": int32(3), "At": time.Unix(1_700_000_000, 5).UTC(), "Raw": []byte{0xC2}}
	for _, ts := range []time.Time{time.Unix(0, 1), time.Unix(1_700_000_000, 0), time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)} {
		v1 := encodeEntityV1(ts, props)
		v2, _ := d.encode(ts, props)
		if isV2(v1) || !isV2(v2) {
			t.Fatalf("%v: format-1 record taken for format 2 (%x) or the reverse", ts, v1[:1])
		}
		if len(v2) >= len(v1) {
			t.Errorf("%v: format 2 is %d bytes, format 1 %d: names are not repeated, so it should be smaller", ts, len(v2), len(v1))
		}
		for _, rec := range [][]byte{v1, v2} {
			gotTS, got, err := d.decode(rec)
			if err != nil || !gotTS.Equal(ts) || !maps.EqualFunc(got, props, func(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
				t.Fatalf("decode %x: %v %v %v", rec[:1], gotTS, got, err)
			}
			if recordTimestamp(rec) != ts.UnixNano() {
				t.Fatalf("recordTimestamp of %x: %d", rec[:1], recordTimestamp(rec))
			}
		}
	}
}

// TestTraceParentValue checks the binary traceparent value (format 3): a
// string in a traceparent's form is stored in 27 bytes instead of 57 and
// reads back as the same string, counted by the entity limits as the
// string it is; a string that only looks like one (upper-case hex, a
// wrong length, a misplaced dash, a non-hex digit) stays a string.
func TestTraceParentValue(t *testing.T) {
	t.Parallel()
	d := testNames(t, false)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	binary := []string{tp, "ff-ffffffffffffffffffffffffffffffff-ffffffffffffffff-ff",
		"cc-00000000000000000000000000000000-0000000000000000-00", "00-0123456789abcdef0123456789abcdef-fedcba9876543210-03"}
	text := []string{"", "00", tp[:54], tp + "-", tp + "0",
		strings.ToUpper(tp), "00-0AF7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g",
		"00-0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331-01",
		"00-0af7651916cd43dd8448eb211c80319-cb7ad6b7169203331-01",
		"0-00af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333ü-0"}
	size := func(s string) int {
		rec, _ := d.encode(time.Unix(0, 1), map[string]any{"TraceParent": s})
		_, props, err := d.decode(rec)
		if err != nil || props["TraceParent"] != s {
			t.Fatalf("%q reads back as %q (%v)", s, props["TraceParent"], err)
		}
		_, b, _ := recordProps(rec)
		p, rest, err := nextProp(d.snap.Load(), b)
		if err != nil || len(rest) != 0 {
			t.Fatalf("%q: nextProp: %v, %d bytes left", s, err, len(rest))
		}
		if want := storage.EntitySize(storage.Entity{Properties: map[string]any{"TraceParent": s}}) - storage.EntitySize(storage.Entity{}) - 8 - 2*len("TraceParent"); p.size != want {
			t.Errorf("%q counts %d bytes toward the entity limit, as a string %d", s, p.size, want)
		}
		return len(p.enc)
	}
	for _, s := range binary {
		if n := size(s); n != 1+traceParentBytes {
			t.Errorf("%q is stored in %d bytes, want %d (binary)", s, n, 1+traceParentBytes)
		}
	}
	for _, s := range text {
		if n := size(s); n != 1+uvarintLen(len(s))+len(s) {
			t.Errorf("%q is stored in %d bytes, want it as a string (%d)", s, n, 1+uvarintLen(len(s))+len(s))
		}
	}
	// A merge keeps the binary value as it is, and matches encode.
	cur, _ := d.encode(time.Unix(1, 0), map[string]any{"Type": "t", "TraceParent": tp})
	patch, _ := d.encode(time.Unix(2, 0), map[string]any{"State": "completed"})
	got, _, err := d.merge(cur, patch, time.Unix(2, 0), 10)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := d.encode(time.Unix(2, 0), map[string]any{"Type": "t", "TraceParent": tp, "State": "completed"})
	if !bytes.Equal(got, want) {
		t.Fatalf("merged record\n got %x\nwant %x", got, want)
	}
}
