package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// triggerRequest is the optional body of POST /v1/periodic/{name}/trigger.
type triggerRequest struct {
	// At is the trigger time (RFC 3339); absent: now. A retry sends the
	// time the first answer returned and gets the same tick.
	At *time.Time `json:"at"`
}

// triggerPeriodic is POST /v1/periodic/{name}/trigger (operator): the
// schedule's command issued now as a tick (cmdq.Client.TriggerPeriodicAt),
// 202 with the tick, 200 with it when the same trigger time was
// triggered before; 404 for an unknown schedule, 409 when only a row
// without parameters knows it.
func (s *server) triggerPeriodic(w http.ResponseWriter, r *http.Request) {
	who, ok := s.authorize(w, r, RoleOperator)
	if !ok {
		return
	}
	name, ok := scheduleName(w, r)
	if !ok {
		return
	}
	var req triggerRequest
	if httpserve.HasBody(r) {
		if p := checkContentType(r); p != nil {
			writeProblem(w, r, p)
			return
		}
		data, err := io.ReadAll(r.Body)
		if err != nil {
			writeProblem(w, r, newProblem(client.ProblemInvalidRequest, "the request body could not be read; send {} or {\"at\": \"<RFC 3339 time>\"}"))
			return
		}
		if len(bytes.TrimSpace(data)) > 0 {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil || dec.More() {
				writeProblem(w, r, newProblem(client.ProblemInvalidRequest, "the body is not {\"at\": \"<RFC 3339 time>\"}: give the time an earlier trigger returned to repeat it, or no body for now",
					client.FieldError{Pointer: "/at", Detail: "an RFC 3339 time such as 2026-01-02T03:04:05.678Z"}))
				return
			}
		}
	}
	var at time.Time
	if req.At != nil {
		at = *req.At
	}
	tick, err := s.cfg.Client.TriggerPeriodicAt(r.Context(), name, "api:"+who, at)
	switch {
	case err == nil:
	case errors.Is(err, cmdq.ErrEnqueueFailed) && tick.ID != "":
		s.log.Warn().Err(err).Str("command", tick.ID).Msg("cmdq api: triggered tick stored but its message not queued; the reconciler will queue it")
	case errors.Is(err, cmdq.ErrInvalidSchedule):
		writeProblem(w, r, newProblem(client.ProblemInvalidRequest, clipText(err.Error()), client.FieldError{Pointer: "/at", Detail: "outside the last hour"}))
		return
	case errors.Is(err, cmdq.ErrNoScheduleParams):
		// The Client's sentence whole (it names the process to ask).
		writeProblem(w, r, newProblem(client.ProblemConflict, strings.TrimPrefix(err.Error(), cmdq.ErrNoScheduleParams.Error()+": ")))
		return
	case errors.Is(err, cmdq.ErrNotFound):
		writeProblem(w, r, newProblem(client.ProblemNotFound, fmt.Sprintf("no periodic schedule %s is registered on this server or stored; GET /v1/periodic lists them", quoteClip(name))))
		return
	default:
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", s.cfg.BasePath+"/v1/commands/"+tick.ID)
	if tick.Duplicate {
		writeJSON(w, http.StatusOK, tick)
		return
	}
	s.log.Info().Str("periodic", name).Str("command", tick.ID).Str("by", who).Msg("cmdq api: periodic schedule triggered")
	writeJSON(w, http.StatusAccepted, tick)
}

// scheduleName returns the request's {name}, or answers 400 when it is no
// schedule name.
func scheduleName(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("name")
	if err := cmdq.ValidateType(name); err != nil {
		writeProblem(w, r, newProblem(client.ProblemInvalidRequest, fmt.Sprintf("%s is not a schedule name; names are 1-%d characters: a letter, then letters, digits, '.', '_' or '-'; GET /v1/periodic lists them", quoteClip(name), cmdq.MaxPeriodicNameLength),
			client.FieldError{Pointer: "path:name", Detail: "not a schedule name"}))
		return "", false
	}
	return name, true
}

// DefaultRecentTicks is how many ticks GET /v1/periodic/{name} returns
// when the request names no `ticks` (10; at most cmdq.MaxRecentTicks).
const DefaultRecentTicks = 10

// getPeriodic is GET /v1/periodic/{name}?ticks=N (reader): the schedule as
// GET /v1/periodic lists it, with its latest N ticks of the spec (default
// DefaultRecentTicks, 0 to cmdq.MaxRecentTicks), newest first, each with
// its command's state or missed (cmdq.Client.GetPeriodic). 404 for an
// unknown schedule.
func (s *server) getPeriodic(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, RoleReader); !ok {
		return
	}
	name, ok := scheduleName(w, r)
	if !ok {
		return
	}
	ticks := DefaultRecentTicks
	for k := range r.URL.Query() {
		if k != "ticks" {
			writeProblem(w, r, newProblem(client.ProblemInvalidRequest, fmt.Sprintf("unknown query parameter %s; GET /v1/periodic/{name} takes only ticks", quoteClip(k)),
				client.FieldError{Pointer: "query:" + clipText(k), Detail: "unknown query parameter; use ticks"}))
			return
		}
	}
	if v := r.URL.Query().Get("ticks"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > cmdq.MaxRecentTicks {
			d := fmt.Sprintf("ticks must be a whole number from 0 to %d (default %d)", cmdq.MaxRecentTicks, DefaultRecentTicks)
			writeProblem(w, r, newProblem(client.ProblemInvalidRequest, d, client.FieldError{Pointer: "query:ticks", Detail: d}))
			return
		}
		ticks = n
	}
	info, err := s.cfg.Client.GetPeriodic(r.Context(), name, ticks)
	switch {
	case err == nil:
	case errors.Is(err, cmdq.ErrNotFound):
		writeProblem(w, r, newProblem(client.ProblemNotFound, fmt.Sprintf("no periodic schedule %s is registered on this server or stored; GET /v1/periodic lists them", quoteClip(name))))
		return
	default:
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}
