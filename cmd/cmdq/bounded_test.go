package main

import (
	"bytes"
	"encoding/json"
	"io"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes the process allocated while fn ran
// (runtime.MemStats.TotalAlloc: what fn allocates, which load does not
// change).
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestWriteJSONBoundsDeepParams: the CLI's JSON output (status --json,
// poison show --json, which carries the params) laid out 19.8 KB of params
// nested 9,900 deep with encoding/json's indentation: hundreds of
// megabytes. It is the same JSON value, indented to a bounded depth.
func TestWriteJSONBoundsDeepParams(t *testing.T) {
	params := json.RawMessage(`{"a":` + strings.Repeat("[", 9900) + strings.Repeat("]", 9900) + `}`)
	v := struct {
		ID     string          `json:"id"`
		Params json.RawMessage `json:"params"`
	}{"x", params}
	var out bytes.Buffer
	n := allocated(func() {
		if err := writeJSON(&out, v); err != nil {
			t.Error(err)
		}
	})
	if n > 10<<20 {
		t.Errorf("writeJSON of %d bytes of params allocated %d MB, want under 10 MB", len(params), n>>20)
	}
	var back struct {
		ID     string          `json:"id"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, back.Params); err != nil || compact.String() != string(params) {
		t.Fatalf("params changed: %.100s", compact.String())
	}
	if !strings.HasPrefix(out.String(), "{\n  \"id\": \"x\",\n  \"params\": {\n") {
		t.Fatalf("not indented: %.100q", out.String())
	}
	t.Logf("writeJSON of %d bytes of params nested 9,900 deep allocated %.1f MB", len(params), float64(n)/(1<<20))
}

// BenchmarkWriteJSONDeepParams: the time of the above (go test -run '^$'
// -bench WriteJSONDeepParams -benchmem ./cmd/cmdq).
func BenchmarkWriteJSONDeepParams(b *testing.B) {
	v := map[string]json.RawMessage{"params": json.RawMessage(`{"a":` + strings.Repeat("[", 9900) + strings.Repeat("]", 9900) + `}`)}
	b.ReportAllocs()
	for b.Loop() {
		_ = writeJSON(io.Discard, v)
	}
}
