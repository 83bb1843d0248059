package openapitest

import (
	"net/http"
	"strings"
	"testing"
)

const small = `{
  "openapi": "3.1.0",
  "info": {"title": "t", "version": "1"},
  "paths": {
    "/things/{id}": {"get": {"responses": {
      "200": {"description": "ok", "headers": {"X-Req": {"required": true, "schema": {"type": "integer", "minimum": 1}}},
              "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
      "204": {"description": "empty"}}}},
    "/things/special": {"get": {"responses": {"200": {"description": "ok", "content": {"text/plain": {"schema": {"type": "string"}}}}}}}
  },
  "components": {"schemas": {"Thing": {"type": "object", "additionalProperties": false, "required": ["id", "kind"],
    "properties": {
      "id": {"type": "string", "format": "uuid"},
      "kind": {"type": "string", "enum": ["a", "b"]},
      "n": {"type": "integer", "minimum": 0, "maximum": 9},
      "at": {"type": "string", "format": "date-time"},
      "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
      "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
      "opt": {"type": ["string", "null"]}}}}}
}`

const okThing = `{"id":"0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10","kind":"a","n":3,"at":"2026-01-02T03:04:05.678Z","name":"abc","tags":["x"],"opt":null}`

func TestCheck(t *testing.T) {
	s, err := Load([]byte(small))
	if err != nil {
		t.Fatal(err)
	}
	json := http.Header{"Content-Type": {"application/json"}, "X-Req": {"7"}}
	if err := s.Check("GET", "/things/42", 200, json, []byte(okThing)); err != nil {
		t.Fatalf("a valid response: %v", err)
	}
	if !s.Seen("GET /things/{id} 200") || s.Seen("GET /things/{id} 204") {
		t.Fatal("Seen does not record what Check passed")
	}
	if tmpl, _ := s.Template("/things/special"); tmpl != "/things/special" {
		t.Fatalf("a literal path loses to a template: %q", tmpl)
	}
	bad := []struct {
		code   int
		header http.Header
		body   string
		want   string
	}{
		{200, json, `{"id":"0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10"}`, "missing property 'kind'"},
		{200, json, strings.Replace(okThing, `"kind":"a"`, `"kind":"c"`, 1), "at '/kind': value must be one of"},
		{200, json, strings.Replace(okThing, `"n":3`, `"n":3.5`, 1), "at '/n': got number, want integer"},
		{200, json, strings.Replace(okThing, `"n":3`, `"n":10`, 1), "at '/n': maximum"},
		{200, json, strings.Replace(okThing, `"opt":null`, `"extra":1`, 1), "additional properties 'extra' not allowed"},
		{200, json, strings.Replace(okThing, `0b9f7a4e-3c1d`, `0b9f7a4e3c1d`, 1), "is not valid uuid"},
		{200, json, strings.Replace(okThing, `2026-01-02T03`, `2026-01-02 03`, 1), "is not valid date-time"},
		{200, json, strings.Replace(okThing, `"abc"`, `"ABC"`, 1), "does not match pattern"},
		{200, json, strings.Replace(okThing, `"abc"`, `"abcdef"`, 1), "at '/name': maxLength"},
		{200, json, strings.Replace(okThing, `["x"]`, `["x","y","z"]`, 1), "at '/tags': maxItems"},
		{200, json, strings.Replace(okThing, `["x"]`, `[1]`, 1), "at '/tags/0': got number, want string"},
		{200, http.Header{"Content-Type": {"application/json"}}, okThing, "required header X-Req"},
		{200, http.Header{"Content-Type": {"application/json"}, "X-Req": {"0"}}, okThing, "header X-Req: jsonschema validation failed with '#/paths/~1things~1%7Bid%7D/get/responses/200/headers/X-Req/schema'\n- at '': minimum: got 0, want 1"},
		{200, http.Header{"Content-Type": {"text/html"}, "X-Req": {"1"}}, okThing, "text/html is not documented"},
		{201, json, okThing, "201, which is not documented"},
		{204, json, "x", "without a body"},
		{200, json, "{", "not JSON"},
	}
	for _, c := range bad {
		err := s.Check("GET", "/things/42", c.code, c.header, []byte(c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d %s: error %v, want one containing %q", c.code, c.body, err, c.want)
		}
	}
	if err := s.Check("GET", "/nothing", 200, json, nil); err == nil {
		t.Error("an undocumented path passed")
	}
	if err := s.Check("POST", "/things/42", 200, json, []byte(okThing)); err == nil {
		t.Error("an undocumented method passed")
	}
}

// TestLoadRefusesWhatItCannotCheck: a description whose rules would not
// all be checked does not load.
func TestLoadRefusesWhatItCannotCheck(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{`"required": ["id", "kind"]`, `"requried": ["id", "kind"]`, "at '/requried': false schema"},
		{`"additionalProperties": false`, `"discriminator": {"propertyName": "kind"}`, "at '/discriminator': false schema"},
		{`"minimum": 0, "maximum": 9`, `"minimum": 0, "maxmum": 9`, "at '/properties/n/maxmum': false schema"},
		{`"format": "uuid"`, `"format": "currency"`, "at '/properties/id/format': value must be one of"},
		{`"type": "integer", "minimum": 0`, `"type": "int", "minimum": 0`, "at '/properties/n/type': value must be one of"},
		{`"pattern": "^[a-z]+$"`, `"pattern": "^[a-z+$"`, "'^[a-z+$' is not valid regex"},
		{`"#/components/schemas/Thing"`, `"#/components/schemas/Nothing"`, "not found"},
		{`"#/components/schemas/Thing"`, `"other.json#/Thing"`, `failing loading "https://openapitest.invalid/other.json"`},
		{`"openapi": "3.1.0"`, `"openapi": "3.0.3"`, "want 3.1.x"},
	} {
		if !strings.Contains(small, c.from) {
			t.Fatalf("small lacks %s", c.from)
		}
		_, err := Load([]byte(strings.Replace(small, c.from, c.to, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s → %s: Load error %v, want %q", c.from, c.to, err, c.want)
		}
	}
	if _, err := Load([]byte(strings.Replace(small, `"additionalProperties": false`, `"x-note": "ok", "additionalProperties": false`, 1))); err != nil {
		t.Errorf("an x- extension in a schema: %v", err)
	}
}
