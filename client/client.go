// Package client is a Go client for cmdq's HTTP API (package api): issue
// commands, read their status and events, wait for them to finish, cancel
// them, inspect, requeue or discard poisoned commands, and list, pause and
// resume queues. A Remote (New) talks to
// one server; the wire types (IssueRequest, IssueResponse, Problem, …) are
// defined here once and the server uses the same ones.
//
// Every method returns an *Error for an HTTP error response; test it with
// errors.Is against cmdq.ErrNotFound (the same value as
// cmdq.ErrNotFound: 404 and 410), ErrGone, ErrConflict, ErrUnauthorized,
// ErrForbidden, ErrInvalid, ErrUnavailable and cmdq.ErrStorageFull (507:
// the server's disk is full), or errors.As to read the
// problem's detail.
//
// The package imports nothing of cmdq but the plain types of cmdqtype, so
// a program that only talks to a server does not link the engine.
package client

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cmdq-dev/cmdq"
)

// Sentinel errors an *Error matches with errors.Is, by HTTP status. A 404
// or 410 matches cmdq.ErrNotFound (cmdq.ErrNotFound), the error the
// cmdq.Client returns for a missing command.
var (
	// ErrGone: 410 — the command was removed after its retention
	// (Error.Detail names it). It also matches cmdq.ErrNotFound and
	// cmdq.ErrExpired, as the cmdq.Client's error for it does.
	ErrGone = errors.New("cmdq client: gone (removed after its retention)")
	// ErrConflict: 409 — the ID is used with different params, or the command
	// is not in a state the operation accepts (e.g. requeue of a command that
	// is not poisoned, cancel of one that ended).
	ErrConflict = errors.New("cmdq client: conflict")
	// ErrUnauthorized: 401 — missing or unknown bearer token.
	ErrUnauthorized = errors.New("cmdq client: unauthorized")
	// ErrForbidden: 403 — the token lacks the role the route needs.
	ErrForbidden = errors.New("cmdq client: forbidden")
	// ErrInvalid: 400, 413 or 415 — the request is invalid; Error.Detail and
	// Error.Errors say what to change.
	ErrInvalid = errors.New("cmdq client: invalid request")
	// ErrUnavailable: 429, 500, 502, 503 or 504 — the server could not
	// serve the request now (storage did not answer in time, or too many
	// failed authentications from this address); retrying later may
	// succeed, after Error.RetryAfter when the server said.
	ErrUnavailable = errors.New("cmdq client: server unavailable")
)

// Error is an HTTP error response: the RFC 9457 problem the server sent, or
// a synthesized one when the body was not a problem.
type Error struct {
	// Problem is the problem the server sent: Status is the HTTP status
	// code, Type the problem type URI (the Problem* constants), Detail what
	// to change, Errors the field problems when the server named fields.
	Problem
	// RetryAfter is the server's Retry-After (on 429, 503 and 507), 0 when it
	// sent none.
	RetryAfter time.Duration
	// Method and URL identify the request.
	Method, URL string
}

// Error reads "METHOD URL: status title: detail; pointer: detail…".
func (e *Error) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Status, e.Title)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	for _, f := range e.Errors {
		s += "; " + f.Pointer + ": " + f.Detail
	}
	return s
}

// Is matches the sentinel for e's status code.
func (e *Error) Is(target error) bool {
	switch target {
	case cmdq.ErrNotFound:
		return e.Status == http.StatusNotFound || e.Status == http.StatusGone
	case ErrGone, cmdq.ErrExpired:
		return e.Status == http.StatusGone
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrInvalid:
		return e.Status == http.StatusBadRequest || e.Status == http.StatusRequestEntityTooLarge || e.Status == http.StatusUnsupportedMediaType
	case cmdq.ErrStorageFull:
		return e.Status == http.StatusInsufficientStorage
	case ErrUnavailable:
		return e.Status == http.StatusTooManyRequests || e.Status == http.StatusInternalServerError || e.Status == http.StatusBadGateway ||
			e.Status == http.StatusServiceUnavailable || e.Status == http.StatusGatewayTimeout
	}
	return false
}

// Remote talks to one cmdq API server (not to be confused with
// cmdq.Client, which works on the store itself). It is safe for concurrent
// use.
type Remote struct {
	base  *url.URL
	token string
	hc    *http.Client
}

// Option configures a Remote.
type Option func(*Remote)

// WithToken sends "Authorization: Bearer token" with every request.
// Default: no Authorization header.
func WithToken(token string) Option { return func(c *Remote) { c.token = token } }

// WithHTTPClient uses hc for requests. Default: an http.Client with a 30 s
// timeout.
func WithHTTPClient(hc *http.Client) Option { return func(c *Remote) { c.hc = hc } }

// New returns a Remote for the API at baseURL, such as
// "http://127.0.0.1:8080" or "https://cmdq.example.com/cmdq" (the routes are
// resolved below it).
func New(baseURL string, opts ...Option) (*Remote, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("cmdq client: base URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("cmdq client: base URL %q must be absolute http(s), such as http://127.0.0.1:8080", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("cmdq client: base URL %q must not have a query or fragment", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	c := &Remote{base: u, hc: &http.Client{Timeout: 30 * time.Second}}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = http.DefaultClient
	}
	return c, nil
}

// Issue issues a command (POST /v1/commands), with options applied to
// req (At, After). Params that are not valid JSON fail here, before
// anything is sent. The W3C trace context of ctx's span (OpenTelemetry),
// if it has one, is sent as the traceparent and tracestate headers: the
// command and its attempts join that trace.
func (c *Remote) Issue(ctx context.Context, req IssueRequest, opts ...IssueOption) (IssueResponse, error) {
	for _, o := range opts {
		o(&req)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return IssueResponse{}, fmt.Errorf("cmdq client: encoding the request (params must be valid JSON): %w", err)
	}
	var h http.Header
	if trace.SpanContextFromContext(ctx).IsValid() {
		h = http.Header{}
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	}
	var res IssueResponse
	resp, err := c.send(ctx, http.MethodPost, "/v1/commands", nil, body, h, &res)
	if err != nil {
		return IssueResponse{}, err
	}
	res.Existing = resp.StatusCode == http.StatusOK
	return res, nil
}

// Get returns a command's status (GET /v1/commands/{id}).
func (c *Remote) Get(ctx context.Context, id string) (cmdq.Status, error) {
	var st cmdq.Status
	_, err := c.do(ctx, http.MethodGet, "/v1/commands/"+url.PathEscape(id), nil, nil, &st)
	return st, err
}

// Events returns a command's lifecycle events, oldest first
// (GET /v1/commands/{id}/events).
func (c *Remote) Events(ctx context.Context, id string) ([]cmdq.Event, error) {
	var res EventsResponse
	_, err := c.do(ctx, http.MethodGet, "/v1/commands/"+url.PathEscape(id)+"/events", nil, nil, &res)
	return res.Events, err
}

// DefaultLongPoll is how long one request of Wait and WaitChange asks the
// server to wait for a change (20 s; the server cuts it to its maximum,
// 30 s by default). With an http.Client whose Timeout is shorter, they
// ask for 5 s less than that Timeout.
const DefaultLongPoll = 20 * time.Second

// fallbackPoll is how often Wait reads a server that does not long-poll
// (it answered at once without Preference-Applied).
const fallbackPoll = 500 * time.Millisecond

// longPoll is the wait one long-poll request asks for.
func (c *Remote) longPoll() time.Duration {
	if t := c.hc.Timeout; t > 0 && t-5*time.Second < DefaultLongPoll {
		return max(t-5*time.Second, time.Second)
	}
	return DefaultLongPoll
}

// WaitChange long-polls a command (GET /v1/commands/{id} with
// If-None-Match: etag and Prefer: wait): it returns the status and its
// ETag as soon as the ETag is not etag ("" answers at once), or, when the
// server's wait (up to DefaultLongPoll) ends first, the zero Status, etag
// and changed=false: ask again. The server watches the command for all
// its waiters, so waiting costs it at most one storage read per second.
func (c *Remote) WaitChange(ctx context.Context, id, etag string) (st cmdq.Status, tag string, changed bool, err error) {
	st, tag, changed, _, err = c.waitChange(ctx, id, etag)
	return st, tag, changed, err
}

// waitChange is WaitChange; waited reports whether the server waited
// (Preference-Applied), so a loop does not spin on a server that does not.
func (c *Remote) waitChange(ctx context.Context, id, etag string) (st cmdq.Status, tag string, changed, waited bool, err error) {
	h := http.Header{}
	if etag != "" {
		h.Set("If-None-Match", etag)
		h.Set("Prefer", "wait="+strconv.Itoa(int(c.longPoll()/time.Second)))
	}
	resp, err := c.send(ctx, http.MethodGet, "/v1/commands/"+url.PathEscape(id), nil, nil, h, &st)
	if err != nil {
		return cmdq.Status{}, etag, false, false, err
	}
	waited = resp.Header.Get("Preference-Applied") != ""
	if resp.StatusCode == http.StatusNotModified {
		return cmdq.Status{}, etag, false, waited, nil
	}
	return st, resp.Header.Get("ETag"), true, waited, nil
}

// Wait long-polls the command (see WaitChange) until it is completed,
// poisoned or discarded, and returns that status. It returns ctx's error,
// with the last status seen (zero if none), when ctx ends first; other
// errors (not found, unauthorized, …) end it at once. Against a server
// that does not long-poll it reads the status every 500 ms.
func (c *Remote) Wait(ctx context.Context, id string) (cmdq.Status, error) {
	return c.WaitSeen(ctx, id, nil)
}

// WaitSeen is Wait, calling seen (when not nil) with every status it gets
// that is not final yet (the first, then each change).
func (c *Remote) WaitSeen(ctx context.Context, id string, seen func(cmdq.Status)) (cmdq.Status, error) {
	var last cmdq.Status
	tag := ""
	for {
		st, next, changed, waited, err := c.waitChange(ctx, id, tag)
		if err != nil {
			if ctx.Err() != nil {
				return last, fmt.Errorf("cmdq client: waiting for command %s (last status %q): %w", id, last.State, ctx.Err())
			}
			return last, err
		}
		if changed {
			last, tag = st, next
			if st.State.Final() {
				return st, nil
			}
			if seen != nil {
				seen(st)
			}
			if tag != "" {
				continue
			}
		}
		if !waited || tag == "" {
			// An old server answered at once: poll it.
			t := time.NewTimer(fallbackPoll)
			select {
			case <-ctx.Done():
				t.Stop()
				return last, fmt.Errorf("cmdq client: waiting for command %s (last status %q): %w", id, last.State, ctx.Err())
			case <-t.C:
			}
		}
	}
}

// Follow streams a command's history (GET /v1/commands/{id}/events with
// Accept: text/event-stream): it calls onEvent (when not nil) with every
// event numbered above after, oldest first, and onStatus (when not nil)
// with the status after each change, until the command is completed,
// poisoned or discarded, and returns that status. When the stream ends
// early (the server's stream limit, a restart, a storage failure) it
// reconnects after the server's retry delay, resuming after the last
// event (Last-Event-ID). It returns ctx's error when ctx ends, and other
// errors (not found, unauthorized, …) at once.
func (c *Remote) Follow(ctx context.Context, id string, after int64, onEvent func(cmdq.Event), onStatus func(cmdq.Status)) (cmdq.Status, error) {
	hc := *c.hc
	hc.Timeout = 0 // a stream lasts; ctx ends it
	var last cmdq.Status
	retry := 2 * time.Second
	for {
		h := http.Header{"Accept": {"text/event-stream"}}
		if after > 0 {
			h.Set("Last-Event-ID", strconv.FormatInt(after, 10))
		}
		req, u, err := c.request(ctx, http.MethodGet, "/v1/commands/"+url.PathEscape(id)+"/events", nil, nil, h)
		if err != nil {
			return last, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return last, fmt.Errorf("cmdq client: following command %s: %w", id, ctx.Err())
			}
			return last, fmt.Errorf("cmdq client: GET %s: %w", u, err)
		}
		switch {
		case resp.StatusCode == http.StatusNoContent:
			// Final, and everything was sent before.
			resp.Body.Close()
			st, err := c.Get(ctx, id)
			if err == nil && onStatus != nil {
				onStatus(st)
			}
			return st, err
		case resp.StatusCode < 200 || resp.StatusCode > 299:
			data, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
			resp.Body.Close()
			return last, problemError(http.MethodGet, u, resp, data)
		}
		final, err := readStream(resp.Body, func(field, id, data string) error {
			switch field {
			case "retry":
				if ms, err := strconv.Atoi(data); err == nil && ms > 0 {
					retry = time.Duration(ms) * time.Millisecond
				}
			case "status":
				var st cmdq.Status
				if err := json.Unmarshal([]byte(data), &st); err != nil {
					return fmt.Errorf("cmdq client: status in the stream of %s: %w", id, err)
				}
				last = st
				if onStatus != nil {
					onStatus(st)
				}
			case "message":
				var e cmdq.Event
				if err := json.Unmarshal([]byte(data), &e); err != nil {
					return fmt.Errorf("cmdq client: event in the stream of %s: %w", id, err)
				}
				after = max(after, e.Seq)
				if onEvent != nil {
					onEvent(e)
				}
			}
			return nil
		}, func() bool { return last.State.Final() })
		resp.Body.Close()
		switch {
		case final:
			return last, nil
		case ctx.Err() != nil:
			return last, fmt.Errorf("cmdq client: following command %s: %w", id, ctx.Err())
		case err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
			var perr *protocolError
			if errors.As(err, &perr) {
				return last, err
			}
		}
		// Ended early: reconnect after the server's retry delay.
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return last, fmt.Errorf("cmdq client: following command %s: %w", id, ctx.Err())
		case <-t.C:
		}
	}
}

// protocolError is a stream the client cannot read.
type protocolError struct{ err error }

func (e *protocolError) Error() string { return e.err.Error() }
func (e *protocolError) Unwrap() error { return e.err }

// readStream reads server-sent events from r, calling fn with "retry" and
// its value, or with the event name ("message" by default), the id and
// the data of each message. It stops when done reports true after a
// message, when r ends (final false), or at fn's error.
func readStream(r io.Reader, fn func(field, id, data string) error, done func() bool) (final bool, err error) {
	br := bufio.NewReader(r)
	var event, id string
	var data []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return false, err
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if len(data) > 0 {
				if err := fn(cmp.Or(event, "message"), id, strings.Join(data, "\n")); err != nil {
					return false, &protocolError{err}
				}
				if done() {
					return true, nil
				}
			}
			event, data = "", nil
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment (heartbeat)
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			event = value
		case "data":
			data = append(data, value)
		case "id":
			id = value
		case "retry":
			_ = fn("retry", "", value)
		}
	}
}

// ListPoison lists poisoned commands newest first, one page at a time
// (GET /v1/poison): q.Type keeps one command type ("" = all), q.Limit is
// the page size (0 = the server's default, 50; at most 1000),
// q.Continuation the previous page's token ("" = the first page).
func (c *Remote) ListPoison(ctx context.Context, q cmdq.PoisonQuery) (cmdq.PoisonPage, error) {
	v := url.Values{}
	if q.Type != "" {
		v.Set("type", q.Type)
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Continuation != "" {
		v.Set("continuation", q.Continuation)
	}
	var page cmdq.PoisonPage
	_, err := c.do(ctx, http.MethodGet, "/v1/poison", v, nil, &page)
	return page, err
}

// GetPoison returns one poison entry (GET /v1/poison/{id}).
func (c *Remote) GetPoison(ctx context.Context, id string) (cmdq.PoisonEntry, error) {
	var e cmdq.PoisonEntry
	_, err := c.do(ctx, http.MethodGet, "/v1/poison/"+url.PathEscape(id), nil, nil, &e)
	return e, err
}

// GetPoisonParams returns one poison entry with the poisoned command's
// parameters (GET /v1/poison/{id}).
func (c *Remote) GetPoisonParams(ctx context.Context, id string) (PoisonEntryResponse, error) {
	var e PoisonEntryResponse
	_, err := c.do(ctx, http.MethodGet, "/v1/poison/"+url.PathEscape(id), nil, nil, &e)
	return e, err
}

// Requeue puts a poisoned command back on its queue
// (POST /v1/poison/{id}/requeue). A command that is not poisoned gives
// ErrConflict.
func (c *Remote) Requeue(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/poison/"+url.PathEscape(id)+"/requeue", nil, nil, nil)
	return err
}

// Discard gives up on a poisoned command (DELETE /v1/poison/{id}). A command
// that is not poisoned gives ErrConflict.
func (c *Remote) Discard(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/poison/"+url.PathEscape(id), nil, nil, nil)
	return err
}

// maxResponseBytes bounds how much of a response body is read (16 MiB).
const maxResponseBytes = 16 << 20

// do sends one request and decodes a 2xx JSON body into out (if non-nil).
func (c *Remote) do(ctx context.Context, method, path string, query url.Values, body []byte, out any) (int, error) {
	resp, err := c.send(ctx, method, path, query, body, nil, out)
	if err != nil {
		if resp != nil {
			return resp.StatusCode, err
		}
		return 0, err
	}
	return resp.StatusCode, nil
}

// request builds a request to path with query, body and extra headers; u
// is its URL without credentials, for messages.
func (c *Remote) request(ctx context.Context, method, path string, query url.Values, body []byte, h http.Header) (*http.Request, string, error) {
	full := c.base.String() + path
	if len(query) > 0 {
		full += "?" + query.Encode()
	}
	u, err := url.Parse(full)
	if err != nil {
		return nil, "", fmt.Errorf("cmdq client: %w", err)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, "", fmt.Errorf("cmdq client: %w", err)
	}
	req.Header.Set("Accept", "application/json, "+ProblemContentType)
	for k, v := range h {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, u.Redacted(), nil
}

// send sends one request (with extra headers h) and decodes a 2xx JSON
// body into out (if non-nil). The response's body is read and closed; a
// non-2xx answer is returned with its *Error.
func (c *Remote) send(ctx context.Context, method, path string, query url.Values, body []byte, h http.Header, out any) (*http.Response, error) {
	req, u, err := c.request(ctx, method, path, query, body, h)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cmdq client: %s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return resp, fmt.Errorf("cmdq client: %s %s: reading response: %w", method, u, err)
	}
	if resp.StatusCode == http.StatusNotModified {
		return resp, nil
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, problemError(method, u, resp, data)
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(data, out); err != nil {
			return resp, fmt.Errorf("cmdq client: %s %s: decoding %d response: %w", method, u, resp.StatusCode, err)
		}
	}
	return resp, nil
}

func problemError(method, u string, resp *http.Response, data []byte) *Error {
	e := &Error{}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == ProblemContentType || mt == "application/json" {
		_ = json.Unmarshal(data, &e.Problem)
	}
	e.Status, e.Method, e.URL = resp.StatusCode, method, u
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		e.RetryAfter = time.Duration(secs) * time.Second
	}
	if e.Title == "" {
		e.Title = http.StatusText(resp.StatusCode)
	}
	if e.Detail == "" && e.Type == "" {
		// Not a problem document (a proxy's error page, say): keep a short excerpt.
		s := strings.TrimSpace(string(data))
		if len(s) > 200 {
			s = s[:200] + "…"
		}
		e.Detail = s
	}
	return e
}
