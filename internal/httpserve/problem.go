package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
)

// ProblemContentType is the media type of every error response (RFC 9457).
const ProblemContentType = "application/problem+json"

// problemBase prefixes every problem type URI; the fragment names the section
// of docs/api.md that explains the problem.
const problemBase = "https://github.com/cmdq-dev/cmdq/blob/main/docs/api.md#"

// Problem type URIs. Clients branch on Type (or on Status); Title is the short
// human summary that goes with each type.
const (
	// ProblemInvalidRequest: the request body or a query parameter is malformed
	// or fails validation (400). Errors lists each field problem.
	ProblemInvalidRequest = problemBase + "invalid-request"
	// ProblemInvalidID: the {id} in the path is not a canonical lowercase UUID (400).
	ProblemInvalidID = problemBase + "invalid-id"
	// ProblemUnsupportedMediaType: the request's Content-Type is not JSON (415).
	ProblemUnsupportedMediaType = problemBase + "unsupported-media-type"
	// ProblemTooLarge: the body exceeds MaxBodyBytes, or the parameters exceed
	// what one stored command holds (413).
	ProblemTooLarge = problemBase + "too-large"
	// ProblemUnauthorized: no bearer token, or one that is not configured (401).
	ProblemUnauthorized = problemBase + "unauthorized"
	// ProblemForbidden: the token lacks the role the route needs (403).
	ProblemForbidden = problemBase + "forbidden"
	// ProblemCrossSite: a browser page on another site tried to change
	// something, or a CORS preflight came from an origin not in
	// Config.CORSOrigins (403).
	ProblemCrossSite = problemBase + "cross-site"
	// ProblemMisdirected: without tokens, the request's Host is not a
	// loopback name or one of Config.AllowedHosts (421).
	ProblemMisdirected = problemBase + "misdirected"
	// ProblemTooManyRequests: the client's address made too many failed
	// authentications; Retry-After says when it may try again (429).
	ProblemTooManyRequests = problemBase + "too-many-requests"
	// ProblemNotFound: no such command, poison entry or route (404).
	ProblemNotFound = problemBase + "not-found"
	// ProblemGone: the command was removed after its retention (410); the
	// detail names the retention.
	ProblemGone = problemBase + "gone"
	// ProblemMethodNotAllowed: the route exists but not for this method (405);
	// the Allow header lists the methods it accepts.
	ProblemMethodNotAllowed = problemBase + "method-not-allowed"
	// ProblemConflict: the command ID exists with different type or
	// parameters, or the command is not in a state the operation accepts (409).
	ProblemConflict = problemBase + "conflict"
	// ProblemUnavailable: storage did not answer within the request's
	// deadline, storage failed so that a stored command could not be queued
	// (POST /v1/commands: send the same request again), or (on /readyz) the
	// service is unhealthy or storage is not answering (503, with
	// Retry-After).
	ProblemUnavailable = problemBase + "unavailable"
	// ProblemInternal: an unexpected server-side failure (500). Detail carries
	// a reference that is also in the server's log.
	ProblemInternal = problemBase + "internal"
)

// Problem is an RFC 9457 problem details object, the body of every error
// response.
type Problem struct {
	// Type is a URI identifying the kind of problem (one of the Problem* constants).
	Type string `json:"type"`
	// Title is a short summary of the problem type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence and what to change.
	Detail string `json:"detail,omitempty"`
	// Instance is the request path the problem occurred on.
	Instance string `json:"instance,omitempty"`
	// Errors lists individual field problems, when there are several or a
	// field can be named.
	Errors []FieldError `json:"errors,omitempty"`
}

// FieldError is one problem with one field of the request.
type FieldError struct {
	// Pointer is a JSON Pointer (RFC 6901) into the request body, such as
	// "#/type", or "query:limit" for a query parameter.
	Pointer string `json:"pointer"`
	// Detail says what is wrong with the field and what to send instead.
	Detail string `json:"detail"`
}

// Error makes *Problem usable as an error inside the package.
func (p *Problem) Error() string {
	s := strconv.Itoa(p.Status) + " " + p.Title
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	return s
}

var problemTitles = map[string]string{
	ProblemInvalidRequest:       "Invalid request",
	ProblemInvalidID:            "Invalid command ID",
	ProblemUnsupportedMediaType: "Unsupported media type",
	ProblemTooLarge:             "Request too large",
	ProblemUnauthorized:         "Unauthorized",
	ProblemForbidden:            "Forbidden",
	ProblemCrossSite:            "Cross-site request refused",
	ProblemMisdirected:          "Misdirected request",
	ProblemTooManyRequests:      "Too many requests",
	ProblemNotFound:             "Not found",
	ProblemGone:                 "Gone",
	ProblemMethodNotAllowed:     "Method not allowed",
	ProblemConflict:             "Conflict",
	ProblemUnavailable:          "Service unavailable",
	ProblemInternal:             "Internal server error",
}

var problemStatus = map[string]int{
	ProblemInvalidRequest:       http.StatusBadRequest,
	ProblemInvalidID:            http.StatusBadRequest,
	ProblemUnsupportedMediaType: http.StatusUnsupportedMediaType,
	ProblemTooLarge:             http.StatusRequestEntityTooLarge,
	ProblemUnauthorized:         http.StatusUnauthorized,
	ProblemForbidden:            http.StatusForbidden,
	ProblemCrossSite:            http.StatusForbidden,
	ProblemMisdirected:          http.StatusMisdirectedRequest,
	ProblemTooManyRequests:      http.StatusTooManyRequests,
	ProblemNotFound:             http.StatusNotFound,
	ProblemGone:                 http.StatusGone,
	ProblemMethodNotAllowed:     http.StatusMethodNotAllowed,
	ProblemConflict:             http.StatusConflict,
	ProblemUnavailable:          http.StatusServiceUnavailable,
	ProblemInternal:             http.StatusInternalServerError,
}

// newProblem builds a problem of the given type with its standard title and status.
func newProblem(typ, detail string, errs ...FieldError) *Problem {
	return &Problem{Type: typ, Title: problemTitles[typ], Status: problemStatus[typ], Detail: detail, Errors: errs}
}

// Bounds on what a problem may carry, whatever the route put in it: a
// rejected input is quoted only in part (quoteClip), and these catch the
// rest, so an answer never grows with the request.
const (
	maxDetailBytes   = 2048 // Detail
	maxFieldBytes    = 512  // each FieldError's Pointer and Detail
	maxFieldErrors   = 20   // FieldErrors listed; the rest are counted
	maxInstanceBytes = 128  // Instance (the request path)
)

// clipTo cuts s to at most n bytes at a character boundary, marking the cut.
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// bound applies the bounds above to p.
func (p *Problem) bound() {
	p.Detail = clipTo(p.Detail, maxDetailBytes)
	p.Instance = clipTo(p.Instance, maxInstanceBytes)
	if len(p.Errors) > maxFieldErrors {
		more := len(p.Errors) - maxFieldErrors + 1
		p.Errors = append(p.Errors[:maxFieldErrors-1:maxFieldErrors-1], FieldError{Pointer: "…", Detail: strconv.Itoa(more) + " more problems not listed"})
	}
	for i := range p.Errors {
		p.Errors[i].Pointer = clipTo(p.Errors[i].Pointer, maxFieldBytes)
		p.Errors[i].Detail = clipTo(p.Errors[i].Detail, maxFieldBytes)
	}
}

// writeProblem writes p as the response, filling Instance from the request.
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Instance == "" && r != nil {
		p.Instance = r.URL.Path
	}
	p.bound()
	b, err := marshal(p)
	if err != nil { // cannot happen: Problem holds only strings and ints
		b = []byte(`{"type":"` + ProblemInternal + `","title":"Internal server error","status":500}` + "\n")
		p.Status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", ProblemContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if p.Status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

// marshal encodes v as one line of JSON without HTML escaping (so "<token>"
// stays readable).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeJSON writes v as a JSON response with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		writeProblem(w, nil, newProblem(ProblemInternal, "encoding the response failed"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
