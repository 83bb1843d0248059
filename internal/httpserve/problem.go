package httpserve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/cmdq-dev/cmdq/client"
)

// RetryAfterSeconds is the Retry-After header (in seconds) of every 503
// answer: when a client may try again (5).
const RetryAfterSeconds = 5

var problemTitles = map[string]string{
	client.ProblemInvalidRequest:       "Invalid request",
	client.ProblemInvalidID:            "Invalid command ID",
	client.ProblemUnsupportedMediaType: "Unsupported media type",
	client.ProblemTooLarge:             "Request too large",
	client.ProblemUnauthorized:         "Unauthorized",
	client.ProblemForbidden:            "Forbidden",
	client.ProblemCrossSite:            "Cross-site request refused",
	client.ProblemMisdirected:          "Misdirected request",
	client.ProblemTooManyRequests:      "Too many requests",
	client.ProblemNotFound:             "Not found",
	client.ProblemGone:                 "Gone",
	client.ProblemMethodNotAllowed:     "Method not allowed",
	client.ProblemConflict:             "Conflict",
	client.ProblemUnavailable:          "Service unavailable",
	client.ProblemStorageFull:          "Insufficient storage",
	client.ProblemInternal:             "Internal server error",
}

var problemStatus = map[string]int{
	client.ProblemInvalidRequest:       http.StatusBadRequest,
	client.ProblemInvalidID:            http.StatusBadRequest,
	client.ProblemUnsupportedMediaType: http.StatusUnsupportedMediaType,
	client.ProblemTooLarge:             http.StatusRequestEntityTooLarge,
	client.ProblemUnauthorized:         http.StatusUnauthorized,
	client.ProblemForbidden:            http.StatusForbidden,
	client.ProblemCrossSite:            http.StatusForbidden,
	client.ProblemMisdirected:          http.StatusMisdirectedRequest,
	client.ProblemTooManyRequests:      http.StatusTooManyRequests,
	client.ProblemNotFound:             http.StatusNotFound,
	client.ProblemGone:                 http.StatusGone,
	client.ProblemMethodNotAllowed:     http.StatusMethodNotAllowed,
	client.ProblemConflict:             http.StatusConflict,
	client.ProblemUnavailable:          http.StatusServiceUnavailable,
	client.ProblemStorageFull:          http.StatusInsufficientStorage,
	client.ProblemInternal:             http.StatusInternalServerError,
}

// NewProblem builds a problem of the given type (a client.Problem*
// constant) with its standard title and status.
func NewProblem(typ, detail string, errs ...client.FieldError) *client.Problem {
	return &client.Problem{Type: typ, Title: problemTitles[typ], Status: problemStatus[typ], Detail: detail, Errors: errs}
}

// Bounds on what a problem may carry, whatever the route put in it: a
// rejected input is quoted only in part (QuoteClip), and these catch the
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
func bound(p *client.Problem) {
	p.Detail = clipTo(p.Detail, maxDetailBytes)
	p.Instance = clipTo(p.Instance, maxInstanceBytes)
	if len(p.Errors) > maxFieldErrors {
		more := len(p.Errors) - maxFieldErrors + 1
		p.Errors = append(p.Errors[:maxFieldErrors-1:maxFieldErrors-1], client.FieldError{Pointer: "…", Detail: strconv.Itoa(more) + " more problems not listed"})
	}
	for i := range p.Errors {
		p.Errors[i].Pointer = clipTo(p.Errors[i].Pointer, maxFieldBytes)
		p.Errors[i].Detail = clipTo(p.Errors[i].Detail, maxFieldBytes)
	}
}

// WriteProblem writes p as the response (application/problem+json),
// filling Instance from the request and bounding what p carries: a
// rejected input is quoted only in part, so an answer never grows with the
// request. A 503 or 507 gets Retry-After (RetryAfterSeconds) unless it
// has one.
func WriteProblem(w http.ResponseWriter, r *http.Request, p *client.Problem) {
	if p.Instance == "" && r != nil {
		p.Instance = r.URL.Path
	}
	bound(p)
	b, err := Marshal(p)
	if err != nil { // cannot happen: Problem holds only strings and ints
		b = []byte(`{"type":"` + client.ProblemInternal + `","title":"Internal server error","status":500}` + "\n")
		p.Status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", client.ProblemContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if (p.Status == http.StatusServiceUnavailable || p.Status == http.StatusInsufficientStorage) && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

// Marshal encodes v as one line of JSON without HTML escaping (so "<token>"
// stays readable).
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteJSON writes v as a JSON response with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := Marshal(v)
	if err != nil {
		WriteProblem(w, nil, NewProblem(client.ProblemInternal, "encoding the response failed"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
