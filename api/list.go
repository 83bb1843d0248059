package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
)

// listStates are the states GET /v1/commands?state= accepts.
var listStates = []cmdq.State{cmdq.StatePending, cmdq.StateScheduled, cmdq.StateRunning, cmdq.StateRetrying,
	cmdq.StateCompleted, cmdq.StatePoisoned, cmdq.StateDiscarded, cmdq.StateCancelled}

// listParams are the query parameters of GET /v1/commands.
var listParams = []string{"state", "type", "queue", "correlationId", "since", "until", "limit", "continuation"}

// listCommands answers GET /v1/commands: one page of the commands in ID
// order (cmdq.Client.ListCommands), filtered by state, type, queue,
// correlation ID and issue time.
func (s *server) listCommands(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, RoleReader); !ok {
		return
	}
	q := r.URL.Query()
	var errs []client.FieldError
	bad := func(name, detail string) {
		errs = append(errs, client.FieldError{Pointer: "query:" + name, Detail: detail})
	}
	for name := range q {
		known := false
		for _, p := range listParams {
			known = known || name == p
		}
		if !known {
			bad(clipText(name), "unknown query parameter; use "+strings.Join(listParams, ", "))
		}
	}
	cq := cmdq.CommandQuery{Type: q.Get("type"), Queue: q.Get("queue"), CorrelationID: q.Get("correlationId"), Continuation: q.Get("continuation")}
	if cq.Type != "" {
		if err := cmdq.ValidateType(cq.Type); err != nil {
			bad("type", typeDetail(cq.Type))
		}
	}
	if st := q.Get("state"); st != "" {
		cq.State = cmdq.State(st)
		valid := false
		names := make([]string, len(listStates))
		for i, v := range listStates {
			valid = valid || cq.State == v
			names[i] = string(v)
		}
		if !valid {
			bad("state", fmt.Sprintf("unknown state %s; use one of %s", quoteClip(st), strings.Join(names, ", ")))
		}
	}
	for _, p := range []struct {
		name string
		to   *time.Time
	}{{"since", &cq.IssuedSince}, {"until", &cq.IssuedBefore}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				bad(p.name, fmt.Sprintf("%s is not an RFC 3339 time; give one such as 2026-05-01T09:00:00Z", quoteClip(v)))
				continue
			}
			*p.to = t
		}
	}
	if !cq.IssuedSince.IsZero() && !cq.IssuedBefore.IsZero() && !cq.IssuedBefore.After(cq.IssuedSince) {
		bad("until", "until must be after since")
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > cmdq.MaxCommandLimit {
			bad("limit", fmt.Sprintf("limit must be a whole number from 1 to %d (default %d)", cmdq.MaxCommandLimit, cmdq.DefaultCommandLimit))
		} else {
			cq.Limit = n
		}
	}
	if len(errs) > 0 {
		writeProblem(w, r, newProblem(client.ProblemInvalidRequest, errs[0].Detail, errs...))
		return
	}
	page, err := s.cfg.Client.ListCommands(r.Context(), cq)
	if err != nil {
		if errors.Is(err, cmdq.ErrInvalidContinuation) {
			writeProblem(w, r, newProblem(client.ProblemInvalidRequest, "the continuation token is not valid; pass the continuation from the previous page unchanged, or omit it to start over",
				client.FieldError{Pointer: "query:continuation", Detail: "invalid token"}))
			return
		}
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, cmdq.CommandPage{Commands: page.Commands, Continuation: page.Continuation})
}
