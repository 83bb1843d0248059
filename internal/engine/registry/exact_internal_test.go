package registry

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

type exactInner struct {
	Name string `json:"name"`
}

type exactBase struct {
	ID string `json:"id"`
}

type exactCmd struct {
	exactBase
	Ms      int                   `json:"ms"`
	Count   int64                 `json:"count,string"`
	Inner   exactInner            `json:"inner"`
	List    []exactInner          `json:"list"`
	ByKey   map[string]exactInner `json:"byKey"`
	Ptr     *exactInner           `json:"ptr"`
	Raw     json.RawMessage       `json:"raw"`
	Any     any                   `json:"any"`
	When    time.Time             `json:"when"`
	Untaged string
	skipped int // unexported: not a field of the JSON
}

var _ = exactCmd{skipped: 0}

// TestCheckExactKeys: keys that fold to a field but are spelled otherwise
// are refused at any depth where the Go type has a struct; opaque values
// (RawMessage, any, types that decode themselves) and map keys are not
// looked into.
func TestCheckExactKeys(t *testing.T) {
	typ := reflect.TypeFor[exactCmd]()
	for _, ok := range []string{
		`{}`, `{"ms":1,"id":"x","count":"5","Untaged":"u"}`,
		`{"inner":{"name":"a"},"list":[{"name":"b"}],"byKey":{"MS":{"name":"c"}},"ptr":{"name":"d"}}`,
		`{"raw":{"MS":1},"any":{"NAME":2},"when":"2024-01-01T00:00:00Z"}`,
		`{"unknown":{"MS":1}}`, // unknown: left to DisallowUnknownFields
	} {
		if err := checkExactKeys(typ, []byte(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for params, want := range map[string]string{
		`{"mſ":3000}`:                          `key "mſ" at the top level is not the field "ms"`,
		`{"MS":1}`:                             `"MS"`,
		`{"ID":"x"}`:                           `not the field "id"`,
		`{"inner":{"NAME":"a"}}`:               `at /inner is not the field "name"`,
		`{"list":[{"name":"a"},{"Name":"b"}]}`: `at /list/1 is not the field "name"`,
		`{"byKey":{"k":{"nAme":"c"}}}`:         `at /byKey/k`,
		`{"ptr":{"NAME":"d"}}`:                 `at /ptr`,
		`{"untaged":"u"}`:                      `not the field "Untaged"`,
	} {
		err := checkExactKeys(typ, []byte(params))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", params, err, want)
		}
	}
}

type foldPair struct {
	A string `json:"k"`
	B string `json:"K"`
}

// TestExactKeysFast: the decoder-free check passes the plain params a
// handler gets (so the full walk is skipped) and never passes params the
// full check refuses: a folded key, one with an escape, a map key or an
// opaque value's key that is no field name, a type whose names fold to
// each other.
func TestExactKeysFast(t *testing.T) {
	typ := reflect.TypeFor[exactCmd]()
	for _, fast := range []string{
		`{}`, `{"ms":1,"id":"x","count":"5","Untaged":"u"}`,
		"{\"inner\" :\n{\"name\":\"a \\\" b\"},\"list\":[{\"name\":\"b\"}],\"ptr\":{\"name\":\"d\"}}",
		`{"when":"2024-01-01T00:00:00Z","raw":{"name":1},"any":["ms"]}`,
	} {
		if !exactKeysFast(typ, []byte(fast)) {
			t.Errorf("%s: not passed by the fast check", fast)
		}
		if err := checkExactKeys(typ, []byte(fast)); err != nil {
			t.Errorf("%s: the full check refuses it: %v", fast, err)
		}
	}
	for _, slow := range []string{
		`{"mſ":3000}`, `{"MS":1}`, `{"ID":"x"}`, `{"inner":{"NAME":"a"}}`,
		`{"list":[{"name":"a"},{"Name":"b"}]}`, `{"byKey":{"k":{"nAme":"c"}}}`,
		`{"untaged":"u"}`, `{"m\u0073":1}`, `{"byKey":{"MS":{"name":"c"}}}`,
		`{"any":{"NAME":2}}`, `{"unknown":1}`, `{"ms`, `{"a\"b":1}`,
	} {
		if exactKeysFast(typ, []byte(slow)) {
			t.Errorf("%s: passed by the fast check", slow)
		}
	}
	if exactKeysFast(reflect.TypeFor[foldPair](), []byte(`{"k":"a"}`)) {
		t.Error(`a type with fields "k" and "K": passed by the fast check`)
	}
}
