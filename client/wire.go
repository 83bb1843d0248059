package client

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// The wire types of the HTTP API: the bodies the server (package api)
// reads and writes and this client sends and decodes, defined here once
// and nowhere else. A command's status, its events and the poison
// entries are package cmdqtype's Status, Event, PoisonEntry and
// PoisonPage. api/openapi.json describes every one of them.

// ProblemContentType is the media type of every error response of the API
// (RFC 9457).
const ProblemContentType = "application/problem+json"

// problemBase prefixes every problem type URI; the fragment names the section
// of docs/api.md that explains the problem.
const problemBase = "https://github.com/cmdq-dev/cmdq/blob/main/docs/api.md#"

// Problem type URIs (Problem.Type). Clients branch on the type (or on the
// status); the title goes with the type.
const (
	// ProblemInvalidRequest: the request body or a query parameter is malformed
	// or fails validation (400). Errors lists each field problem.
	ProblemInvalidRequest = problemBase + "invalid-request"
	// ProblemInvalidID: the {id} in the path is not a canonical lowercase UUID (400).
	ProblemInvalidID = problemBase + "invalid-id"
	// ProblemUnsupportedMediaType: the request's Content-Type is not JSON (415).
	ProblemUnsupportedMediaType = problemBase + "unsupported-media-type"
	// ProblemTooLarge: the body exceeds the server's body limit, or the
	// parameters exceed what one stored command holds (413).
	ProblemTooLarge = problemBase + "too-large"
	// ProblemUnauthorized: no bearer token, or one that is not configured (401).
	ProblemUnauthorized = problemBase + "unauthorized"
	// ProblemForbidden: the token lacks the role the route needs (403).
	ProblemForbidden = problemBase + "forbidden"
	// ProblemCrossSite: a browser page on another site tried to change
	// something, or a CORS preflight came from an origin the server does
	// not list (403).
	ProblemCrossSite = problemBase + "cross-site"
	// ProblemMisdirected: without tokens, the request's Host is not a
	// loopback name or one of the server's allowed hosts (421).
	ProblemMisdirected = problemBase + "misdirected"
	// ProblemTooManyRequests: the client's address made too many failed
	// authentications; Retry-After says when it may try again (429).
	ProblemTooManyRequests = problemBase + "too-many-requests"
	// ProblemNotFound: no such command, poison entry, queue or route (404).
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
	// ProblemStorageFull: the embedded store's disk is (nearly) full, so
	// the write was refused and nothing was stored (507 Insufficient
	// Storage, with Retry-After). Detail names the data directory and
	// its free space. Reads go on; writes are accepted again by
	// themselves once space is freed.
	ProblemStorageFull = problemBase + "storage-full"
	// ProblemInternal: an unexpected server-side failure (500). Detail carries
	// a reference that is also in the server's log.
	ProblemInternal = problemBase + "internal"
)

// Problem is an RFC 9457 problem details object: the body of every error
// response of the API. A Remote returns it inside an *Error.
type Problem struct {
	// Type is a URI identifying the kind of problem (one of the Problem*
	// constants).
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

// FieldError is one problem with one field of a request.
type FieldError struct {
	// Pointer names the field: a JSON Pointer (RFC 6901) into the request
	// body such as "#/type", "query:limit" for a query parameter, or
	// "header:Last-Event-ID" for a header.
	Pointer string `json:"pointer"`
	// Detail says what is wrong with the field and what to send instead.
	Detail string `json:"detail"`
}

// IssueRequest is the body of POST /v1/commands: a command to issue.
type IssueRequest struct {
	// Type is the command type name. Required.
	Type string `json:"type"`
	// Params is the command's parameters: a JSON object (json.Marshal's
	// output of the command's Go value, for example). Optional: nil,
	// empty or null means {}. The server stores it compacted
	// (insignificant whitespace removed), so the same object with other
	// spacing is the same request.
	Params json.RawMessage `json:"params,omitempty"`
	// ID is the command ID, a canonical lowercase UUID. Optional: the
	// server generates one when it is empty. Issuing again with the same
	// ID, type, params and correlation ID returns the existing command
	// instead of issuing a second; anything else under the same ID is a
	// 409 (ErrConflict).
	ID string `json:"id,omitempty"`
	// CorrelationID is free text (at most 256 bytes) carried with the
	// command for tracing. Optional.
	CorrelationID string `json:"correlationId,omitempty"`
	// UniqueKey makes the command unique per type and key within
	// UniqueWindow (docs/api.md, "Unique commands"): the command ID
	// derives from the type, the key and the window's time bucket, so the
	// same type and key again in the same bucket answers 200 with the
	// existing command ("duplicate":true) whatever the params. 1-256
	// bytes; not together with id. Optional.
	UniqueKey string `json:"uniqueKey,omitempty"`
	// UniqueWindow is the unique key's window, a duration such as "1h"
	// or "90s" (Go syntax, 1s to 720h): a bucket is the UTC time
	// truncated to a multiple of it (1h buckets start on the hour).
	// Required with uniqueKey.
	UniqueWindow string `json:"uniqueWindow,omitempty"`
	// OrderKey orders the command among the commands issued with the same
	// key, whatever their types: they run one at a time, in issue order,
	// across every process (docs/lifecycle.md, "Order keys"). 1-256 bytes;
	// the key's commands must share a queue (400 otherwise). Optional.
	OrderKey string `json:"orderKey,omitempty"`
	// RunAt schedules the command: an RFC 3339 time (such as
	// "2026-05-01T09:00:00Z") before which it does not start, at most 2
	// years ahead. Optional; not together with Delay. The At option sets
	// it.
	RunAt string `json:"runAt,omitempty"`
	// Delay schedules the command this long after the server receives it:
	// a Go duration such as "90s", "15m" or "2h30m", not negative, at most
	// 2 years. Optional; not together with RunAt. The After option sets
	// it.
	Delay string `json:"delay,omitempty"`
}

// ParseRunAt parses a run-at time as the API reads IssueRequest.RunAt:
// strict RFC 3339 (section 5.6), "2026-05-01T09:00:00Z" or
// "2026-05-01T11:00:00.250+02:00" — a "T" between date and time, a "." before
// a fraction, and "Z" or an offset of at most 23:59. Go's time.Parse alone
// also takes a comma before the fraction and offsets such as +24:00, which
// are not RFC 3339; the error says what to send.
func ParseRunAt(s string) (time.Time, error) {
	if !rfc3339Form(s) {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time; send one such as \"2026-05-01T09:00:00Z\" (UTC) or \"2026-05-01T11:00:00+02:00\" (a T between date and time, a '.' before a fraction, Z or an offset from -23:59 to +23:59)", clip(s))
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (%w); send one such as \"2026-05-01T09:00:00Z\" (UTC) or \"2026-05-01T11:00:00+02:00\"", clip(s), err)
	}
	return t, nil
}

// rfc3339Form reports whether s has the form of an RFC 3339 date-time:
// YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM), the offset's hours 00-23 and
// minutes 00-59 (time.Parse checks the other fields' ranges).
func rfc3339Form(s string) bool {
	digits := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return false
			}
		}
		return len(s) > 0
	}
	if len(s) < len("2006-01-02T15:04:05Z") || !digits(s[0:4]) || s[4] != '-' || !digits(s[5:7]) || s[7] != '-' || !digits(s[8:10]) ||
		s[10] != 'T' || !digits(s[11:13]) || s[13] != ':' || !digits(s[14:16]) || s[16] != ':' || !digits(s[17:19]) {
		return false
	}
	rest := s[19:]
	if rest[0] == '.' {
		i := 1
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 1 {
			return false
		}
		rest = rest[i:]
	}
	if rest == "Z" {
		return true
	}
	if len(rest) != 6 || (rest[0] != '+' && rest[0] != '-') || !digits(rest[1:3]) || rest[3] != ':' || !digits(rest[4:6]) {
		return false
	}
	return rest[1:3] <= "23" && rest[4:6] <= "59"
}

// clip keeps a quoted value short.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// IssueOption adjusts an IssueRequest (Remote.Issue).
type IssueOption func(*IssueRequest)

// At schedules the command at t (IssueRequest.RunAt, RFC 3339 with the
// nanoseconds t has): it is "scheduled" until then and does not start
// before it.
func At(t time.Time) IssueOption {
	return func(r *IssueRequest) { r.RunAt, r.Delay = t.UTC().Format(time.RFC3339Nano), "" }
}

// After schedules the command d after the server receives it
// (IssueRequest.Delay).
func After(d time.Duration) IssueOption {
	return func(r *IssueRequest) { r.Delay, r.RunAt = d.String(), "" }
}

// IssueResponse is the body of a successful POST /v1/commands (202 for a
// new command, 200 for a repeated request) and of
// POST /v1/poison/{id}/requeue (202).
type IssueResponse struct {
	// ID is the command ID; GET /v1/commands/{id} reads its status.
	ID string `json:"id"`
	// Status is the command's state: pending for a new (or requeued)
	// command (scheduled when its run-at time is ahead), the current state
	// for a repeated request.
	Status cmdq.State `json:"status"`
	// RunAt is when the command is due (UTC), when it was issued with a
	// run-at time or a delay: the delay's end by the server's clock.
	RunAt time.Time `json:"runAt,omitzero"`
	// Existing is true when the ID already named this command (HTTP 200):
	// nothing new was issued. It is not part of the body: Remote.Issue
	// sets it from the status code.
	Existing bool `json:"-"`
	// Duplicate is true on a 200 answer to a request with a uniqueKey
	// whose type and key already had a command in the same window: the
	// body is that command, whatever its params.
	Duplicate bool `json:"duplicate,omitempty"`
}

// PeriodicResponse is the body of GET /v1/periodic: every periodic
// schedule, sorted by name.
type PeriodicResponse struct {
	// Periodic lists the schedules with their last and next tick.
	Periodic []cmdq.PeriodicInfo `json:"periodic"`
}

// PoisonEntryResponse is the body of GET /v1/poison/{id}: the entry and
// the poisoned command's parameters.
type PoisonEntryResponse struct {
	cmdq.PoisonEntry
	// Params is the command's parameters as stored (a JSON object);
	// absent for the entry of a malformed message, which has no stored
	// command.
	Params json.RawMessage `json:"params,omitempty"`
}

// EventsResponse is the body of GET /v1/commands/{id}/events.
type EventsResponse struct {
	// ID is the command ID.
	ID string `json:"id"`
	// Events are the command's lifecycle events, oldest first.
	Events []cmdq.Event `json:"events"`
}

// HealthResponse is the body of GET /healthz and of a 200 GET /readyz.
type HealthResponse struct {
	// State is the reported state: for a processor starting, polling,
	// working, idle, draining, stopped or unhealthy; "ok" for a server
	// without one.
	State string `json:"state"`
	// Healthy is false while the service is unhealthy.
	Healthy bool `json:"healthy"`
	// Detail is the server's health detail (for a processor, its
	// cmdq.ProcessorHealth snapshot). Only requests with the reader role (any
	// request to a server without tokens) see it.
	Detail any `json:"detail,omitempty"`
}
