package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// DefaultMaxBodyBytes is the default limit on a request body (1 MiB).
const DefaultMaxBodyBytes = 1 << 20

// DecodeIssueRequest reads and validates a POST /v1/commands body
// (client.IssueRequest, the wire type the Go client sends) of at most
// maxBytes (0 = DefaultMaxBodyBytes). Unknown fields, trailing data, keys
// repeated in one object or differing only in case, top-level fields not
// spelled exactly (type, params, id, correlationId, uniqueKey, uniqueWindow,
// orderKey, runAt, delay), a missing or malformed type, params that are not a JSON
// object, an id that is not a canonical lowercase UUID, a runAt that is not
// an RFC 3339 time, a delay that is not a Go duration or is negative, and
// runAt with delay are rejected with a 400 Problem listing every
// field problem; an oversized body gives a 413 Problem. It never panics. The
// returned request has Params compacted ({} when absent).
func DecodeIssueRequest(body io.Reader, maxBytes int64) (client.IssueRequest, *client.Problem) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBodyBytes
	}
	data, err := io.ReadAll(io.LimitReader(body, maxBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return client.IssueRequest{}, tooLarge(mbe.Limit)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return client.IssueRequest{}, newProblem(client.ProblemInvalidRequest, "the request body did not arrive within the request deadline; send the whole body at once")
		}
		return client.IssueRequest{}, newProblem(client.ProblemInvalidRequest, "reading the request body failed: "+clipText(err.Error()))
	}
	if int64(len(data)) > maxBytes {
		return client.IssueRequest{}, tooLarge(maxBytes)
	}
	return decodeIssueBytes(data)
}

func tooLarge(limit int64) *client.Problem {
	return newProblem(client.ProblemTooLarge, fmt.Sprintf("The request body is over the %d-byte limit: send smaller params (store large data elsewhere, such as a blob or a file, and pass a reference to it).", limit))
}

func decodeIssueBytes(data []byte) (client.IssueRequest, *client.Problem) {
	var req client.IssueRequest
	if len(bytes.TrimSpace(data)) == 0 {
		return req, newProblem(client.ProblemInvalidRequest, `the request body is empty; send a JSON object such as {"type":"SendEmail","params":{}}`)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return client.IssueRequest{}, jsonProblem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return client.IssueRequest{}, newProblem(client.ProblemInvalidRequest, "the request body has data after the JSON object; send exactly one object")
	}
	if !utf8.Valid(data) {
		// encoding/json would store U+FFFD in their place: another text
		// than the one sent.
		return client.IssueRequest{}, notUTF8(data)
	}
	if p := checkKeys(data); p != nil {
		return client.IssueRequest{}, p
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(data, &fields) // cannot fail: Decode accepted data
	if p := loneSurrogate(fields); p != nil {
		return client.IssueRequest{}, p
	}
	var errs []client.FieldError
	for _, name := range optionalTextFields {
		if string(fields[name]) == `""` {
			// "" is not "absent": say so, rather than read it as absent
			// (and, for delay, miss that runAt came with it).
			errs = append(errs, client.FieldError{Pointer: "#/" + name, Detail: fmt.Sprintf("%s is an empty string; leave the field out, or give a value", name)})
		}
	}
	switch {
	case req.Type == "":
		errs = append(errs, client.FieldError{Pointer: "#/type", Detail: "type is required: the command type name, for example \"SendEmail\""})
	default:
		if err := cmdq.ValidateType(req.Type); err != nil {
			errs = append(errs, client.FieldError{Pointer: "#/type", Detail: typeDetail(req.Type)})
		}
	}
	p := bytes.TrimSpace(req.Params)
	switch {
	case len(p) == 0 || string(p) == "null":
		req.Params = json.RawMessage("{}")
	case p[0] != '{':
		errs = append(errs, client.FieldError{Pointer: "#/params", Detail: "params must be a JSON object (or absent for {})"})
	case !utf8.Valid(p):
		errs = append(errs, client.FieldError{Pointer: "#/params", Detail: "params contains bytes that are not UTF-8; send UTF-8 JSON"})
	default:
		var buf bytes.Buffer
		if err := json.Compact(&buf, p); err != nil { // cannot happen: Decode validated it
			errs = append(errs, client.FieldError{Pointer: "#/params", Detail: "params is not valid JSON: " + err.Error()})
		} else {
			req.Params = json.RawMessage(buf.Bytes())
		}
	}
	if req.ID != "" {
		req.ID = cmdq.NormalizeID(req.ID)
		if err := cmdq.ValidateID(req.ID); err != nil {
			errs = append(errs, client.FieldError{Pointer: "#/id", Detail: fmt.Sprintf("invalid command ID: %s; use a UUID in lowercase canonical form like \"7f0c2a9e-3b1d-4c8e-9f6a-1d2e3f4a5b6c\", or leave it empty to get a new one", quoteClip(req.ID))})
		}
	}
	errs = append(errs, checkUnique(req)...)
	if n := len(req.OrderKey); n > cmdq.MaxOrderKeyLength || n == 0 && fields["orderKey"] != nil {
		errs = append(errs, client.FieldError{Pointer: "#/orderKey", Detail: fmt.Sprintf("orderKey is %d bytes; give 1 to %d (an aggregate's ID, say), or leave it out", n, cmdq.MaxOrderKeyLength)})
	}
	if len(req.CorrelationID) > cmdq.MaxCorrelationIDLength {
		errs = append(errs, client.FieldError{Pointer: "#/correlationId", Detail: fmt.Sprintf("correlationId is %d bytes; the limit is %d", len(req.CorrelationID), cmdq.MaxCorrelationIDLength)})
	}
	errs = append(errs, scheduleErrors(req, fields)...)
	if len(errs) > 0 {
		detail := errs[0].Detail
		if len(errs) > 1 {
			detail = fmt.Sprintf("%d fields are invalid; see errors", len(errs))
		}
		return client.IssueRequest{}, newProblem(client.ProblemInvalidRequest, detail, errs...)
	}
	return req, nil
}

// notUTF8 is the 400 of a body (valid JSON) with bytes that are not UTF-8,
// naming the top-level field that holds them.
func notUTF8(data []byte) *client.Problem {
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(data, &fields)
	for _, name := range issueFields {
		if raw, ok := fields[name]; ok && !utf8.Valid(raw) {
			return newProblem(client.ProblemInvalidRequest, name+" contains bytes that are not UTF-8; send UTF-8 JSON (binary data can travel base64-encoded)",
				client.FieldError{Pointer: "#/" + name, Detail: "not UTF-8"})
		}
	}
	return newProblem(client.ProblemInvalidRequest, "the request body contains bytes that are not UTF-8; send UTF-8 JSON",
		client.FieldError{Pointer: "#", Detail: "not UTF-8"})
}

// optionalTextFields are the optional string fields for which "" is not a
// value: sent empty, they are a 400 (orderKey's own check says the same).
var optionalTextFields = []string{"uniqueKey", "uniqueWindow", "runAt", "delay"}

// loneSurrogate is the 400 of a body with a \u escape of a lone UTF-16
// surrogate ("\ud800"): encoding/json decodes it as U+FFFD, another text
// than the one sent, as it does with bytes that are not UTF-8 (notUTF8). It
// names the top-level field that holds it; nil when there is none.
func loneSurrogate(fields map[string]json.RawMessage) *client.Problem {
	for _, name := range issueFields {
		if raw, ok := fields[name]; ok && hasLoneSurrogate(raw) {
			return newProblem(client.ProblemInvalidRequest, name+` contains a \u escape of a lone UTF-16 surrogate (\ud800-\udfff without its pair), which is not a character; send UTF-8 JSON (binary data can travel base64-encoded)`,
				client.FieldError{Pointer: "#/" + name, Detail: "lone surrogate escape"})
		}
	}
	return nil
}

// hasLoneSurrogate reports whether the valid JSON value raw has, in a
// string, a \u escape of a high surrogate not followed by one of a low
// surrogate, or of a low surrogate not preceded by a high one.
func hasLoneSurrogate(raw []byte) bool {
	hex4 := func(i int) (rune, bool) { // the 4 hex digits of a \u escape at raw[i]
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		return rune(n), err == nil
	}
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			in = !in
		case in && c == '\\':
			r, ok := hex4(i)
			if !ok {
				i++ // another escape: skip its character
				continue
			}
			switch {
			case r >= 0xdc00 && r <= 0xdfff:
				return true // a low surrogate with no high one before it
			case r >= 0xd800 && r <= 0xdbff:
				lo, ok := hex4(i + 6)
				if !ok || lo < 0xdc00 || lo > 0xdfff {
					return true
				}
				i += 11 // the pair
			default:
				i += 5
			}
		}
	}
	return false
}

// checkUnique checks uniqueKey and uniqueWindow: both or neither, the key
// 1-256 bytes, the window a duration from 1s to 720h, no id with them.
// Empty ones are refused before (optionalTextFields).
func checkUnique(req client.IssueRequest) []client.FieldError {
	if req.UniqueKey == "" && req.UniqueWindow == "" {
		return nil
	}
	var errs []client.FieldError
	switch n := len(req.UniqueKey); {
	case n == 0:
		errs = append(errs, client.FieldError{Pointer: "#/uniqueKey", Detail: "uniqueKey is required with uniqueWindow: 1 to 256 bytes, such as an order number"})
	case n > cmdq.MaxUniqueKeyLength:
		errs = append(errs, client.FieldError{Pointer: "#/uniqueKey", Detail: fmt.Sprintf("uniqueKey is %d bytes; the limit is %d (hash a longer key first)", n, cmdq.MaxUniqueKeyLength)})
	}
	if req.UniqueWindow == "" {
		errs = append(errs, client.FieldError{Pointer: "#/uniqueWindow", Detail: "uniqueWindow is required with uniqueKey: a duration from 1s to 720h, such as \"1h\""})
	} else if d, err := time.ParseDuration(req.UniqueWindow); err != nil || d < cmdq.MinUniqueWindow || d > cmdq.MaxUniqueWindow {
		errs = append(errs, client.FieldError{Pointer: "#/uniqueWindow", Detail: fmt.Sprintf("uniqueWindow %s is not a duration from 1s to 720h (30 days); give one such as \"90s\", \"1h\" or \"24h\"", quoteClip(req.UniqueWindow))})
	}
	if req.ID != "" {
		errs = append(errs, client.FieldError{Pointer: "#/id", Detail: "give either an id or a uniqueKey: a unique key derives the command ID"})
	}
	return errs
}

// typeDetail says why typ is not a type name, quoting a short prefix of it.
func typeDetail(typ string) string {
	return fmt.Sprintf("invalid command type: %s; a type name is 1-%d characters: a letter, then letters, digits, '.', '_' or '-' (e.g. \"billing.ChargeCard\")", quoteClip(typ), cmdq.MaxTypeLength)
}

// jsonProblem turns an encoding/json error into a 400 Problem naming the
// field. It quotes at most a short prefix of the input.
func jsonProblem(err error) *client.Problem {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return newProblem(client.ProblemInvalidRequest, fmt.Sprintf("the body is not valid JSON (at byte %d): %s", se.Offset, clipText(se.Error())))
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return newProblem(client.ProblemInvalidRequest, fmt.Sprintf("the body must be a JSON object, not a JSON %s", te.Value))
		}
		return newProblem(client.ProblemInvalidRequest, fmt.Sprintf("%s must be a JSON %s, not %s", clipText(field), te.Type.Kind(), clipText(te.Value)),
			client.FieldError{Pointer: clipPointer("#/" + strings.ReplaceAll(field, ".", "/")), Detail: fmt.Sprintf("expected a JSON %s, got %s", te.Type.Kind(), clipText(te.Value))})
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newProblem(client.ProblemInvalidRequest, "the body ends in the middle of the JSON object; send complete JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return newProblem(client.ProblemInvalidRequest, fmt.Sprintf("unknown field %s; the fields are type, params, id, correlationId, uniqueKey, uniqueWindow, orderKey, runAt and delay", quoteClip(name)),
			client.FieldError{Pointer: clipPointer("#/" + escapePointer(name)), Detail: "unknown field"})
	}
	return newProblem(client.ProblemInvalidRequest, "the body is not a valid request: "+clipText(err.Error()))
}

// checkContentType accepts application/json and any application/*+json;
// anything else, a missing Content-Type included, is a 415 Problem. (A
// browser sends a cross-site body without a preflight only as text/plain,
// form data, or with no type at all.)
func checkContentType(r *http.Request) *client.Problem {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return newProblem(client.ProblemUnsupportedMediaType, "the request has a body but no Content-Type; send 'Content-Type: application/json'")
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))) {
		return nil
	}
	return newProblem(client.ProblemUnsupportedMediaType, fmt.Sprintf("Content-Type %s is not JSON; send 'Content-Type: application/json'", quoteClip(ct)))
}

// issueFields are the top-level fields of a POST /v1/commands body, as they
// must be spelled.
var issueFields = []string{"type", "params", "id", "correlationId", "uniqueKey", "uniqueWindow", "orderKey", "runAt", "delay"}

// checkKeys rejects what encoding/json would silently resolve: a key that
// appears twice in one object (the last one would win, while another
// reader of the same body might take the first), keys that differ only in
// case (encoding/json matches struct fields case-insensitively, so
// {"type":…,"TYPE":…} is a duplicate too, at any depth: params decode into
// handler structs the same way), and top-level fields not spelled exactly
// as documented ({"TYPE":…}). data is one valid JSON value.
func checkKeys(data []byte) *client.Problem {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	// seg is one step of the path to a value; the pointer is built only for
	// an error (paths can be thousands of levels deep).
	type seg struct {
		parent *seg
		name   string
	}
	pointer := func(s *seg) string {
		var parts []string
		for ; s != nil; s = s.parent {
			parts = append(parts, s.name)
		}
		slices.Reverse(parts)
		return clipPointer("#/" + strings.Join(parts, "/"))
	}
	var walk func(at *seg, top bool) *client.Problem
	walk = func(at *seg, top bool) *client.Problem {
		tok, err := dec.Token()
		if err != nil { // cannot happen: Decode accepted data
			return newProblem(client.ProblemInvalidRequest, "the body is not valid JSON: "+err.Error())
		}
		switch tok {
		case json.Delim('{'):
			keys := map[string]string{} // folded key → key as sent
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return newProblem(client.ProblemInvalidRequest, "the body is not valid JSON: "+err.Error())
				}
				k, _ := kt.(string)
				here := &seg{parent: at, name: escapePointer(k)}
				fk := foldKey(k)
				if prev, dup := keys[fk]; dup {
					what := fmt.Sprintf("the field %s appears twice in one object", quoteClip(k))
					if prev != k {
						what = fmt.Sprintf("the fields %s and %s differ only in case, so they name the same field", quoteClip(prev), quoteClip(k))
					}
					return newProblem(client.ProblemInvalidRequest, what+"; send each field once, spelled one way",
						client.FieldError{Pointer: pointer(here), Detail: "duplicate field"})
				}
				keys[fk] = k
				if exact, ok := caseVariant(k); ok && top {
					return newProblem(client.ProblemInvalidRequest, fmt.Sprintf("field names are case-sensitive: write %q, not %s", exact, quoteClip(k)),
						client.FieldError{Pointer: pointer(here), Detail: fmt.Sprintf("write %q", exact)})
				}
				if p := walk(here, false); p != nil {
					return p
				}
			}
			_, _ = dec.Token() // '}'
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if p := walk(&seg{parent: at, name: strconv.Itoa(i)}, false); p != nil {
					return p
				}
			}
			_, _ = dec.Token() // ']'
		}
		return nil
	}
	return walk(nil, true)
}

// caseVariant reports whether a top-level key is one of issueFields spelled
// in another case, and returns the right spelling.
func caseVariant(k string) (string, bool) {
	for _, f := range issueFields {
		if k != f && strings.EqualFold(k, f) {
			return f, true
		}
	}
	return "", false
}

// foldKey maps every rune of s to the smallest rune of its simple case
// folding orbit, so foldKey(a) == foldKey(b) exactly when
// strings.EqualFold(a, b) (the matching encoding/json uses for fields).
func foldKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < m {
				m = f
			}
		}
		b.WriteRune(m)
	}
	return b.String()
}

// escapePointer escapes a key for a JSON Pointer (RFC 6901).
func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// clipPointer keeps an error's pointer short (keys are client input).
var clipPointer = httpserve.ClipText

// ScheduleOf returns the run-at time and delay of a decoded request
// (DecodeIssueRequest checked their form): zero when absent.
func ScheduleOf(req client.IssueRequest) (runAt time.Time, delay time.Duration) {
	if req.RunAt != "" {
		runAt, _ = client.ParseRunAt(req.RunAt)
	}
	if req.Delay != "" {
		delay, _ = time.ParseDuration(req.Delay)
	}
	return runAt, delay
}

// scheduleErrors checks runAt and delay: a strict RFC 3339 time
// (client.ParseRunAt), a Go duration that is not negative, not both (given
// at all, empty or not: fields holds the body's top-level fields). (How
// far ahead is the Issuer's check, against its clock: cmdq.ValidSchedule.)
func scheduleErrors(req client.IssueRequest, fields map[string]json.RawMessage) []client.FieldError {
	var errs []client.FieldError
	if req.RunAt != "" {
		if _, err := client.ParseRunAt(req.RunAt); err != nil {
			errs = append(errs, client.FieldError{Pointer: "#/runAt", Detail: fmt.Sprintf("runAt %s is not an RFC 3339 time; send a time such as \"2026-05-01T09:00:00Z\" (UTC) or \"2026-05-01T11:00:00+02:00\" (a T between date and time, a '.' before a fraction, Z or an offset from -23:59 to +23:59)", quoteClip(req.RunAt))})
		}
	}
	if req.Delay != "" {
		d, err := time.ParseDuration(req.Delay)
		switch {
		case err != nil:
			errs = append(errs, client.FieldError{Pointer: "#/delay", Detail: fmt.Sprintf("delay %s is not a duration; send a number with a unit such as \"90s\", \"15m\" or \"2h30m\" (units ns, us, ms, s, m, h)", quoteClip(req.Delay))})
		case d < 0:
			errs = append(errs, client.FieldError{Pointer: "#/delay", Detail: fmt.Sprintf("delay %s is negative; send a delay of 0 or more (such as \"90s\"), or a runAt time", quoteClip(req.Delay))})
		}
	}
	given := func(name string) bool { v, ok := fields[name]; return ok && string(v) != "null" }
	if given("runAt") && given("delay") {
		errs = append(errs, client.FieldError{Pointer: "#/delay", Detail: "runAt and delay were both given; send one of them (runAt: when to run, delay: how long from now)"})
	}
	return errs
}
