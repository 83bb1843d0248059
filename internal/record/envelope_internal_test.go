package record

import (
	"encoding/json"
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
		if i < 8 {
			if _, ok := e.appendFast(nil); !ok {
				t.Errorf("case %d: the fast path declined a plain envelope", i)
			}
		} else if i < 10 {
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
