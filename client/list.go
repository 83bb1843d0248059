package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// ListCommands lists one page of commands in ID order (GET /v1/commands),
// filtered by q's State, Type, Queue, CorrelationID, IssuedSince and
// IssuedBefore; q.Limit is the page size (0: the server's default, 100;
// at most 1000) and q.Continuation the previous page's token. The other
// fields of q are not sent. The server reads its commands table for the
// page (cmdq.Client.ListCommands).
func (c *Remote) ListCommands(ctx context.Context, q cmdq.CommandQuery) (cmdq.CommandPage, error) {
	v := url.Values{}
	set := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	set("state", string(q.State))
	set("type", q.Type)
	set("queue", q.Queue)
	set("correlationId", q.CorrelationID)
	if !q.IssuedSince.IsZero() {
		v.Set("since", q.IssuedSince.UTC().Format(time.RFC3339Nano))
	}
	if !q.IssuedBefore.IsZero() {
		v.Set("until", q.IssuedBefore.UTC().Format(time.RFC3339Nano))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	set("continuation", q.Continuation)
	var page cmdq.CommandPage
	_, err := c.do(ctx, http.MethodGet, "/v1/commands", v, nil, &page)
	return page, err
}
