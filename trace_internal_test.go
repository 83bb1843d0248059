package cmdq

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// w3cCarrier is a propagation.TextMapCarrier of the two W3C fields.
type w3cCarrier struct{ parent, state string }

func (c *w3cCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.parent
	case "tracestate":
		return c.state
	}
	return ""
}

func (c *w3cCarrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.parent = value
	case "tracestate":
		c.state = value
	}
}

func (c *w3cCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// traceParentCases are traceparent/tracestate pairs, valid and not, for
// the comparison with the W3C propagator.
var traceParentCases = [][2]string{
	{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
	{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
	{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", "bad state ="},
	{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02", ""},
	{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-04", ""},  // reserved flag in version 00
	{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", ""}, // extra field in version 00
	{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09", ""},  // later version, more flags
	{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds", ""},
	{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", ""},
	{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
	{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
	{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", ""},
	{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""},
	{"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", ""},
	{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", ""},
	{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
	{"0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
	{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", ""},
	{"", ""},
	{"00", ""},
}

// TestTraceParentAsW3C: the stored trace context is read as the W3C
// propagator reads it (every case above and every one-byte change and
// prefix of the valid ones), and written as it writes it.
func TestTraceParentAsW3C(t *testing.T) {
	var w3c propagation.TraceContext
	cases := traceParentCases
	for _, c := range traceParentCases[:4] {
		for i := range len(c[0]) {
			cases = append(cases, [2]string{c[0][:i], c[1]})
			for _, b := range []byte{'0', 'f', 'F', '-', 'x', 0} {
				m := []byte(c[0])
				m[i] = b
				cases = append(cases, [2]string{string(m), c[1]})
			}
		}
	}
	for _, c := range cases {
		want := trace.SpanContextFromContext(w3c.Extract(context.Background(), &w3cCarrier{parent: c[0], state: c[1]}))
		got := parseTraceParent(c[0], c[1])
		if !got.Equal(want) {
			t.Errorf("parseTraceParent(%q, %q) = %v, want %v", c[0], c[1], got, want)
		}
		if !want.IsValid() {
			continue
		}
		var out w3cCarrier
		w3c.Inject(trace.ContextWithSpanContext(context.Background(), want), &out)
		parent, state := formatTraceParent(want)
		if parent != out.parent || state != out.state {
			t.Errorf("formatTraceParent(%v) = %q, %q, want %q, %q", want, parent, state, out.parent, out.state)
		}
	}
	if p, s := formatTraceParent(trace.SpanContext{}); p != "" || s != "" {
		t.Errorf("formatTraceParent(invalid) = %q, %q, want none", p, s)
	}
}

// TestTraceParentNoAllocs: reading a stored trace context allocates
// nothing (without a tracestate), writing one allocates its string only.
func TestTraceParentNoAllocs(t *testing.T) {
	tp := traceParentCases[0][0]
	sc := parseTraceParent(tp, "")
	if !sc.IsValid() {
		t.Fatalf("%q does not parse", tp)
	}
	if n := testing.AllocsPerRun(100, func() { parseTraceParent(tp, "") }); n != 0 {
		t.Errorf("parseTraceParent: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { formatTraceParent(sc) }); n != 1 {
		t.Errorf("formatTraceParent: %v allocations, want 1", n)
	}
}
