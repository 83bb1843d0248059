package openapitest

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
)

const small = `{
  "openapi": "3.1.0",
  "info": {"title": "t", "version": "1"},
  "paths": {
    "/things/{id}": {"get": {"responses": {
      "200": {"description": "ok", "headers": {"X-Req": {"required": true, "schema": {"type": "integer", "minimum": 1}},
                                               "X-Tag": {"schema": {"type": "string", "pattern": "^t[0-9]$"}}},
              "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
      "204": {"description": "empty"},
      "404": {"$ref": "#/components/responses/NotFound"}}}},
    "/things/special": {"get": {"responses": {"200": {"description": "ok", "content": {"text/plain": {"schema": {"type": "string", "minLength": 2}}}}}}}
  },
  "components": {
    "responses": {"NotFound": {"description": "no", "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}},
    "schemas": {
      "Problem": {"type": "object", "required": ["status"], "properties": {"status": {"const": 404}}},
      "Thing": {"type": "object", "additionalProperties": false, "required": ["id", "kind"],
        "properties": {
          "id": {"type": "string", "format": "uuid"},
          "kind": {"type": "string", "enum": ["a", "b"]},
          "v": {"const": 1},
          "n": {"type": "integer", "minimum": 0, "maximum": 9},
          "at": {"type": "string", "format": "date-time"},
          "home": {"type": "string", "format": "uri"},
          "name": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 5},
          "tags": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}},
          "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
          "opt": {"type": ["string", "null"]}}}}}
}`

const okThing = `{"id":"0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10","kind":"a","v":1,"n":3,"at":"2026-01-02T03:04:05.678Z",` +
	`"home":"https://example.com/x","name":"abc","tags":["x"],"counts":{"x":1},"opt":null}`

// TestCheck proves that Check accepts a valid response and catches each
// kind of mistake: every keyword the description language uses, the
// headers, the content type and the status code.
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
	text := http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
	if err := s.Check("GET", "/things/special", 200, text, []byte("hello")); err != nil {
		t.Fatalf("a valid text response: %v", err)
	}
	if err := s.Check("GET", "/things/42", 204, http.Header{}, nil); err != nil {
		t.Fatalf("a valid empty response: %v", err)
	}
	problem := http.Header{"Content-Type": {"application/problem+json"}}
	if err := s.Check("GET", "/things/42", 404, problem, []byte(`{"status":404}`)); err != nil {
		t.Fatalf("a valid response through a $ref to components.responses: %v", err)
	}
	thing := func(from, to string) string {
		if !strings.Contains(okThing, from) {
			t.Fatalf("okThing lacks %s", from)
		}
		return strings.Replace(okThing, from, to, 1)
	}
	bad := []struct {
		path   string
		code   int
		header http.Header
		body   string
		want   string
	}{
		{"/things/42", 200, json, `{"id":"0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10"}`, "missing property 'kind'"},
		{"/things/42", 200, json, thing(`"kind":"a"`, `"kind":"c"`), "at '/kind': value must be one of"},
		{"/things/42", 200, json, thing(`"v":1`, `"v":2`), "at '/v': value must be 1"},
		{"/things/42", 200, json, thing(`"n":3`, `"n":3.5`), "at '/n': got number, want integer"},
		{"/things/42", 200, json, thing(`"n":3`, `"n":"3"`), "at '/n': got string, want integer"},
		{"/things/42", 200, json, thing(`"n":3`, `"n":10`), "at '/n': maximum"},
		{"/things/42", 200, json, thing(`"n":3`, `"n":-1`), "at '/n': minimum"},
		{"/things/42", 200, json, thing(`"opt":null`, `"extra":1`), "additional properties 'extra' not allowed"},
		{"/things/42", 200, json, thing(`"counts":{"x":1}`, `"counts":{"x":"1"}`), "at '/counts/x': got string, want integer"},
		{"/things/42", 200, json, thing(`0b9f7a4e-3c1d`, `0b9f7a4e3c1d`), "is not valid uuid"},
		{"/things/42", 200, json, thing(`2026-01-02T03`, `2026-01-02 03`), "is not valid date-time"},
		{"/things/42", 200, json, thing(`https://example.com/x`, `/x`), "is not valid uri"},
		{"/things/42", 200, json, thing(`"abc"`, `"ABC"`), "does not match pattern"},
		{"/things/42", 200, json, thing(`"abc"`, `"abcdef"`), "at '/name': maxLength"},
		{"/things/42", 200, json, thing(`"abc"`, `"a"`), "at '/name': minLength"},
		{"/things/42", 200, json, thing(`["x"]`, `["x","y","z"]`), "at '/tags': maxItems"},
		{"/things/42", 200, json, thing(`["x"]`, `[]`), "at '/tags': minItems"},
		{"/things/42", 200, json, thing(`["x"]`, `[1]`), "at '/tags/0': got number, want string"},
		{"/things/42", 200, json, thing(`"opt":null`, `"opt":1`), "at '/opt': got number, want null or string"},
		{"/things/42", 200, json, `[]`, "got array, want object"},
		{"/things/42", 200, http.Header{"Content-Type": {"application/json"}}, okThing, "required header X-Req"},
		{"/things/42", 200, http.Header{"Content-Type": {"application/json"}, "X-Req": {"0"}}, okThing, "header X-Req: jsonschema validation failed with '#/paths/~1things~1%7Bid%7D/get/responses/200/headers/X-Req/schema'\n- at '': minimum: got 0, want 1"},
		{"/things/42", 200, http.Header{"Content-Type": {"application/json"}, "X-Req": {"soon"}}, okThing, "got string, want integer"},
		{"/things/42", 200, http.Header{"Content-Type": {"application/json"}, "X-Req": {"1"}, "X-Tag": {"x"}}, okThing, "header X-Tag"},
		{"/things/42", 200, http.Header{"Content-Type": {"text/html"}, "X-Req": {"1"}}, okThing, "text/html is not documented"},
		{"/things/42", 201, json, okThing, "201, which is not documented"},
		{"/things/42", 204, json, "x", "without a body"},
		{"/things/42", 200, json, "{", "not JSON"},
		{"/things/42", 200, json, okThing + "{}", "not JSON"},
		{"/things/42", 404, problem, `{"status":400}`, "at '/status': value must be 404"},
		{"/things/special", 200, text, "h", "minLength"},
	}
	for _, c := range bad {
		err := s.Check("GET", c.path, c.code, c.header, []byte(c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %d %s %s: error %v, want one containing %q", c.path, c.code, c.header, c.body, err, c.want)
		}
	}
	if err := s.Check("GET", "/nothing", 200, json, nil); err == nil {
		t.Error("an undocumented path passed")
	}
	if err := s.Check("POST", "/things/42", 200, json, []byte(okThing)); err == nil {
		t.Error("an undocumented method passed")
	}
}

func TestCheckSchemaAndComponent(t *testing.T) {
	s, err := Load([]byte(small))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSchema("Thing", []byte(okThing)); err != nil {
		t.Fatalf("a valid Thing: %v", err)
	}
	if err := s.CheckSchema("Thing", []byte(`{"kind":"a"}`)); err == nil || !strings.Contains(err.Error(), "missing property 'id'") {
		t.Errorf("CheckSchema passed a Thing without id: %v", err)
	}
	if err := s.CheckSchema("Nothing", []byte(okThing)); err == nil {
		t.Error("CheckSchema passed a schema that does not exist")
	}
	problem := http.Header{"Content-Type": {"application/problem+json"}}
	if err := s.CheckComponent("NotFound", problem, []byte(`{"status":404}`)); err != nil {
		t.Fatalf("a valid NotFound: %v", err)
	}
	if err := s.CheckComponent("NotFound", problem, []byte(`{}`)); err == nil || !strings.Contains(err.Error(), "missing property 'status'") {
		t.Errorf("CheckComponent passed a Problem without status: %v", err)
	}
	if err := s.CheckComponent("NotFound", http.Header{"Content-Type": {"application/json"}}, []byte(`{"status":404}`)); err == nil {
		t.Error("CheckComponent passed an undocumented content type")
	}
	if err := s.CheckComponent("Gone", problem, []byte(`{"status":404}`)); err == nil {
		t.Error("CheckComponent passed a response that does not exist")
	}
}

// TestFullDraft2020 shows keywords the hand-written validator refused
// (it knew a subset of 2020-12) are now asserted.
func TestFullDraft2020(t *testing.T) {
	json := http.Header{"Content-Type": {"application/json"}, "X-Req": {"7"}}
	for _, c := range []struct{ from, to, body, want string }{
		{`"maxItems": 2`, `"uniqueItems": true`, strings.Replace(okThing, `["x"]`, `["x","x"]`, 1), "items at 0 and 1 are equal"},
		{`"type": ["string", "null"]`, `"oneOf": [{"type": "string"}, {"maxLength": 3}]`, strings.Replace(okThing, `null`, `"ab"`, 1), "oneOf"},
		{`"format": "uuid"`, `"format": "email"`, okThing, "is not valid email"},
		{`"minimum": 0, "maximum": 9`, `"exclusiveMaximum": 3`, okThing, "exclusiveMaximum"},
	} {
		s, err := Load([]byte(strings.Replace(small, c.from, c.to, 1)))
		if err != nil {
			t.Fatalf("%s → %s: %v", c.from, c.to, err)
		}
		if err := s.Check("GET", "/things/42", 200, json, []byte(c.body)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s → %s: error %v, want one containing %q", c.from, c.to, err, c.want)
		}
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
		{`"#/components/responses/NotFound"`, `"#/components/responses/Nothing"`, "does not resolve"},
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

// TestRealDescription checks hand-made answers against api/openapi.json
// itself, then against a copy with one response schema broken, so the
// validator is shown to read the real schemas and catch a bad body.
func TestRealDescription(t *testing.T) {
	b, err := os.ReadFile("../../api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Load(b)
	if err != nil {
		t.Fatal(err)
	}
	const status = `{"id":"0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10","type":"SendEmail","status":"pending","attempts":0,"step":0,` +
		`"createdAt":"2026-11-22T02:21:24.652Z","updatedAt":"2026-11-22T02:21:24.652Z","queue":"commands"}`
	const path = "/v1/commands/0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10"
	hdr := http.Header{"Content-Type": {"application/json"}, "Etag": {`"ab12"`}}
	if err := s.Check("GET", path, 200, hdr, []byte(status)); err != nil {
		t.Fatalf("a valid status: %v", err)
	}
	problem := http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"2"}}
	const unavailable = `{"type":"https://github.com/cmdq-dev/cmdq/blob/main/docs/api.md#unavailable","title":"Unavailable","status":503}`
	if err := s.Check("GET", path, 503, problem, []byte(unavailable)); err != nil {
		t.Fatalf("a valid 503: %v", err)
	}
	for _, c := range []struct {
		code     int
		header   http.Header
		from, to string
		want     string
		body     string
	}{
		{200, hdr, `"attempts":0`, `"attempts":"0"`, "at '/attempts': got string, want integer", status},
		{200, hdr, `"attempts":0`, `"attempts":-1`, "at '/attempts': minimum", status},
		{200, hdr, `"status":"pending"`, `"status":"waiting"`, "at '/status': value must be one of", status},
		{200, hdr, `"0b9f7a4e`, `"0B9F7A4E`, "at '/id': '0B9F7A4E", status},
		{200, hdr, `"createdAt":"2026-11-22T`, `"createdAt":"2026-11-22 `, "at '/createdAt'", status},
		{200, hdr, `"queue"`, `"queues"`, "missing property 'queue'", status},
		{200, hdr, `}`, `,"traceId":"xyz"}`, "at '/traceId'", status},
		{200, hdr, `}`, `,"extra":1}`, "additional properties 'extra' not allowed", status},
		{200, http.Header{"Content-Type": {"application/json"}, "Etag": {"ab12"}}, "", "", "header ETag: jsonschema validation failed with '#/components/headers/ETag/schema'\n- at '': 'ab12' does not match pattern", status},
		{200, http.Header{"Content-Type": {"application/json"}}, "", "", "required header ETag", status},
		{503, http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"0"}}, "", "", "header Retry-After: jsonschema validation failed with '#/components/headers/Retry-After/schema'\n- at '': minimum: got 0, want 1", unavailable},
		{503, http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"soon"}}, "", "", "header Retry-After: jsonschema validation failed with '#/components/headers/Retry-After/schema'\n- at '': got string, want integer", unavailable},
		{503, problem, `"status":503`, `"status":600`, "at '/status': maximum", unavailable},
		{503, problem, `#unavailable`, `#elsewhere`, "at '/type': value must be one of", unavailable},
	} {
		body := strings.Replace(c.body, c.from, c.to, 1)
		if c.from != "" && body == c.body {
			t.Fatalf("%s lacks %s", c.body, c.from)
		}
		err := s.Check("GET", path, c.code, c.header, []byte(body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d %v %s: error %v, want one containing %q", c.code, c.header, body, err, c.want)
		}
	}

	// A copy of the description whose Status wants attempts as a string
	// refuses the status the real one accepts.
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	attempts := schemas["Status"].(map[string]any)["properties"].(map[string]any)["attempts"].(map[string]any)
	attempts["type"] = "string"
	broken, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := Load(broken)
	if err != nil {
		t.Fatal(err)
	}
	if err := bs.Check("GET", path, 200, hdr, []byte(status)); err == nil || !strings.Contains(err.Error(), "at '/attempts': got number, want string") {
		t.Errorf("the broken description passed a status it should refuse: %v", err)
	}
}

// TestConcurrentCheck: the api tests check answers from parallel requests.
func TestConcurrentCheck(t *testing.T) {
	s, err := Load([]byte(small))
	if err != nil {
		t.Fatal(err)
	}
	hdr := http.Header{"Content-Type": {"application/json"}, "X-Req": {"7"}}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			body := okThing
			if i%2 == 1 {
				body = strings.Replace(okThing, `"n":3`, `"n":30`, 1)
			}
			if err := s.Check("GET", "/things/42", 200, hdr, []byte(body)); (err == nil) != (i%2 == 0) {
				t.Errorf("%d: %v", i, err)
			}
		})
	}
	wg.Wait()
}
