package storage

import (
	"fmt"
	"iter"
	"math"
	"time"
)

// PropKind is the type of a Prop's value.
type PropKind uint8

// The kinds of Prop values: the types Entity.Properties allows.
const (
	KindString PropKind = iota + 1
	KindBinary
	KindBool
	KindInt32
	KindInt64
	KindFloat64
	KindTime
)

// Prop is one entity property in typed form: a name and a value of one of
// the types Entity allows, held without an interface box or a map entry.
// Build one with StringProp, BinaryProp, BoolProp, Int32Prop, Int64Prop,
// Float64Prop, TimeProp or PropOf; the zero Prop has no kind and is
// refused by ValidateEntity.
type Prop struct {
	// Name is the property's name.
	Name string
	kind PropKind
	nsec int32  // KindTime: nanoseconds within the second
	num  int64  // int32, int64, bool (0 or 1), float64 bits; KindTime: Unix seconds
	str  string // KindString; KindBinary: the bytes
}

// StringProp is a string property.
func StringProp(name, v string) Prop { return Prop{Name: name, kind: KindString, str: v} }

// BinaryProp is a binary property (v is copied).
func BinaryProp(name string, v []byte) Prop {
	return Prop{Name: name, kind: KindBinary, str: string(v)}
}

// BoolProp is a bool property.
func BoolProp(name string, v bool) Prop {
	p := Prop{Name: name, kind: KindBool}
	if v {
		p.num = 1
	}
	return p
}

// Int32Prop is an int32 property.
func Int32Prop(name string, v int32) Prop { return Prop{Name: name, kind: KindInt32, num: int64(v)} }

// Int64Prop is an int64 property.
func Int64Prop(name string, v int64) Prop { return Prop{Name: name, kind: KindInt64, num: v} }

// Float64Prop is a float64 property.
func Float64Prop(name string, v float64) Prop {
	return Prop{Name: name, kind: KindFloat64, num: int64(math.Float64bits(v))}
}

// TimeProp is a time property. Only the instant is kept: it reads back in
// UTC, as a time in Entity.Properties does.
func TimeProp(name string, v time.Time) Prop {
	return Prop{Name: name, kind: KindTime, num: v.Unix(), nsec: int32(v.Nanosecond())}
}

// PropOf is the property name = v for a value of one of Entity's types
// (string, []byte, bool, int32, int64, float64, time.Time). Another type
// gives an error wrapping ErrInvalidArgument.
func PropOf(name string, v any) (Prop, error) {
	switch x := v.(type) {
	case string:
		return StringProp(name, x), nil
	case []byte:
		return BinaryProp(name, x), nil
	case bool:
		return BoolProp(name, x), nil
	case int32:
		return Int32Prop(name, x), nil
	case int64:
		return Int64Prop(name, x), nil
	case float64:
		return Float64Prop(name, x), nil
	case time.Time:
		return TimeProp(name, x), nil
	}
	return Prop{Name: name}, fmt.Errorf("%w: property %q has type %T; use string, []byte, bool, int32, int64, float64 or time.Time", ErrInvalidArgument, name, v)
}

// Kind is the type of p's value (0 for the zero Prop).
func (p Prop) Kind() PropKind { return p.kind }

// Str is a KindString value ("" for another kind).
func (p Prop) Str() string {
	if p.kind != KindString {
		return ""
	}
	return p.str
}

// Binary is a KindBinary value, a new slice (nil for another kind).
func (p Prop) Binary() []byte {
	if p.kind != KindBinary {
		return nil
	}
	return []byte(p.str)
}

// BinaryString is a KindBinary value's bytes as a string, without a copy
// ("" for another kind): for a driver that appends them somewhere.
func (p Prop) BinaryString() string {
	if p.kind != KindBinary {
		return ""
	}
	return p.str
}

// Bool is a KindBool value (false for another kind).
func (p Prop) Bool() bool { return p.kind == KindBool && p.num != 0 }

// Int is a KindInt32 or KindInt64 value (0 for another kind).
func (p Prop) Int() int64 {
	if p.kind == KindInt32 || p.kind == KindInt64 {
		return p.num
	}
	return 0
}

// Float is a KindFloat64 value (0 for another kind).
func (p Prop) Float() float64 {
	if p.kind != KindFloat64 {
		return 0
	}
	return math.Float64frombits(uint64(p.num))
}

// Time is a KindTime value, in UTC (the zero time for another kind).
func (p Prop) Time() time.Time {
	if p.kind != KindTime {
		return time.Time{}
	}
	return time.Unix(p.num, int64(p.nsec)).UTC()
}

// Value is p's value as Entity.Properties holds it (nil for the zero
// Prop).
func (p Prop) Value() any {
	switch p.kind {
	case KindString:
		return p.str
	case KindBinary:
		return []byte(p.str)
	case KindBool:
		return p.num != 0
	case KindInt32:
		return int32(p.num)
	case KindInt64:
		return p.num
	case KindFloat64:
		return p.Float()
	case KindTime:
		return p.Time()
	}
	return nil
}

// All yields e's properties, name and value: Props when e has them, else
// Properties (map order).
func (e Entity) All() iter.Seq2[string, any] {
	return func(yield func(string, any) bool) {
		if e.Props != nil {
			for _, p := range e.Props {
				if !yield(p.Name, p.Value()) {
					return
				}
			}
			return
		}
		for name, v := range e.Properties {
			if !yield(name, v) {
				return
			}
		}
	}
}

// PropCount is the number of e's properties.
func (e Entity) PropCount() int {
	if e.Props != nil {
		return len(e.Props)
	}
	return len(e.Properties)
}
