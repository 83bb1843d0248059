// Package openapitest checks real HTTP responses against cmdq's OpenAPI 3.1
// description (api/openapi.json): the status code must be documented for
// the operation, the content type must be one it lists, the required
// headers must be there and valid against their schemas, and the body must
// validate against the schema.
//
// Schemas are validated by github.com/santhosh-tekuri/jsonschema/v6, a full
// JSON Schema 2020-12 implementation (the dialect of OpenAPI 3.1 schemas),
// with format assertion on: every 2020-12 keyword is checked, and so is
// every format the library knows (date-time, uuid and uri among them). The
// whole description is one schema resource, so local references
// (#/components/schemas/...) resolve; a reference that leaves the
// description fails to load.
//
// Own code remains for what is OpenAPI rather than JSON Schema: routing a
// request path to its path template and operation, the status code,
// content type and required headers, and reading a header value as a
// number when its schema wants an integer or number (HTTP headers are
// strings; JSON Schema validates JSON values).
//
// And for one rule the library does not keep, that no rule written in the
// description is skipped silently: JSON Schema ignores keywords it does
// not define, and the library passes any value for a format it does not
// know. So Load also checks every schema against two stricter
// metaschemas (strictness below): one refuses a format the library
// cannot assert, the other any keyword 2020-12 does not define (a
// misspelled "requried", or OpenAPI's own discriminator, xml,
// externalDocs and example, which nothing would check). Load also refuses
// a $ref outside the schemas that does not resolve, and an OpenAPI
// version other than 3.1.x.
package openapitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Spec is a loaded description. Check records which operations and which
// of their documented responses were seen; it is safe for concurrent use.
type Spec struct {
	doc     map[string]any
	ops     map[string]map[string]any     // "METHOD /path/{template}" → operation
	regexps map[string]*regexp.Regexp     // "/path/{template}" → matcher
	schemas map[string]*jsonschema.Schema // JSON pointer of a schema in doc → compiled

	mu   sync.Mutex
	seen map[string]bool // "METHOD /path status"
}

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// docURL names the description as a schema resource. It is not a file
// URL, so a reference to another document fails instead of reading a file.
const docURL = "https://openapitest.invalid/openapi.json"

// strictness holds two metaschemas every schema in the description must
// also satisfy; each is the 2020-12 metaschema, applied to every subschema
// through its dynamic anchor, plus one rule. formats: format names only
// a format the library asserts. keywords: no keyword beyond those 2020-12
// defines (x- extensions aside, which are not rules).
var strictness = []struct{ id, schema, fault string }{
	{"https://openapitest.invalid/formats", `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://openapitest.invalid/formats",
  "$dynamicAnchor": "meta",
  "$ref": "https://json-schema.org/draft/2020-12/schema",
  "properties": {"format": {"enum": ["date-time", "date", "time", "duration", "period", "uuid", "uri",
    "uri-reference", "iri", "iri-reference", "uri-template", "email", "hostname", "ipv4", "ipv6",
    "json-pointer", "relative-json-pointer", "regex", "semver"]}}
}`, "a format the validator cannot assert"},
	{"https://openapitest.invalid/keywords", `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://openapitest.invalid/keywords",
  "$dynamicAnchor": "meta",
  "$ref": "https://json-schema.org/draft/2020-12/schema",
  "patternProperties": {"^x-": true},
  "unevaluatedProperties": false
}`, "a keyword JSON Schema 2020-12 does not define (shown as 'false schema', with the keywords of the schemas around it)"},
}

// Load parses a description, checks that every $ref resolves and compiles
// every schema in it.
func Load(b []byte) (*Spec, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("openapitest: parse: %w", err)
	}
	doc, _ := v.(map[string]any)
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		return nil, fmt.Errorf("openapitest: openapi is %q, want 3.1.x", v)
	}
	s := &Spec{doc: doc, ops: map[string]map[string]any{}, regexps: map[string]*regexp.Regexp{},
		schemas: map[string]*jsonschema.Schema{}, seen: map[string]bool{}}
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

	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	metas := make([]*jsonschema.Schema, len(strictness))
	for i, m := range strictness {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(m.schema))
		if err == nil {
			err = c.AddResource(m.id, v)
		}
		if err == nil {
			metas[i], err = c.Compile(m.id)
		}
		if err != nil {
			return nil, fmt.Errorf("openapitest: %s: %w", m.id, err)
		}
	}
	if err := c.AddResource(docURL, doc); err != nil {
		return nil, err
	}
	var errs []string
	s.walk(doc, "", func(ptr string, sc any) {
		// Compile first: it reports an invalid schema (against the
		// 2020-12 metaschema, a bad pattern, a $ref that does not
		// resolve) more clearly than the stricter metaschemas would.
		compiled, err := c.Compile(docURL + "#" + urlFragment(ptr))
		if err != nil {
			errs = append(errs, fmt.Sprintf("#%s: %s", ptr, short(err)))
			return
		}
		for i, m := range metas {
			if err := m.Validate(sc); err != nil {
				errs = append(errs, fmt.Sprintf("#%s: uses %s: %v", ptr, strictness[i].fault, err))
				return
			}
		}
		s.schemas[ptr] = compiled
	}, &errs)
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("openapitest: the description cannot be checked:\n%s", strings.Join(errs, "\n"))
	}
	return s, nil
}

// walk calls schema for every schema in v (a "schema" member of an
// OpenAPI object, and every components.schemas entry) with its JSON
// pointer, and checks every $ref outside schemas.
func (s *Spec) walk(v any, ptr string, schema func(ptr string, sc any), errs *[]string) {
	switch x := v.(type) {
	case map[string]any:
		if r, ok := x["$ref"].(string); ok {
			if _, _, err := s.resolve(r); err != nil {
				*errs = append(*errs, "#"+ptr+": "+err.Error())
			}
		}
		for k, c := range x {
			p := ptr + "/" + escape(k)
			switch {
			case k == "schema":
				schema(p, c)
			case k == "schemas" && ptr == "/components":
				m, _ := c.(map[string]any)
				for n, sc := range m {
					schema(p+"/"+escape(n), sc)
				}
			default:
				s.walk(c, p, schema, errs)
			}
		}
	case []any:
		for i, c := range x {
			s.walk(c, ptr+"/"+strconv.Itoa(i), schema, errs)
		}
	}
}

// escape makes a JSON pointer token of a name.
func escape(name string) string {
	return strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}

// urlFragment percent-encodes a JSON pointer for a URL fragment, token by
// token ("{id}" → "%7Bid%7D"), as the library decodes it.
func urlFragment(ptr string) string {
	toks := strings.Split(ptr, "/")
	for i, t := range toks {
		toks[i] = url.PathEscape(t)
	}
	return strings.Join(toks, "/")
}

// resolve follows a local reference such as "#/components/schemas/Status"
// and returns the value and its JSON pointer (without "#").
func (s *Spec) resolve(ref string) (any, string, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, "", fmt.Errorf("$ref %q is not local", ref)
	}
	var cur any = s.doc
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, "", fmt.Errorf("$ref %q does not resolve", ref)
		}
		if cur, ok = m[part]; !ok {
			return nil, "", fmt.Errorf("$ref %q does not resolve", ref)
		}
	}
	return cur, ref[1:], nil
}

// deref returns the object at JSON pointer ptr, following $ref until an
// object without one, and that object's pointer.
func (s *Spec) deref(ptr string) (map[string]any, string) {
	for range 10 {
		v, _, err := s.resolve("#" + ptr)
		if err != nil {
			return nil, ptr
		}
		m, _ := v.(map[string]any)
		r, ok := m["$ref"].(string)
		if !ok {
			return m, ptr
		}
		if _, ptr, err = s.resolve(r); err != nil {
			return nil, ptr
		}
	}
	return nil, ptr
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
	if _, ok := rs[strconv.Itoa(code)]; !ok {
		return fmt.Errorf("%s answered %d, which is not documented (documented: %s)", key, code, strings.Join(sortedKeys(rs), ", "))
	}
	ptr := "/paths/" + escape(tmpl) + "/" + strings.ToLower(method) + "/responses/" + strconv.Itoa(code)
	return s.checkResponse(fmt.Sprintf("%s %d", key, code), ptr, header, body)
}

// CheckComponent validates a response against components.responses[name]
// (for answers that belong to no operation, such as 405).
func (s *Spec) CheckComponent(name string, header http.Header, body []byte) error {
	_, ptr, err := s.resolve("#/components/responses/" + escape(name))
	if err != nil {
		return err
	}
	return s.checkResponse("components.responses."+name, ptr, header, body)
}

// CheckSchema validates a JSON body against components.schemas[name] (for
// answers that belong to no operation, such as a 405 Problem).
func (s *Spec) CheckSchema(name string, body []byte) error {
	sc, ok := s.schemas["/components/schemas/"+escape(name)]
	if !ok {
		return fmt.Errorf("components.schemas.%s is not in the description", name)
	}
	val, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("components.schemas.%s: body is not JSON: %w", name, err)
	}
	if err := sc.Validate(val); err != nil {
		return fmt.Errorf("components.schemas.%s: the body does not match: %s\nbody: %.600s", name, short(err), body)
	}
	return nil
}

// checkResponse validates header and body against the response object at
// JSON pointer ptr; where names it in errors and in Seen.
func (s *Spec) checkResponse(where, ptr string, header http.Header, body []byte) error {
	r, ptr := s.deref(ptr)
	hs, _ := r["headers"].(map[string]any)
	for _, name := range sortedKeys(hs) {
		h, hptr := s.deref(ptr + "/headers/" + escape(name))
		v := header.Get(name)
		if req, _ := h["required"].(bool); req && v == "" {
			return fmt.Errorf("%s: required header %s is missing", where, name)
		}
		sc, ok := s.schemas[hptr+"/schema"]
		if v == "" || !ok {
			continue
		}
		// A header is text; its schema may want a number.
		var val any = v
		if t, _ := s.deref(hptr + "/schema"); t["type"] == "integer" || t["type"] == "number" {
			if _, err := strconv.ParseFloat(v, 64); err == nil && json.Valid([]byte(v)) {
				val = json.Number(v)
			}
		}
		if err := sc.Validate(val); err != nil {
			return fmt.Errorf("%s: header %s: %s", where, name, short(err))
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
	if _, ok := content[mt]; !ok {
		return fmt.Errorf("%s: Content-Type %s is not documented (documented: %s)", where, mt, strings.Join(sortedKeys(content), ", "))
	}
	sc, ok := s.schemas[ptr+"/content/"+escape(mt)+"/schema"]
	if !ok {
		s.mark(where)
		return nil
	}
	var val any = string(body)
	if strings.HasSuffix(mt, "json") {
		if val, err = jsonschema.UnmarshalJSON(bytes.NewReader(body)); err != nil {
			return fmt.Errorf("%s: body is not JSON: %w", where, err)
		}
	}
	if err := sc.Validate(val); err != nil {
		return fmt.Errorf("%s: the body does not match the schema: %s\nbody: %.600s", where, short(err), body)
	}
	s.mark(where)
	return nil
}

// short is err's message with the description's URL left out: schema
// locations read "#/components/schemas/…".
func short(err error) string {
	return strings.ReplaceAll(err.Error(), docURL, "")
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
