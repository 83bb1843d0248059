package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
	"github.com/cmdq-dev/cmdq/storage"
)

// Cancelling commands and pausing queues (docs/api.md).

// roleIssuerOrOperator is what POST /v1/commands/{id}/cancel needs: the
// issuer role (who issues may cancel) or the operator role.
const roleIssuerOrOperator = httpserve.RoleIssuerOrOperator

// cancel is POST /v1/commands/{id}/cancel: 202 with the status once the
// cancel is stored, 200 with it when the command was cancelled before,
// 409 when it already ended otherwise.
func (s *server) cancel(w http.ResponseWriter, r *http.Request) {
	who, ok := s.authorize(w, r, roleIssuerOrOperator)
	if !ok {
		return
	}
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if httpserve.HasBody(r) {
		// The route takes no body; one that is not JSON is what a
		// cross-site form would send.
		if p := checkContentType(r); p != nil {
			writeProblem(w, r, p)
			return
		}
	}
	res, err := s.cfg.Client.Cancel(r.Context(), id, "api:"+who)
	switch {
	case err == nil:
	case errors.Is(err, cmdq.ErrNotCancellable):
		state := "ended"
		if st, gerr := s.cfg.Client.Get(r.Context(), id); gerr == nil {
			state = string(st.State)
		}
		writeProblem(w, r, newProblem(client.ProblemConflict, fmt.Sprintf("the command is %s: only a command that has not ended (pending, scheduled, retrying or running) can be cancelled; a poisoned one is discarded instead (DELETE /v1/poison/{id})", state)))
		return
	default:
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", s.cfg.BasePath+"/v1/commands/"+id)
	if res.Already {
		writeJSON(w, http.StatusOK, res.Status)
		return
	}
	logCmd(s.log.Info(), id, res.Status.TraceID).Str("by", who).Msg("cmdq api: command cancelled")
	writeJSON(w, http.StatusAccepted, res.Status)
}

// runNow is POST /v1/commands/{id}/run-now (operator): 202 with the
// status once a scheduled or retrying command is due now, 409 when it is
// not waiting for its time.
func (s *server) runNow(w http.ResponseWriter, r *http.Request) {
	who, ok := s.authorize(w, r, RoleOperator)
	if !ok {
		return
	}
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if httpserve.HasBody(r) {
		if p := checkContentType(r); p != nil {
			writeProblem(w, r, p)
			return
		}
	}
	st, err := s.cfg.Client.RunNow(r.Context(), id, "api:"+who)
	switch {
	case err == nil:
	case errors.Is(err, cmdq.ErrNotWaiting):
		// The record layer's sentence whole (it names the state), not cut
		// mid-word.
		writeProblem(w, r, newProblem(client.ProblemConflict, strings.TrimPrefix(err.Error(), cmdq.ErrNotWaiting.Error()+": ")+"; GET /v1/commands/{id} shows its state"))
		return
	case errors.Is(err, cmdq.ErrEnqueueFailed) && st.ID != "":
		// Due now and marked: the reconciler queues it (its old message
		// still comes at its old time). For the caller it is done.
		s.log.Warn().Err(err).Str("command", id).Msg("cmdq api: run-now recorded but its message not queued; the reconciler will queue it")
	default:
		s.fail(w, r, err)
		return
	}
	s.log.Info().Str("command", id).Str("by", who).Msg("cmdq api: command made due now")
	w.Header().Set("Location", s.cfg.BasePath+"/v1/commands/"+id)
	writeJSON(w, http.StatusAccepted, st)
}

// listQueues is GET /v1/queues.
func (s *server) listQueues(w http.ResponseWriter, r *http.Request) {
	listFor(s, w, r, s.cfg.Client.ListQueues, func(qs []cmdq.QueueInfo) any { return client.QueuesResponse{Queues: qs} })
}

// listPeriodic is GET /v1/periodic.
func (s *server) listPeriodic(w http.ResponseWriter, r *http.Request) {
	listFor(s, w, r, s.cfg.Client.ListPeriodic, func(ps []cmdq.PeriodicInfo) any { return client.PeriodicResponse{Periodic: ps} })
}

// listProcessors is GET /v1/processors.
func (s *server) listProcessors(w http.ResponseWriter, r *http.Request) {
	listFor(s, w, r, s.cfg.Client.Processors, func(ps []cmdq.ProcessorInfo) any { return client.ProcessorsResponse{Processors: ps} })
}

// listLimits is GET /v1/limits.
func (s *server) listLimits(w http.ResponseWriter, r *http.Request) {
	listFor(s, w, r, s.cfg.Client.Limits, func(ls []cmdq.LimitInfo) any { return client.LimitsResponse{Limits: ls} })
}

// listFor answers a reader's GET of a listing: list's items (an empty
// list, never null) wrapped in their response type by wrap.
func listFor[T any](s *server, w http.ResponseWriter, r *http.Request, list func(context.Context) ([]T, error), wrap func([]T) any) {
	if _, ok := s.authorize(w, r, RoleReader); !ok {
		return
	}
	items, err := list(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if items == nil {
		items = []T{}
	}
	writeJSON(w, http.StatusOK, wrap(items))
}

// pauseQueue is POST /v1/queues/{name}/pause.
func (s *server) pauseQueue(w http.ResponseWriter, r *http.Request) {
	s.queueAction(w, r, s.cfg.Client.PauseQueue, "paused")
}

// resumeQueue is POST /v1/queues/{name}/resume.
func (s *server) resumeQueue(w http.ResponseWriter, r *http.Request) {
	s.queueAction(w, r, s.cfg.Client.ResumeQueue, "resumed")
}

// queueAction pauses or resumes (act, logged as done) the queue {name} for
// the operator and answers 200 with the queue.
func (s *server) queueAction(w http.ResponseWriter, r *http.Request, act func(ctx context.Context, name, by string) (cmdq.QueueInfo, error), done string) {
	who, ok := s.authorize(w, r, RoleOperator)
	if !ok {
		return
	}
	name := r.PathValue("name")
	if err := cmdq.ValidateQueue(name); err != nil {
		writeProblem(w, r, newProblem(client.ProblemInvalidRequest, fmt.Sprintf("%s is not a queue name; queue names are lowercase letters, digits and single hyphens (such as \"commands\"); GET /v1/queues lists them", quoteClip(name)),
			client.FieldError{Pointer: "path:name", Detail: "not a queue name"}))
		return
	}
	if httpserve.HasBody(r) {
		if p := checkContentType(r); p != nil {
			writeProblem(w, r, p)
			return
		}
	}
	info, err := act(r.Context(), name, "api:"+who)
	switch {
	case err == nil:
	case errors.Is(err, cmdq.ErrUnknownQueue):
		writeProblem(w, r, newProblem(client.ProblemNotFound, fmt.Sprintf("no queue %s is known here; GET /v1/queues lists the queues", quoteClip(name))))
		return
	default:
		s.fail(w, r, err)
		return
	}
	if n, err := s.cfg.Client.QueueDepth(r.Context(), name); err == nil {
		info.Depth = n
	} else if !errors.Is(err, storage.ErrNotFound) {
		s.log.Debug().Err(err).Str("queue", name).Msg("cmdq api: queue depth")
	}
	s.log.Info().Str("queue", name).Str("by", who).Msg("cmdq api: queue " + done)
	writeJSON(w, http.StatusOK, info)
}

// extraTime is the time a request gets beyond Config.RequestTimeout: a
// cancel or a run-now may wait up to cmdq.ControlInterval for the
// processors of other processes (cmdq.Client.Cancel, RunNow) before it
// stores the change.
func extraTime(r *http.Request) time.Duration {
	if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/commands/") &&
		(strings.HasSuffix(r.URL.Path, "/cancel") || strings.HasSuffix(r.URL.Path, "/run-now")) {
		return cmdq.ControlInterval
	}
	return 0
}
