package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// QueuesResponse is the body of GET /v1/queues (a wire type: the server
// writes it).
type QueuesResponse struct {
	// Queues are the logical queues the server knows, by name.
	Queues []cmdq.QueueInfo `json:"queues"`
}

// ProcessorsResponse is the body of GET /v1/processors (a wire type: the
// server writes it).
type ProcessorsResponse struct {
	// Processors are the processors on the server's store, from their
	// heartbeats: running ones first, then gone ones.
	Processors []cmdq.ProcessorInfo `json:"processors"`
}

// LimitsResponse is the body of GET /v1/limits (a wire type: the server
// writes it).
type LimitsResponse struct {
	// Limits are the globally limited command types and the permits held,
	// by type name.
	Limits []cmdq.LimitInfo `json:"limits"`
}

// Limits lists the command types with a global concurrency limit and the
// permits held under each (GET /v1/limits).
func (c *Remote) Limits(ctx context.Context) ([]cmdq.LimitInfo, error) {
	var res LimitsResponse
	if _, err := c.do(ctx, http.MethodGet, "/v1/limits", nil, nil, &res); err != nil {
		return nil, err
	}
	return res.Limits, nil
}

// Processors lists every processor on the server's store (every process
// and machine) from their heartbeat rows: name, host, state, messages in
// flight, queues, last seen, and whether it is gone (GET
// /v1/processors).
func (c *Remote) Processors(ctx context.Context) ([]cmdq.ProcessorInfo, error) {
	var res ProcessorsResponse
	if _, err := c.do(ctx, http.MethodGet, "/v1/processors", nil, nil, &res); err != nil {
		return nil, err
	}
	return res.Processors, nil
}

// Cancel cancels a command that has not ended (POST
// /v1/commands/{id}/cancel): its status after the cancel, and whether it
// was cancelled before (Already: HTTP 200, nothing changed). A command
// that already ended (completed, poisoned, discarded) gives ErrConflict;
// an unknown one ErrNotFound. The server may take up to 9 s more than its
// request deadline for a command issued moments ago (docs/api.md).
func (c *Remote) Cancel(ctx context.Context, id string) (cmdq.CancelResult, error) {
	var st cmdq.Status
	code, err := c.do(ctx, http.MethodPost, "/v1/commands/"+url.PathEscape(id)+"/cancel", nil, nil, &st)
	if err != nil {
		return cmdq.CancelResult{}, err
	}
	return cmdq.CancelResult{Status: st, Already: code == http.StatusOK}, nil
}

// Queues lists the logical queues the server knows, with their depth and
// whether they are paused (GET /v1/queues).
func (c *Remote) Queues(ctx context.Context) ([]cmdq.QueueInfo, error) {
	var res QueuesResponse
	if _, err := c.do(ctx, http.MethodGet, "/v1/queues", nil, nil, &res); err != nil {
		return nil, err
	}
	return res.Queues, nil
}

// Periodic lists the periodic schedules with their last and next tick
// (GET /v1/periodic), sorted by name.
func (c *Remote) Periodic(ctx context.Context) ([]cmdq.PeriodicInfo, error) {
	var res PeriodicResponse
	if _, err := c.do(ctx, http.MethodGet, "/v1/periodic", nil, nil, &res); err != nil {
		return nil, err
	}
	return res.Periodic, nil
}

// PauseQueue pauses a logical queue for every processor (POST
// /v1/queues/{name}/pause) and returns it. An unknown queue gives
// ErrNotFound, an invalid name ErrInvalid.
func (c *Remote) PauseQueue(ctx context.Context, name string) (cmdq.QueueInfo, error) {
	return c.queueAction(ctx, name, "pause")
}

// ResumeQueue resumes a paused logical queue (POST
// /v1/queues/{name}/resume) and returns it. Errors as PauseQueue's.
func (c *Remote) ResumeQueue(ctx context.Context, name string) (cmdq.QueueInfo, error) {
	return c.queueAction(ctx, name, "resume")
}

func (c *Remote) queueAction(ctx context.Context, name, action string) (cmdq.QueueInfo, error) {
	var q cmdq.QueueInfo
	_, err := c.do(ctx, http.MethodPost, "/v1/queues/"+url.PathEscape(name)+"/"+action, nil, nil, &q)
	return q, err
}

// RunNow makes a scheduled or retrying command due now (POST
// /v1/commands/{id}/run-now; operator role) and returns its status after
// it (pending). A command that is not waiting for its time (pending,
// running, ended, or due within 2 s anyway) gives ErrConflict; an unknown
// one ErrNotFound.
func (c *Remote) RunNow(ctx context.Context, id string) (cmdq.Status, error) {
	var st cmdq.Status
	_, err := c.do(ctx, http.MethodPost, "/v1/commands/"+url.PathEscape(id)+"/run-now", nil, nil, &st)
	return st, err
}

// GetPeriodic returns periodic schedule name with its latest ticks of the
// spec, newest first, in RecentTicks (GET /v1/periodic/{name}?ticks=N):
// ticks of them, 0 to cmdq.MaxRecentTicks (the server's default, 10,
// when ticks is negative). An unknown schedule gives ErrNotFound, an
// invalid name or count ErrInvalid.
func (c *Remote) GetPeriodic(ctx context.Context, name string, ticks int) (cmdq.PeriodicInfo, error) {
	var q url.Values
	if ticks >= 0 {
		q = url.Values{"ticks": {strconv.Itoa(ticks)}}
	}
	var info cmdq.PeriodicInfo
	_, err := c.do(ctx, http.MethodGet, "/v1/periodic/"+url.PathEscape(name), q, nil, &info)
	return info, err
}

// TriggerPeriodic issues periodic schedule name's command now as a tick
// (POST /v1/periodic/{name}/trigger; operator role) and returns the tick:
// its time, its command's ID and state pending. at is the trigger time
// (zero: the server's now); giving the At a first trigger returned
// repeats it and returns the same tick with Duplicate set, issuing
// nothing, so a retried trigger runs the command once. An unknown
// schedule gives ErrNotFound; a time more than cmdq.MaxTriggerAge ago
// ErrInvalid; a schedule stored only by an old version without its
// parameters ErrConflict.
func (c *Remote) TriggerPeriodic(ctx context.Context, name string, at time.Time) (cmdq.TickInfo, error) {
	var body []byte
	if !at.IsZero() {
		b, err := json.Marshal(struct {
			At time.Time `json:"at"`
		}{at.UTC()})
		if err != nil {
			return cmdq.TickInfo{}, fmt.Errorf("cmdq client: %w", err)
		}
		body = b
	}
	var tick cmdq.TickInfo
	_, err := c.do(ctx, http.MethodPost, "/v1/periodic/"+url.PathEscape(name)+"/trigger", nil, body, &tick)
	return tick, err
}
