package jsonview_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq/internal/jsonview"
)

// TestIndentMatchesEncodingJSON: within the limits, the layout is
// encoding/json's Indent with two spaces.
func TestIndentMatchesEncodingJSON(t *testing.T) {
	for _, src := range []string{
		`{}`, `[]`, `{"a":1}`, `{"a":[1,2,{"b":null}],"c":{},"d":[],"e":"x\"y,{z}[w]:"}`,
		` { "a" : [ 1 , 2 ] , "b" : { } } `, `"just a string"`, `12.5`,
		`{"ü":"ſ","\\":"\u00e9"}`,
	} {
		var want bytes.Buffer
		if err := json.Indent(&want, []byte(strings.TrimSpace(src)), "", "  "); err != nil {
			t.Fatal(err)
		}
		got, cut := jsonview.Indent([]byte(src), jsonview.Unlimited, 0)
		if got != want.String() || cut {
			t.Errorf("Indent(%s) = %q (cut %v), want %q", src, got, cut, want.String())
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("Indent(%s) is not JSON: %s", src, got)
		}
	}
}

// TestIndentBoundsDepth: levels past maxDepth stay on their parent's line,
// so the output of deep nesting is linear in the input, and still the
// same JSON value.
func TestIndentBoundsDepth(t *testing.T) {
	depth := 9900
	src := `{"a":` + strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth) + `}`
	got, cut := jsonview.Indent([]byte(src), jsonview.Unlimited, 3)
	if cut {
		t.Fatal("cut without a byte limit")
	}
	want := "{\n  \"a\": [\n    [\n      " + strings.Repeat("[", depth-2) + "1" + strings.Repeat("]", depth-2) + "\n    ]\n  ]\n}"
	if got != want {
		t.Fatalf("got %.200q…, want %.200q…", got, want)
	}
	if len(got) > 2*len(src) {
		t.Fatalf("%d bytes out of %d in", len(got), len(src))
	}
	var v1, v2 any
	if json.Unmarshal([]byte(got), &v1) != nil || json.Unmarshal([]byte(src), &v2) != nil {
		t.Fatal("not JSON")
	}
}

// TestIndentBoundsSize: the output stops at maxBytes, at a character
// boundary, and says it was cut.
func TestIndentBoundsSize(t *testing.T) {
	src := `{"k":"` + strings.Repeat("é", 1000) + `"}`
	got, cut := jsonview.Indent([]byte(src), 101, 0)
	if !cut || len(got) > 101 || len(got) < 97 || !strings.HasPrefix(got, "{\n  \"k\": \"éé") {
		t.Fatalf("got %q (%d bytes), cut %v", got, len(got), cut)
	}
	if !strings.HasSuffix(got, "é") {
		t.Fatalf("cut inside a character: %q", got[len(got)-4:])
	}
	if _, cut := jsonview.Indent([]byte(`{"a":1}`+"   "), 14, 0); cut {
		t.Fatal("trailing whitespace counted as cut")
	}
}

// TestIndentInvalid: input that is not JSON (or not UTF-8) is shown, not
// refused.
func TestIndentInvalid(t *testing.T) {
	got, _ := jsonview.Indent([]byte("{\"a\":\xff,]"), jsonview.Unlimited, 0)
	if !strings.Contains(got, "\uFFFD") || !strings.HasPrefix(got, "{\n  \"a\": ") {
		t.Fatalf("got %q", got)
	}
}

// BenchmarkIndentDeep lays out 19.8 KB nested 9,900 deep with the
// console's limits.
func BenchmarkIndentDeep(b *testing.B) {
	src := []byte(`{"a":` + strings.Repeat("[", 9900) + strings.Repeat("]", 9900) + `}`)
	b.ReportAllocs()
	for b.Loop() {
		jsonview.Indent(src, 64<<10, 0)
	}
}
