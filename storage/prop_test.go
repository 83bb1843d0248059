package storage_test

import (
	"bytes"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// TestPropValues: each constructor's value reads back through its own
// accessor and Value, and reads as the zero value through the others.
func TestPropValues(t *testing.T) {
	at := time.Date(2026, 11, 29, 7, 0, 0, 123456789, time.FixedZone("x", 3600))
	cases := []struct {
		p    storage.Prop
		kind storage.PropKind
		want any
	}{
		{storage.StringProp("S", "ü"), storage.KindString, "ü"},
		{storage.BinaryProp("B", []byte{0, 1, 2}), storage.KindBinary, []byte{0, 1, 2}},
		{storage.BoolProp("T", true), storage.KindBool, true},
		{storage.BoolProp("F", false), storage.KindBool, false},
		{storage.Int32Prop("I", math.MinInt32), storage.KindInt32, int32(math.MinInt32)},
		{storage.Int64Prop("L", math.MaxInt64), storage.KindInt64, int64(math.MaxInt64)},
		{storage.Float64Prop("D", -0.25), storage.KindFloat64, -0.25},
		{storage.TimeProp("At", at), storage.KindTime, at.UTC()},
		{storage.TimeProp("Zero", time.Time{}), storage.KindTime, time.Time{}},
	}
	for _, c := range cases {
		if c.p.Kind() != c.kind {
			t.Fatalf("%s: kind %d, want %d", c.p.Name, c.p.Kind(), c.kind)
		}
		got := c.p.Value()
		switch w := c.want.(type) {
		case []byte:
			if !bytes.Equal(got.([]byte), w) || !bytes.Equal(c.p.Binary(), w) || c.p.BinaryString() != string(w) {
				t.Fatalf("%s: %v, want %v", c.p.Name, got, w)
			}
		case time.Time:
			g := got.(time.Time)
			if !g.Equal(w) || g.Location() != time.UTC || !c.p.Time().Equal(w) {
				t.Fatalf("%s: %v (%v), want %v in UTC", c.p.Name, g, g.Location(), w)
			}
		default:
			if got != c.want {
				t.Fatalf("%s: %#v, want %#v", c.p.Name, got, c.want)
			}
		}
		// Through PropOf, the same Prop.
		q, err := storage.PropOf(c.p.Name, c.want)
		if err != nil || q.Kind() != c.kind {
			t.Fatalf("PropOf(%s): %v, kind %d", c.p.Name, err, q.Kind())
		}
		// The other accessors give their zero value.
		if c.kind != storage.KindString && c.p.Str() != "" {
			t.Fatalf("%s: Str() = %q", c.p.Name, c.p.Str())
		}
		if c.kind != storage.KindBinary && (c.p.Binary() != nil || c.p.BinaryString() != "") {
			t.Fatalf("%s: Binary() = %v", c.p.Name, c.p.Binary())
		}
		if c.kind != storage.KindBool && c.p.Bool() {
			t.Fatalf("%s: Bool() = true", c.p.Name)
		}
		if c.kind != storage.KindInt32 && c.kind != storage.KindInt64 && c.p.Int() != 0 {
			t.Fatalf("%s: Int() = %d", c.p.Name, c.p.Int())
		}
		if c.kind != storage.KindFloat64 && c.p.Float() != 0 {
			t.Fatalf("%s: Float() = %v", c.p.Name, c.p.Float())
		}
		if c.kind != storage.KindTime && !c.p.Time().IsZero() {
			t.Fatalf("%s: Time() = %v", c.p.Name, c.p.Time())
		}
	}
	if v := (storage.Prop{Name: "Z"}).Value(); v != nil {
		t.Fatalf("the zero Prop's Value = %v, want nil", v)
	}
	if _, err := storage.PropOf("U", uint8(1)); !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("PropOf(uint8): %v, want ErrInvalidArgument", err)
	}
	// A binary value is copied: changing the slice later changes nothing.
	b := []byte{1}
	p := storage.BinaryProp("B", b)
	b[0] = 9
	if p.Binary()[0] != 1 {
		t.Fatal("BinaryProp kept the caller's slice")
	}
}

// TestEntityAll: All and PropCount read Props when an entity has them,
// else Properties.
func TestEntityAll(t *testing.T) {
	typed := storage.Entity{Props: []storage.Prop{storage.StringProp("A", "a"), storage.Int32Prop("B", 2)}}
	mapped := storage.Entity{Properties: map[string]any{"A": "a", "B": int32(2)}}
	for _, e := range []storage.Entity{typed, mapped} {
		got := map[string]any{}
		for name, v := range e.All() {
			got[name] = v
		}
		if len(got) != 2 || got["A"] != "a" || got["B"] != int32(2) || e.PropCount() != 2 {
			t.Fatalf("All %v, PropCount %d", got, e.PropCount())
		}
	}
	n := 0
	for range typed.All() {
		n++
		break
	}
	if n != 1 {
		t.Fatal("All went on after the loop broke")
	}
}
