package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/cmdq-dev/cmdq/commands"
)

// DefaultMaxBodyBytes is the default limit on a request body (1 MiB).
const DefaultMaxBodyBytes = 1 << 20

// IssueRequest is the body of POST /v1/commands.
type IssueRequest struct {
	// Type is the command type, as registered with the handlers registry. Required.
	Type string `json:"type"`
	// Params is the command's parameters, a JSON object. Optional: absent or
	// null means {}. It is stored compacted (insignificant whitespace
	// removed), so re-sending the same object with different spacing is the
	// same request.
	Params json.RawMessage `json:"params,omitempty"`
	// ID is the command ID, a canonical lowercase UUID. Optional: the server
	// generates one when empty. Sending the same ID and body again returns
	// the same command instead of issuing a second.
	ID string `json:"id,omitempty"`
	// CorrelationID is free text (at most 256 characters) carried with the
	// command for tracing. Optional.
	CorrelationID string `json:"correlationId,omitempty"`
}

// IssueResponse is the body of a successful POST /v1/commands.
type IssueResponse struct {
	// ID is the command ID; poll GET /v1/commands/{id}.
	ID string `json:"id"`
	// Status is the command's state: "pending" for a new command, the current
	// state for a repeated request.
	Status string `json:"status"`
}

// DecodeIssueRequest reads and validates a POST /v1/commands body of at most
// maxBytes (0 = DefaultMaxBodyBytes). Unknown fields, trailing data, a missing
// or malformed type, params that are not a JSON object, and an id that is not
// a canonical lowercase UUID are rejected with a 400 Problem listing every
// field problem; an oversized body gives a 413 Problem. It never panics. The
// returned request has Params compacted ({} when absent).
func DecodeIssueRequest(body io.Reader, maxBytes int64) (IssueRequest, *Problem) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBodyBytes
	}
	data, err := io.ReadAll(io.LimitReader(body, maxBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return IssueRequest{}, tooLarge(mbe.Limit)
		}
		return IssueRequest{}, newProblem(ProblemInvalidRequest, "reading the request body failed: "+err.Error())
	}
	if int64(len(data)) > maxBytes {
		return IssueRequest{}, tooLarge(maxBytes)
	}
	return decodeIssueBytes(data)
}

func tooLarge(limit int64) *Problem {
	return newProblem(ProblemTooLarge, fmt.Sprintf("the request body is over the %d-byte limit; send smaller params (store large data elsewhere and pass a reference)", limit))
}

func decodeIssueBytes(data []byte) (IssueRequest, *Problem) {
	var req IssueRequest
	if len(bytes.TrimSpace(data)) == 0 {
		return req, newProblem(ProblemInvalidRequest, `the request body is empty; send a JSON object such as {"type":"SendEmail","params":{}}`)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return IssueRequest{}, jsonProblem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return IssueRequest{}, newProblem(ProblemInvalidRequest, "the request body has data after the JSON object; send exactly one object")
	}
	var errs []FieldError
	switch {
	case req.Type == "":
		errs = append(errs, FieldError{Pointer: "#/type", Detail: "type is required: the command type name, for example \"SendEmail\""})
	default:
		if err := commands.ValidateType(req.Type); err != nil {
			errs = append(errs, FieldError{Pointer: "#/type", Detail: trimPrefix(err)})
		}
	}
	p := bytes.TrimSpace(req.Params)
	switch {
	case len(p) == 0 || string(p) == "null":
		req.Params = json.RawMessage("{}")
	case p[0] != '{':
		errs = append(errs, FieldError{Pointer: "#/params", Detail: "params must be a JSON object (or absent for {})"})
	case !utf8.Valid(p):
		errs = append(errs, FieldError{Pointer: "#/params", Detail: "params contains bytes that are not UTF-8; send UTF-8 JSON"})
	default:
		var buf bytes.Buffer
		if err := json.Compact(&buf, p); err != nil { // cannot happen: Decode validated it
			errs = append(errs, FieldError{Pointer: "#/params", Detail: "params is not valid JSON: " + err.Error()})
		} else {
			req.Params = json.RawMessage(buf.Bytes())
		}
	}
	if req.ID != "" {
		if err := commands.ValidateID(req.ID); err != nil {
			errs = append(errs, FieldError{Pointer: "#/id", Detail: trimPrefix(err)})
		}
	}
	if len(req.CorrelationID) > commands.MaxCorrelationIDLength {
		errs = append(errs, FieldError{Pointer: "#/correlationId", Detail: fmt.Sprintf("correlationId is %d bytes; the limit is %d", len(req.CorrelationID), commands.MaxCorrelationIDLength)})
	}
	if len(errs) > 0 {
		detail := errs[0].Detail
		if len(errs) > 1 {
			detail = fmt.Sprintf("%d fields are invalid; see errors", len(errs))
		}
		return IssueRequest{}, newProblem(ProblemInvalidRequest, detail, errs...)
	}
	return req, nil
}

// jsonProblem turns an encoding/json error into a 400 Problem naming the field.
func jsonProblem(err error) *Problem {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return newProblem(ProblemInvalidRequest, fmt.Sprintf("the body is not valid JSON (at byte %d): %s", se.Offset, se.Error()))
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return newProblem(ProblemInvalidRequest, fmt.Sprintf("the body must be a JSON object, not a JSON %s", te.Value))
		}
		return newProblem(ProblemInvalidRequest, fmt.Sprintf("%s must be a JSON %s, not %s", field, te.Type.Kind(), te.Value),
			FieldError{Pointer: "#/" + strings.ReplaceAll(field, ".", "/"), Detail: fmt.Sprintf("expected a JSON %s, got %s", te.Type.Kind(), te.Value)})
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newProblem(ProblemInvalidRequest, "the body ends in the middle of the JSON object; send complete JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return newProblem(ProblemInvalidRequest, fmt.Sprintf("unknown field %q; the fields are type, params, id and correlationId", name),
			FieldError{Pointer: "#/" + name, Detail: "unknown field"})
	}
	return newProblem(ProblemInvalidRequest, "the body is not a valid request: "+err.Error())
}

// checkContentType accepts application/json and any application/*+json;
// anything else, a missing Content-Type included, is a 415 Problem. (A
// browser sends a cross-site body without a preflight only as text/plain,
// form data, or with no type at all.)
func checkContentType(r *http.Request) *Problem {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return newProblem(ProblemUnsupportedMediaType, "the request has a body but no Content-Type; send 'Content-Type: application/json'")
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))) {
		return nil
	}
	return newProblem(ProblemUnsupportedMediaType, fmt.Sprintf("Content-Type %s is not JSON; send 'Content-Type: application/json'", quoteClip(ct)))
}
