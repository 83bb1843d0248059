package layout

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestEnvelopeMarshalFast checks that the reflection-free encoder writes
// exactly what encoding/json writes, and that every envelope it declines
// (escapes, non-ASCII, invalid parameters) still round-trips.
func TestEnvelopeMarshalFast(t *testing.T) {
	at := time.Date(2026, 11, 23, 4, 5, 6, 789_000_000, time.UTC)
	cases := []Envelope{
		{ID: "0195f3c2-7e1a-7b3c-9d4e-5f6a7b8c9d0e", Type: "orders.place"},
		{ID: "a", Type: "b", HandedOff: true},
		{ID: "x", Type: "t", First: &First{ETag: `W/"datetime'2026-11-23T04%3A05%3A06.789Z'"`, IssuedAt: at, Queue: "default", Params: json.RawMessage(`{"a": 1, "b": [1, 2 ,3], "s": "x y <&>"}`)}},
		{ID: "x", Type: "t", First: &First{ETag: "1", IssuedAt: at.Truncate(time.Second), Queue: "q", CorrelationID: "c-1", Params: json.RawMessage("{}")}, HandedOff: true},
		{ID: "x", Type: "t", First: &First{ETag: "1", IssuedAt: at, Queue: "q", Params: json.RawMessage("\n[ \"\u2028\" ]\t")}},
		{ID: "x", Type: "t", First: &First{ETag: "1", IssuedAt: at, Queue: "q"}},
		{ID: "quote\"d", Type: "t"},
		{ID: "x", Type: "t", First: &First{ETag: "1", IssuedAt: at, Queue: "q", CorrelationID: "back\\slash", Params: json.RawMessage("{}")}},
		{ID: "x", Type: "t", First: &First{ETag: "1", IssuedAt: at, Queue: "q", CorrelationID: "c", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", TraceState: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", Params: json.RawMessage("{}")}},
		{ID: "x", Type: "t", First: &First{ETag: "1", IssuedAt: at, Queue: "q", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", Params: json.RawMessage("{}")}},
		// Declined by the fast path: the encoder decides.
		{ID: "x", Type: "tab\there"},
		{ID: "x", Type: "ünï"},
		{ID: "x", Type: "t", First: &First{ETag: "1", IssuedAt: at, Queue: "q", Params: json.RawMessage("{")}},
	}
	for i, e := range cases {
		want := e.marshalSlow()
		if got := e.Marshal(); got != want {
			t.Errorf("case %d: Marshal = %s, encoding/json = %s", i, got, want)
		}
		if i < 10 {
			if _, ok := e.appendFast(nil); !ok {
				t.Errorf("case %d: the fast path declined a plain envelope", i)
			}
		} else if i < 12 {
			if _, ok := e.appendFast(nil); ok {
				t.Errorf("case %d: the fast path took a string that needs escaping", i)
			}
			var back Envelope
			if err := json.Unmarshal([]byte(e.Marshal()), &back); err != nil || back.ID != e.ID || back.Type != e.Type {
				t.Errorf("case %d: %s does not round-trip: %v", i, e.Marshal(), err)
			}
		}
	}
}

// TestEventRowKey checks the hand-written row key against the format it
// replaced, at the edges of its ten digits.
func TestEventRowKey(t *testing.T) {
	for _, seq := range []int64{0, 1, 9, 10, 42, 1_000_000, 9_999_999_999, 10_000_000_000, -1} {
		if got, want := EventRowKey(seq), fmt.Sprintf("%s%010d", EventRowPrefix, seq); got != want {
			t.Errorf("EventRowKey(%d) = %q, want %q", seq, got, want)
		}
	}
}

// TestParseEnvelopeFast checks that the reflection-free parser returns what
// the strict decoder returns for every message it accepts: Marshal's
// output of varied envelopes, and every prefix and one-byte change of it
// (which it must decline or parse exactly as the decoder does).
func TestParseEnvelopeFast(t *testing.T) {
	at := time.Date(2026, 11, 23, 4, 5, 6, 789_000_000, time.UTC)
	ids := []string{"0195f3c2-7e1a-7b3c-9d4e-5f6a7b8c9d0e", `q"uote`, `back\slash`}
	params := []string{`{}`, `{"a":1}`, `{"s":"} ] , { [ \" \\","n":[1,{"x":null}]}`, `[]`, `"str"`, `12`, `null`, `{"u":"ünï"}`}
	var envs []Envelope
	for i, id := range ids {
		envs = append(envs, Envelope{ID: id, Type: "t.x"}, Envelope{ID: id, Type: "t", HandedOff: true})
		for j, p := range params {
			f := &First{ETag: `W/"datetime'2026-11-23T04%3A05%3A06.789Z'"`, IssuedAt: at, Queue: "default", Params: json.RawMessage(p)}
			if (i+j)%2 == 0 {
				f.CorrelationID = "corr-" + id
			}
			if j%2 == 1 {
				f.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			}
			if j%4 == 1 {
				f.TraceState = "rojo=00f067aa0ba902b7"
			}
			envs = append(envs, Envelope{ID: id, Type: "orders.place", First: f, HandedOff: j%3 == 0})
		}
	}
	accepted := 0
	for _, e := range envs {
		text := e.Marshal()
		if _, ok := parseFast(text); !ok && !strings.Contains(text, "ü") {
			t.Errorf("the fast parser declined Marshal's own %s", text)
		}
		variants := []string{text, " " + text, text + " ", text + "{}", strings.Replace(text, `"type"`, `"typo"`, 1)}
		for n := range len(text) {
			variants = append(variants, text[:n])
			for _, c := range []byte{'"', '\\', '}', ',', 'x', ' ', 0} {
				b := []byte(text)
				b[n] = c
				variants = append(variants, string(b))
			}
		}
		for _, v := range variants {
			got, ok := parseFast(v)
			if !ok {
				continue
			}
			accepted++
			want, err := parseStrict(v)
			if err != nil {
				t.Errorf("the fast parser accepted %q, which the decoder rejects: %v", v, err)
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%q: fast %+v (first %+v), decoder %+v (first %+v)", v, got, got.First, want, want.First)
			}
		}
	}
	if accepted < len(envs) {
		t.Fatalf("the fast parser accepted %d messages, fewer than the %d envelopes", accepted, len(envs))
	}
}

// FuzzParseEnvelope checks that whatever the fast parser accepts, the
// strict decoder accepts with the same result
// (go test -run '^$' -fuzz FuzzParseEnvelope ./internal/engine/layout).
func FuzzParseEnvelope(f *testing.F) {
	at := time.Date(2026, 11, 23, 4, 5, 6, 789_000_000, time.UTC)
	f.Add(Envelope{ID: "a", Type: "b"}.Marshal())
	f.Add(Envelope{ID: `x"y`, Type: "t", HandedOff: true, First: &First{ETag: "e", IssuedAt: at, Queue: "q", CorrelationID: "c", Params: json.RawMessage(`{"s":"}\""}`)}}.Marshal())
	f.Fuzz(func(t *testing.T, text string) {
		got, ok := parseFast(text)
		if !ok {
			return
		}
		want, err := parseStrict(text)
		if err != nil {
			t.Fatalf("the fast parser accepted %q, which the decoder rejects: %v", text, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: fast %+v, decoder %+v", text, got, want)
		}
	})
}

// TestEnvelopeOrderKeyFastPath: an issue's message with an order key and
// its place marshals as encoding/json does, on the fast path for a plain
// key, and back through ParseEnvelope.
func TestEnvelopeOrderKeyFastPath(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 0, 123000000, time.UTC)
	for i, key := range []string{"account-42", `quo"te`, "ünï-key"} {
		e := Envelope{ID: "x", Type: "t", First: &First{ETag: "1", IssuedAt: at, Queue: "q", Params: json.RawMessage("{}"), OrderKey: key, OrderSeq: 1234567890123}}
		if got, want := e.Marshal(), e.marshalSlow(); got != want {
			t.Errorf("case %d: Marshal = %s, encoding/json = %s", i, got, want)
		}
		if _, ok := e.appendFast(nil); ok != (i < 2) {
			t.Errorf("case %d: fast path %v for key %q", i, ok, key)
		}
		back, err := ParseEnvelope(e.Marshal())
		if err != nil || back.First == nil || back.First.OrderKey != key || back.First.OrderSeq != 1234567890123 {
			t.Errorf("case %d: parsed back %+v %v", i, back.First, err)
		}
	}
}
