package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrMalformedMessage: a queue message is not an Envelope.
var ErrMalformedMessage = errors.New("cmdq: malformed queue message")

// MaxFirstParamsBytes is the largest compact JSON parameters an issue's own
// message carries (16 KiB; the queue's limit is 64 KiB). A command with
// larger parameters gets a plain envelope and its first delivery loads it.
const MaxFirstParamsBytes = 16 * 1024

// Envelope is the queue message: {"id":"…","type":"…"}, plus, for the
// issue's own message, "first" (see First). The parameters always stay in
// the commands table too.
type Envelope struct {
	// ID is the command ID.
	ID string `json:"id"`
	// Type is the command type name.
	Type string `json:"type"`
	// First, only on the message the issue itself enqueued (never on a
	// re-issue's, requeue's, reconciler's or recovery's), carries what the
	// first delivery would otherwise read from the commands table, so that
	// it can run the handler without the point read (docs/lifecycle.md,
	// "First delivery"). nil on every other message, and when the
	// parameters exceed MaxFirstParamsBytes.
	First *First `json:"first,omitempty"`
	// HandedOff marks an issue's own message that was enqueued invisible
	// and handed straight to a processor in the issuing process (no
	// dequeue): that first run is attempt 1 with dequeue count 0, so every
	// delivery of the message is attempt dequeue count + 1, and none takes
	// the fast path (docs/lifecycle.md, "In-process hand-off").
	HandedOff bool `json:"handedOff,omitempty"`
}

// Attempt returns the attempt number of a delivery of this message with
// dequeue count dc: dc, or dc + 1 for a handed-off message.
func (e Envelope) Attempt(dc int64) int64 {
	if e.HandedOff {
		return dc + 1
	}
	return dc
}

// First is what the issue's own message carries about the command as
// issued: the row's ETag after the issue batch (every write of a fast-path
// attempt is conditional on it), the issue time, the logical queue, the
// correlation ID, the trace context and the compact parameters. Event sequence 1 (created) is
// implied.
type First struct {
	// ETag is the ETag of the a:cmd row returned by the issue batch.
	ETag string `json:"etag"`
	// IssuedAt is the issue time (UTC, millisecond precision): the created
	// event's time.
	IssuedAt time.Time `json:"issuedAt"`
	// Queue is the command's logical queue.
	Queue string `json:"queue"`
	// CorrelationID is the caller's correlation ID ("" = none).
	CorrelationID string `json:"correlationId,omitempty"`
	// TraceParent and TraceState are the W3C trace context the command
	// was issued in ("" = none), as stored on its row: the first
	// delivery's attempt span joins that trace without the point read.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// Params is the compact JSON parameters (at most MaxFirstParamsBytes).
	Params json.RawMessage `json:"params"`
	// RunAt is the run-at time the command was issued with (UTC,
	// millisecond precision; zero: none): the delivery starts it no
	// earlier, and measures the fast path's age from it.
	RunAt time.Time `json:"runAt,omitzero"`
	// OrderKey and OrderSeq are the command's order key and its place in
	// it ("" and 0: none), as its row holds them: the first delivery
	// checks its turn without the point read.
	OrderKey string `json:"orderKey,omitempty"`
	OrderSeq int64  `json:"orderSeq,omitempty"`
}

// Marshal returns the message text. Parameters are written as they are
// (no HTML escaping), so the first delivery hands the handler the bytes
// that were stored.
func (e Envelope) Marshal() string {
	if b, ok := e.appendFast(make([]byte, 0, e.sizeHint())); ok {
		return string(b)
	}
	return e.marshalSlow()
}

// sizeHint is the length of the message text when nothing needs escaping.
func (e Envelope) sizeHint() int {
	n := 32 + len(e.ID) + len(e.Type)
	if f := e.First; f != nil {
		n += 128 + len(f.ETag) + len(f.Queue) + len(f.CorrelationID) + len(f.Params)
		if f.TraceParent != "" {
			n += 32 + len(f.TraceParent) + len(f.TraceState)
		}
	}
	return n
}

// appendFast appends the text Marshal returns, the same bytes
// encoding/json writes (fields in order, omitempty, the parameters
// compacted, RFC 3339 time), without reflection. It declines (ok false)
// when a string needs escaping or the parameters are not valid JSON: the
// encoder's rules for those (escapes, U+2028, invalid UTF-8) are left to
// the encoder itself.
func (e Envelope) appendFast(b []byte) (_ []byte, ok bool) {
	var good bool
	b = append(b, `{"id":`...)
	if b, good = appendPlainString(b, e.ID); !good {
		return nil, false
	}
	b = append(b, `,"type":`...)
	if b, good = appendPlainString(b, e.Type); !good {
		return nil, false
	}
	if f := e.First; f != nil {
		if f.IssuedAt.Year() < 0 || f.IssuedAt.Year() > 9999 || f.RunAt.Year() < 0 || f.RunAt.Year() > 9999 {
			return nil, false
		}
		b = append(b, `,"first":{"etag":`...)
		if b, good = appendPlainString(b, f.ETag); !good {
			return nil, false
		}
		b = append(b, `,"issuedAt":"`...)
		b = f.IssuedAt.AppendFormat(b, time.RFC3339Nano)
		b = append(b, `","queue":`...)
		if b, good = appendPlainString(b, f.Queue); !good {
			return nil, false
		}
		if f.CorrelationID != "" {
			b = append(b, `,"correlationId":`...)
			if b, good = appendPlainString(b, f.CorrelationID); !good {
				return nil, false
			}
		}
		if f.TraceParent != "" {
			b = append(b, `,"traceparent":`...)
			if b, good = appendPlainString(b, f.TraceParent); !good {
				return nil, false
			}
		}
		if f.TraceState != "" {
			b = append(b, `,"tracestate":`...)
			if b, good = appendPlainString(b, f.TraceState); !good {
				return nil, false
			}
		}
		b = append(b, `,"params":`...)
		if f.Params == nil {
			b = append(b, "null"...)
		} else {
			buf := bytes.NewBuffer(b)
			if err := json.Compact(buf, f.Params); err != nil {
				return nil, false
			}
			b = buf.Bytes()
		}
		if !f.RunAt.IsZero() {
			b = append(b, `,"runAt":"`...)
			b = f.RunAt.AppendFormat(b, time.RFC3339Nano)
			b = append(b, '"')
		}
		if f.OrderKey != "" {
			b = append(b, `,"orderKey":`...)
			if b, good = appendPlainString(b, f.OrderKey); !good {
				return nil, false
			}
		}
		if f.OrderSeq != 0 {
			b = append(b, `,"orderSeq":`...)
			b = strconv.AppendInt(b, f.OrderSeq, 10)
		}
		b = append(b, '}')
	}
	if e.HandedOff {
		b = append(b, `,"handedOff":true`...)
	}
	return append(b, '}'), true
}

// appendPlainString appends s as a JSON string when it is printable ASCII
// (a quote or a backslash escaped with a backslash, as encoding/json
// does); anything else is left to the encoder (ok false).
func appendPlainString(b []byte, s string) ([]byte, bool) {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f:
			return b, false
		case c == '"' || c == '\\':
			b = append(b, s[start:i]...)
			b = append(b, '\\', c)
			start = i + 1
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"'), true
}

// marshalSlow is Marshal through encoding/json.
func (e Envelope) marshalSlow() string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(e) // strings, a time and valid JSON: cannot fail
	return strings.TrimSuffix(b.String(), "\n")
}

// Ready returns when the command of the issue's own message f became (or
// becomes) due: its run-at time when that is after the issue, else the
// issue time.
func (f *First) Ready() time.Time {
	if f.RunAt.After(f.IssuedAt) {
		return f.RunAt
	}
	return f.IssuedAt
}

// Usable reports whether f is complete enough for the first delivery's
// fast path: an ETag, a queue, an issue time and parameters.
func (f *First) Usable() bool {
	return f != nil && f.ETag != "" && f.Queue != "" && !f.IssuedAt.IsZero() && len(f.Params) > 0
}

// ParseEnvelope parses message text: a JSON object with "id" and "type",
// both non-empty strings, and optionally "first" (the issue's own message;
// see First). It does not check their form (the processor does, with
// cmdq.ValidateID and ValidateType). Errors wrap ErrMalformedMessage.
func ParseEnvelope(text string) (Envelope, error) {
	if e, ok := parseFast(text); ok {
		return e, nil
	}
	return parseStrict(text)
}

// parseStrict is ParseEnvelope through encoding/json.
func parseStrict(text string) (Envelope, error) {
	var e Envelope
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v (want {\"id\":\"<uuid>\",\"type\":\"<type>\"}, got %.100q)", ErrMalformedMessage, err, text)
	}
	if dec.More() {
		return Envelope{}, fmt.Errorf("%w: trailing data after the JSON object (got %.100q)", ErrMalformedMessage, text)
	}
	if e.ID == "" || e.Type == "" {
		return Envelope{}, fmt.Errorf("%w: id and type are required (got %.100q)", ErrMalformedMessage, text)
	}
	return e, nil
}

// parseFast parses the messages Marshal writes without reflection: the
// fields in Marshal's order, strings without escapes but \" and \\,
// parameters that are valid JSON. Anything else (other order, unknown
// fields, other escapes, whitespace) is declined (ok false) and left to
// the strict decoder, which accepts or rejects it as before.
func parseFast(text string) (e Envelope, ok bool) {
	p := fastParser{s: text}
	if !p.lit(`{"id":`) || !p.str(&e.ID) || !p.lit(`,"type":`) || !p.str(&e.Type) {
		return Envelope{}, false
	}
	if p.lit(`,"first":{"etag":`) {
		f := &First{}
		var at string
		if !p.str(&f.ETag) || !p.lit(`,"issuedAt":`) || !p.str(&at) || !p.lit(`,"queue":`) || !p.str(&f.Queue) {
			return Envelope{}, false
		}
		if err := f.IssuedAt.UnmarshalJSON([]byte(`"` + at + `"`)); err != nil {
			return Envelope{}, false
		}
		if p.lit(`,"correlationId":`) && !p.str(&f.CorrelationID) {
			return Envelope{}, false
		}
		if p.lit(`,"traceparent":`) && !p.str(&f.TraceParent) {
			return Envelope{}, false
		}
		if p.lit(`,"tracestate":`) && !p.str(&f.TraceState) {
			return Envelope{}, false
		}
		if !p.lit(`,"params":`) {
			return Envelope{}, false
		}
		raw, good := p.value()
		if !good {
			return Envelope{}, false
		}
		if p.lit(`,"runAt":`) {
			var run string
			if !p.str(&run) {
				return Envelope{}, false
			}
			if err := f.RunAt.UnmarshalJSON([]byte(`"` + run + `"`)); err != nil {
				return Envelope{}, false
			}
		}
		if !p.lit("}") {
			return Envelope{}, false
		}
		f.Params = json.RawMessage(raw) // null too, as the decoder does
		e.First = f
	}
	if p.lit(`,"handedOff":`) {
		switch {
		case p.lit("true"):
			e.HandedOff = true
		case p.lit("false"):
		default:
			return Envelope{}, false
		}
	}
	if !p.lit("}") || p.s != "" || e.ID == "" || e.Type == "" {
		return Envelope{}, false
	}
	return e, true
}

// unescapePlain undoes appendPlainString's escapes (\" and \\, each
// checked by str) in one allocation.
func unescapePlain(v string) string {
	var b strings.Builder
	b.Grow(len(v))
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// fastParser consumes s from the front.
type fastParser struct{ s string }

// lit consumes prefix if s starts with it.
func (p *fastParser) lit(prefix string) bool {
	if !strings.HasPrefix(p.s, prefix) {
		return false
	}
	p.s = p.s[len(prefix):]
	return true
}

// str consumes a JSON string of printable ASCII whose only escapes are \"
// and \\ (what appendPlainString writes) into *dst.
func (p *fastParser) str(dst *string) bool {
	if !p.lit(`"`) {
		return false
	}
	escaped := false
	for i := 0; i < len(p.s); i++ {
		switch c := p.s[i]; {
		case c < 0x20 || c >= 0x7f:
			return false
		case c == '\\':
			if i+1 >= len(p.s) || (p.s[i+1] != '"' && p.s[i+1] != '\\') {
				return false
			}
			escaped = true
			i++
		case c == '"':
			v := p.s[:i]
			if escaped {
				v = unescapePlain(v)
			}
			*dst = v
			p.s = p.s[i+1:]
			return true
		}
	}
	return false
}

// value consumes one JSON value (an object, array, string or literal, as
// compact JSON) and returns its text when it is valid JSON.
func (p *fastParser) value() (string, bool) {
	depth, inStr := 0, false
	for i := 0; i < len(p.s); i++ {
		c := p.s[i]
		switch {
		case inStr:
			if c == '\\' {
				i++
			} else if c == '"' {
				inStr = false
				if depth == 0 {
					return p.take(i + 1)
				}
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth == 0 {
				return p.take(i) // the end of the enclosing object
			}
			depth--
			if depth == 0 {
				return p.take(i + 1)
			}
		case c == ',' && depth == 0:
			return p.take(i)
		}
	}
	return "", false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// take consumes s[:n] as a value when it is valid JSON with no white
// space around it (the decoder trims that).
func (p *fastParser) take(n int) (string, bool) {
	v := p.s[:n]
	if v == "" || isSpace(v[0]) || isSpace(v[len(v)-1]) || !json.Valid([]byte(v)) {
		return "", false
	}
	p.s = p.s[n:]
	return v, true
}
