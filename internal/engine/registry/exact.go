package registry

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// encoding/json matches an object's keys to struct fields without regard
// to case, Unicode folding included ("mſ" and "MS" both fill the field
// "ms"), so a handler could run with a value the stored JSON does not give
// that field. Params are matched exactly instead: before they are decoded,
// every object key met where the Go type has a struct is checked against
// the struct's JSON field names; one that is not spelled exactly as a
// field, but folds to one, is an error naming both. (Keys that match no
// field at all are left to the decoder's DisallowUnknownFields.)

// maxKeyDepth bounds the check's recursion, as encoding/json bounds its
// own nesting (10,000 levels).
const maxKeyDepth = 10000

// structFields maps a struct type's JSON field names to their types.
type structFields map[string]reflect.Type

var fieldCache sync.Map // reflect.Type → structFields

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// fieldsOf returns the JSON field names of struct type t as encoding/json
// sees them: tags first, exported fields, fields of untagged embedded
// structs promoted (the shallower one wins a name).
func fieldsOf(t reflect.Type) structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(structFields)
	}
	out := structFields{}
	depthOf := map[string]int{}
	var walk func(t reflect.Type, depth int, seen map[reflect.Type]bool)
	walk = func(t reflect.Type, depth int, seen map[reflect.Type]bool) {
		if seen[t] {
			return
		}
		seen[t] = true
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			ft := sf.Type
			if sf.Anonymous && name == "" {
				et := ft
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct {
					walk(et, depth+1, seen)
					continue
				}
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if strings.Contains(","+opts+",", ",string,") {
				ft = reflect.TypeFor[string]()
			}
			if d, ok := depthOf[name]; ok && d <= depth {
				continue
			}
			out[name], depthOf[name] = ft, depth
		}
	}
	walk(t, 0, map[reflect.Type]bool{})
	fieldCache.Store(t, out)
	return out
}

// opaque reports whether values of t decode themselves (or hold any
// JSON): the check does not look inside them.
func opaque(t reflect.Type) bool {
	if t.Kind() == reflect.Interface {
		return true
	}
	return t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		(t.Kind() != reflect.Struct && (t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)))
}

// checkExactKeys walks params (one valid JSON value) along Go type t and
// returns an error for the first object key that is not spelled as the
// struct field it would fill.
func checkExactKeys(t reflect.Type, params []byte) error {
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.UseNumber()
	var walk func(t reflect.Type, path string, depth int) error
	// skip reads one value whatever it holds.
	skip := func() error {
		depth := 0
		for {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			switch tok {
			case json.Delim('{'), json.Delim('['):
				depth++
			case json.Delim('}'), json.Delim(']'):
				depth--
			}
			if depth == 0 {
				return nil
			}
		}
	}
	walk = func(t reflect.Type, path string, depth int) error {
		if depth > maxKeyDepth {
			return fmt.Errorf("params are nested more than %d levels deep", maxKeyDepth)
		}
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == nil || opaque(t) {
			return skip()
		}
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			var fields structFields
			var elem reflect.Type
			switch t.Kind() {
			case reflect.Struct:
				fields = fieldsOf(t)
			case reflect.Map:
				elem = t.Elem()
			}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				k, _ := kt.(string)
				next := elem
				if fields != nil {
					ft, exact := fields[k]
					if !exact {
						for name := range fields {
							if strings.EqualFold(name, k) {
								return fmt.Errorf("key %q at %s is not the field %q: params keys are matched exactly (case and letters as written)", k, pathOrTop(path), name)
							}
						}
					}
					next = ft // nil for an unknown key: its value is skipped
				}
				if err := walk(next, path+"/"+k, depth+1); err != nil {
					return err
				}
			}
			_, err = dec.Token() // '}'
			return err
		case json.Delim('['):
			var elem reflect.Type
			if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
				elem = t.Elem()
			}
			for i := 0; dec.More(); i++ {
				if err := walk(elem, fmt.Sprintf("%s/%d", path, i), depth+1); err != nil {
					return err
				}
			}
			_, err = dec.Token() // ']'
			return err
		}
		return nil // a scalar
	}
	if err := walk(t, "", 0); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil // the decoder reports it
		}
		return err
	}
	return nil
}

// pathOrTop names a JSON Pointer-like path for an error ("the top level"
// for the params object itself).
func pathOrTop(p string) string {
	if p == "" {
		return "the top level"
	}
	return p
}

// describeDecodeError turns an encoding/json error met decoding params into
// Go type t into a sentence about the JSON, without Go's words ("Go struct
// field demoSleep.ms of type int" becomes "\"ms\" must be a whole number,
// not a string").
func describeDecodeError(t reflect.Type, err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		got := te.Value
		if strings.HasPrefix(got, "number ") {
			got = "the number " + strings.TrimPrefix(got, "number ")
		} else if got != "null" {
			got = "a" + article(got) + " " + got
		}
		if te.Field == "" {
			return fmt.Errorf("params must be %s, not %s", jsonKind(te.Type), got)
		}
		return fmt.Errorf("%q must be %s, not %s", te.Field, jsonKind(te.Type), got)
	case errors.As(err, &se):
		return fmt.Errorf("params are not valid JSON (at byte %d): %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		if t != nil {
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
		}
		if t != nil && t.Kind() == reflect.Struct {
			var names []string
			for n := range fieldsOf(t) {
				names = append(names, strconv.Quote(n))
			}
			sort.Strings(names)
			if len(names) > 0 {
				return fmt.Errorf("params have no field %s (the fields are %s)", name, strings.Join(names, ", "))
			}
		}
		return fmt.Errorf("params have no field %s", name)
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

// article is "n" before a vowel sound, else "".
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "n"
	}
	return ""
}

// jsonKind names the JSON a value of Go type t is decoded from.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON value"
}

// keyNames is every JSON field name of the structs reachable from a type
// (through pointers, slices, arrays, maps and struct fields; not inside
// opaque types), for exactKeysFast; usable is false when two of them
// differ but fold to each other (then only the full check decides).
type keyNames struct {
	names  map[string]struct{}
	usable bool
}

var keyNamesCache sync.Map // reflect.Type → *keyNames

func keyNamesOf(t reflect.Type) *keyNames {
	if k, ok := keyNamesCache.Load(t); ok {
		return k.(*keyNames)
	}
	k := &keyNames{names: map[string]struct{}{}, usable: true}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == nil || seen[t] || opaque(t) {
			return
		}
		seen[t] = true
		switch t.Kind() {
		case reflect.Struct:
			for name, ft := range fieldsOf(t) {
				k.names[name] = struct{}{}
				walk(ft)
			}
		case reflect.Slice, reflect.Array, reflect.Map:
			walk(t.Elem())
		}
	}
	walk(t)
	for a := range k.names {
		for b := range k.names {
			if a != b && strings.EqualFold(a, b) {
				k.usable = false
			}
		}
	}
	keyNamesCache.Store(t, k)
	return k
}

// exactKeysFast reports whether params certainly passes checkExactKeys
// along t, without a decoder: every object key in params is, spelt
// exactly, a field name of t's structs, and no two of those names fold to
// each other. Then no key can fold to a field it does not equal. False
// means "not known": checkExactKeys decides (a key with an escape, a key
// of a map or of an opaque value that is no field name, an unterminated
// string). Other invalid JSON may pass: the decoder reports it.
func exactKeysFast(t reflect.Type, params []byte) bool {
	k := keyNamesOf(t)
	if !k.usable {
		return false
	}
	for i := 0; i < len(params); i++ {
		if params[i] != '"' {
			continue
		}
		start := i + 1
		end := -1
		escaped := false
		for j := start; j < len(params); j++ {
			if params[j] == '\\' {
				escaped = true
				j++ // the escaped byte
				continue
			}
			if params[j] == '"' {
				end = j
				break
			}
		}
		if end < 0 {
			return false
		}
		i = end
		j := end + 1
		for j < len(params) && (params[j] == ' ' || params[j] == '\t' || params[j] == '\n' || params[j] == '\r') {
			j++
		}
		if j < len(params) && params[j] == ':' {
			if escaped {
				return false // a key spelt with an escape
			}
			if _, ok := k.names[string(params[start:end])]; !ok {
				return false
			}
		}
	}
	return true
}
