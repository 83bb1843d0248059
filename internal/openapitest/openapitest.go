// Package openapitest checks real HTTP responses against cmdq's OpenAPI 3.1
// description (api/openapi.json): the status code must be documented for
// the operation, the content type must be one it lists, the required
// headers must be there and the body must validate against the schema.
//
// The schemas are checked by a small validator for the subset of JSON
// Schema 2020-12 the description uses: $ref (local), type, const, enum,
// properties, required, additionalProperties, items, minItems, maxItems,
// minimum, maximum, minLength, maxLength, pattern and format (date-time,
// uuid, uri), plus the annotations description, examples and default. Load
// refuses a description that uses any other keyword, so the validator can
// never skip a rule silently.
package openapitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Spec is a loaded description. Check records which operations and which
// of their documented responses were seen; it is safe for concurrent use.
type Spec struct {
	doc     map[string]any
	ops     map[string]map[string]any // "METHOD /path/{template}" → operation
	regexps map[string]*regexp.Regexp // "/path/{template}" → matcher

	mu   sync.Mutex
	seen map[string]bool // "METHOD /path status"
}

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// Load parses a description and checks that every schema uses only the
// supported keywords and every $ref resolves.
func Load(b []byte) (*Spec, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("openapitest: parse: %w", err)
	}
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		return nil, fmt.Errorf("openapitest: openapi is %q, want 3.1.x", v)
	}
	s := &Spec{doc: doc, ops: map[string]map[string]any{}, regexps: map[string]*regexp.Regexp{}, seen: map[string]bool{}}
	paths, _ := doc["paths"].(map[string]any)
	if len(paths) == 0 {
		return nil, fmt.Errorf("openapitest: no paths")
	}
	for p, item := range paths {
		pi, _ := item.(map[string]any)
		re := "^" + regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllString(regexp.QuoteMeta(p), `[^/]+`) + "$"
		s.regexps[p] = regexp.MustCompile(re)
		for _, m := range methods {
			o, ok := pi[m].(map[string]any)
			if !ok {
				continue
			}
			key := strings.ToUpper(m) + " " + p
			s.ops[key] = o
			rs, _ := o["responses"].(map[string]any)
			if len(rs) == 0 {
				return nil, fmt.Errorf("openapitest: %s has no responses", key)
			}
		}
	}
	var errs []string
	s.walkSchemas(doc, "#", &errs)
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("openapitest: the description uses what the validator does not check:\n%s", strings.Join(errs, "\n"))
	}
	return s, nil
}

// schemaKeywords are the keywords the validator understands.
var schemaKeywords = map[string]bool{
	"$ref": true, "type": true, "const": true, "enum": true, "properties": true, "required": true,
	"additionalProperties": true, "items": true, "minItems": true, "maxItems": true, "minimum": true, "maximum": true,
	"minLength": true, "maxLength": true, "pattern": true, "format": true,
	"description": true, "examples": true, "default": true,
}

var formats = map[string]bool{"date-time": true, "uuid": true, "uri": true}

// walkSchemas finds every "schema" (and components.schemas entry) in v and
// checks its keywords, recursively, and every $ref anywhere.
func (s *Spec) walkSchemas(v any, at string, errs *[]string) {
	switch x := v.(type) {
	case map[string]any:
		if r, ok := x["$ref"].(string); ok {
			if _, err := s.resolve(r); err != nil {
				*errs = append(*errs, at+": "+err.Error())
			}
		}
		for k, c := range x {
			switch {
			case k == "schema":
				s.checkSchema(c, at+"/schema", errs)
			case k == "schemas" && at == "#/components":
				for n, sc := range c.(map[string]any) {
					s.checkSchema(sc, at+"/schemas/"+n, errs)
				}
			default:
				s.walkSchemas(c, at+"/"+k, errs)
			}
		}
	case []any:
		for i, c := range x {
			s.walkSchemas(c, at+"/"+strconv.Itoa(i), errs)
		}
	}
}

func (s *Spec) checkSchema(v any, at string, errs *[]string) {
	sc, ok := v.(map[string]any)
	if !ok {
		*errs = append(*errs, at+": a schema must be an object")
		return
	}
	for k, c := range sc {
		if !schemaKeywords[k] {
			*errs = append(*errs, fmt.Sprintf("%s: keyword %q", at, k))
			continue
		}
		switch k {
		case "$ref":
			if _, err := s.resolve(c.(string)); err != nil {
				*errs = append(*errs, at+": "+err.Error())
			}
		case "properties":
			for n, p := range c.(map[string]any) {
				s.checkSchema(p, at+"/properties/"+n, errs)
			}
		case "items":
			s.checkSchema(c, at+"/items", errs)
		case "additionalProperties":
			if _, isBool := c.(bool); !isBool {
				s.checkSchema(c, at+"/additionalProperties", errs)
			}
		case "format":
			if !formats[c.(string)] {
				*errs = append(*errs, fmt.Sprintf("%s: format %q", at, c))
			}
		case "pattern":
			if _, err := regexp.Compile(c.(string)); err != nil {
				*errs = append(*errs, fmt.Sprintf("%s: pattern: %v", at, err))
			}
		}
	}
}

// resolve follows a local reference such as "#/components/schemas/Status".
func (s *Spec) resolve(ref string) (any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("$ref %q is not local", ref)
	}
	var cur any = s.doc
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
		if cur, ok = m[part]; !ok {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
	}
	return cur, nil
}

// deref follows $ref until an object without one.
func (s *Spec) deref(v any) map[string]any {
	for range 10 {
		m, _ := v.(map[string]any)
		r, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		v, _ = s.resolve(r)
	}
	return nil
}

// Operations returns every documented operation as "METHOD /path", sorted.
func (s *Spec) Operations() []string {
	out := make([]string, 0, len(s.ops))
	for k := range s.ops {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Responses returns every documented response as "METHOD /path status", sorted.
func (s *Spec) Responses() []string {
	var out []string
	for k, o := range s.ops {
		for code := range o["responses"].(map[string]any) {
			out = append(out, k+" "+code)
		}
	}
	sort.Strings(out)
	return out
}

// Documents reports whether operation op ("METHOD /path") documents
// status code.
func (s *Spec) Documents(op string, code int) bool {
	o, ok := s.ops[op]
	if !ok {
		return false
	}
	_, ok = o["responses"].(map[string]any)[strconv.Itoa(code)]
	return ok
}

// Role returns operation op's x-cmdq-role ("" when it has none).
func (s *Spec) Role(op string) string {
	r, _ := s.ops[op]["x-cmdq-role"].(string)
	return r
}

// Seen reports whether Check has passed a response "METHOD /path status".
func (s *Spec) Seen(response string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[response]
}

// Template returns the documented path template that path (a concrete
// request path, such as /v1/commands/0b9f…) matches.
func (s *Spec) Template(path string) (string, bool) {
	var best string
	for p, re := range s.regexps {
		// A literal path wins over a template (/v1/openapi.json, not a
		// {id} of something).
		if re.MatchString(path) && (best == "" || strings.Count(p, "{") < strings.Count(best, "{")) {
			best = p
		}
	}
	return best, best != ""
}

// Check validates one response to method path (a concrete request path).
func (s *Spec) Check(method, path string, code int, header http.Header, body []byte) error {
	tmpl, ok := s.Template(path)
	if !ok {
		return fmt.Errorf("%s %s: no documented path matches", method, path)
	}
	key := method + " " + tmpl
	o, ok := s.ops[key]
	if !ok {
		return fmt.Errorf("%s: not a documented operation", key)
	}
	rs := o["responses"].(map[string]any)
	rv, ok := rs[strconv.Itoa(code)]
	if !ok {
		return fmt.Errorf("%s answered %d, which is not documented (documented: %s)", key, code, strings.Join(sortedKeys(rs), ", "))
	}
	return s.checkResponse(fmt.Sprintf("%s %d", key, code), s.deref(rv), header, body)
}

// CheckComponent validates a response against components.responses[name]
// (for answers that belong to no operation, such as 405).
func (s *Spec) CheckComponent(name string, header http.Header, body []byte) error {
	r, err := s.resolve("#/components/responses/" + name)
	if err != nil {
		return err
	}
	return s.checkResponse("components.responses."+name, s.deref(r), header, body)
}

// CheckSchema validates a JSON body against components.schemas[name] (for
// answers that belong to no operation, such as a 405 Problem).
func (s *Spec) CheckSchema(name string, body []byte) error {
	if _, err := s.resolve("#/components/schemas/" + name); err != nil {
		return err
	}
	var val any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&val); err != nil {
		return fmt.Errorf("components.schemas.%s: body is not JSON: %w", name, err)
	}
	if errs := s.validate(map[string]any{"$ref": "#/components/schemas/" + name}, val, "body"); len(errs) > 0 {
		return fmt.Errorf("components.schemas.%s: the body does not match:\n  %s\nbody: %.600s", name, strings.Join(errs, "\n  "), body)
	}
	return nil
}

func (s *Spec) checkResponse(where string, r map[string]any, header http.Header, body []byte) error {
	if hs, ok := r["headers"].(map[string]any); ok {
		for name, hv := range hs {
			h := s.deref(hv)
			if req, _ := h["required"].(bool); req && header.Get(name) == "" {
				return fmt.Errorf("%s: required header %s is missing", where, name)
			}
			if v := header.Get(name); v != "" {
				if sc, ok := h["schema"]; ok {
					var val any = v
					if t, _ := s.deref(sc)["type"].(string); t == "integer" {
						val = json.Number(v)
					}
					if errs := s.validate(sc, val, "header "+name); len(errs) > 0 {
						return fmt.Errorf("%s: %s", where, strings.Join(errs, "; "))
					}
				}
			}
		}
	}
	content, _ := r["content"].(map[string]any)
	if len(content) == 0 {
		if len(bytes.TrimSpace(body)) > 0 {
			return fmt.Errorf("%s: documented without a body, got %d bytes", where, len(body))
		}
		s.mark(where)
		return nil
	}
	mt, _, err := mime.ParseMediaType(header.Get("Content-Type"))
	if err != nil {
		return fmt.Errorf("%s: Content-Type %q: %w", where, header.Get("Content-Type"), err)
	}
	media, ok := content[mt].(map[string]any)
	if !ok {
		return fmt.Errorf("%s: Content-Type %s is not documented (documented: %s)", where, mt, strings.Join(sortedKeys(content), ", "))
	}
	sc, ok := media["schema"]
	if !ok {
		s.mark(where)
		return nil
	}
	var val any
	if strings.HasSuffix(mt, "json") {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&val); err != nil {
			return fmt.Errorf("%s: body is not JSON: %w", where, err)
		}
	} else {
		val = string(body)
	}
	if errs := s.validate(sc, val, "body"); len(errs) > 0 {
		return fmt.Errorf("%s: the body does not match the schema:\n  %s\nbody: %.600s", where, strings.Join(errs, "\n  "), body)
	}
	s.mark(where)
	return nil
}

func (s *Spec) mark(response string) {
	s.mu.Lock()
	s.seen[response] = true
	s.mu.Unlock()
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// typeOf names a decoded JSON value's type as JSON Schema does.
func typeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if !strings.ContainsAny(x.String(), ".eE") {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// validate checks v against schema sc; at names v in messages.
func (s *Spec) validate(scv any, v any, at string) []string {
	sc, _ := scv.(map[string]any)
	if r, ok := sc["$ref"].(string); ok {
		target, err := s.resolve(r)
		if err != nil {
			return []string{at + ": " + err.Error()}
		}
		return s.validate(target, v, at)
	}
	var errs []string
	bad := func(f string, a ...any) { errs = append(errs, at+": "+fmt.Sprintf(f, a...)) }
	if t, ok := sc["type"]; ok {
		var allowed []string
		switch x := t.(type) {
		case string:
			allowed = []string{x}
		case []any:
			for _, y := range x {
				allowed = append(allowed, y.(string))
			}
		}
		got := typeOf(v)
		if !slices.Contains(allowed, got) && !(got == "integer" && slices.Contains(allowed, "number")) {
			bad("is %s, want %s", got, strings.Join(allowed, " or "))
			return errs
		}
	}
	if c, ok := sc["const"]; ok && !jsonEqual(c, v) {
		bad("is %v, want %v", v, c)
	}
	if e, ok := sc["enum"].([]any); ok && !slices.ContainsFunc(e, func(x any) bool { return jsonEqual(x, v) }) {
		bad("%v is not one of %v", v, e)
	}
	switch x := v.(type) {
	case string:
		n := utf8.RuneCountInString(x)
		if m, ok := num(sc["minLength"]); ok && float64(n) < m {
			bad("is %d characters, at least %v wanted", n, m)
		}
		if m, ok := num(sc["maxLength"]); ok && float64(n) > m {
			bad("is %d characters, at most %v allowed", n, m)
		}
		if p, ok := sc["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(x) {
			bad("%q does not match %s", x, p)
		}
		switch sc["format"] {
		case "date-time":
			if _, err := time.Parse(time.RFC3339Nano, x); err != nil {
				bad("%q is not an RFC 3339 date-time", x)
			}
		case "uuid":
			if !uuidRE.MatchString(x) {
				bad("%q is not a UUID", x)
			}
		case "uri":
			if u, err := url.Parse(x); err != nil || u.Scheme == "" {
				bad("%q is not an absolute URI", x)
			}
		}
	case json.Number:
		f, _ := x.Float64()
		if m, ok := num(sc["minimum"]); ok && f < m {
			bad("%v is below the minimum %v", x, m)
		}
		if m, ok := num(sc["maximum"]); ok && f > m {
			bad("%v is above the maximum %v", x, m)
		}
	case []any:
		if m, ok := num(sc["minItems"]); ok && float64(len(x)) < m {
			bad("has %d items, at least %v wanted", len(x), m)
		}
		if m, ok := num(sc["maxItems"]); ok && float64(len(x)) > m {
			bad("has %d items, at most %v allowed", len(x), m)
		}
		if it, ok := sc["items"]; ok {
			for i, e := range x {
				errs = append(errs, s.validate(it, e, fmt.Sprintf("%s[%d]", at, i))...)
			}
		}
	case map[string]any:
		props, _ := sc["properties"].(map[string]any)
		if req, ok := sc["required"].([]any); ok {
			for _, r := range req {
				if _, ok := x[r.(string)]; !ok {
					bad("lacks required %q", r)
				}
			}
		}
		for _, k := range sortedKeys(x) {
			if p, ok := props[k]; ok {
				errs = append(errs, s.validate(p, x[k], at+"."+k)...)
				continue
			}
			switch ap := sc["additionalProperties"].(type) {
			case bool:
				if !ap {
					bad("has %q, which the schema does not allow", k)
				}
			case map[string]any:
				errs = append(errs, s.validate(ap, x[k], at+"."+k)...)
			}
		}
	}
	return errs
}

func num(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
