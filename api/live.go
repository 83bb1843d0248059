package api

import (
	"context"
	"fmt"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// Long-polls and event streams: GET /v1/commands/{id}?wait=… answers when
// the status changes, GET /v1/commands/{id}/events with Accept:
// text/event-stream streams the events until the command is final. Both
// watch the command through the Client (cmdq.Client.Watch): a change its
// processor stores arrives at once, a change elsewhere is found by one
// storage read per command per interval shared by every waiter, and a
// completed or discarded status costs nothing to read again.
//
// They are exempt from the request deadline (RequestTimeout): a long-poll
// lasts its wait, a stream up to MaxStream. Every storage call they make
// still has the request's budget: at most RequestTimeout, each try at most
// StorageTryTimeout.

// Defaults of the long-poll and stream settings of Config.
const (
	// DefaultMaxWait is Config.MaxWait's default (30 s).
	DefaultMaxWait = 30 * time.Second
	// DefaultStreamHeartbeat is Config.StreamHeartbeat's default (15 s).
	DefaultStreamHeartbeat = 15 * time.Second
	// DefaultMaxStream is Config.MaxStream's default (30 min).
	DefaultMaxStream = httpserve.DefaultMaxStream
	// StreamRetryMillis is the reconnection delay an event stream suggests
	// to its client (the "retry:" field), in milliseconds (2000).
	StreamRetryMillis = 2000
)

// eventStream is the media type of an event stream.
const eventStream = httpserve.EventStream

// longLived reports whether r is a long-poll or an event stream, which
// the middleware exempts from the request deadline: a GET of a command's
// status asking to wait, a GET of its events accepting an event stream.
func longLived(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/v1/commands/"):
		_, tail, _ := strings.Cut(p[len("/v1/commands/"):], "/")
		switch tail {
		case "":
			return r.URL.Query().Get("wait") != "" || strings.Contains(strings.ToLower(r.Header.Get("Prefer")), "wait")
		case "events":
			return acceptsStream(r)
		}
	}
	return false
}

// acceptsStream reports whether r's Accept header lists text/event-stream.
//
// The header's q-values count (RFC 9110, section 12.5.1): the stream is
// chosen when text/event-stream is named with a q above 0 and at least the
// q that application/json gets (from application/json, application/* or
// */*, the most specific range that matches). So
// "text/event-stream;q=0, application/json" gets JSON.
func acceptsStream(r *http.Request) bool {
	streamQ, jsonQ := -1.0, -1.0 // -1: not named
	jsonSpec := -1               // specificity of the range jsonQ came from
	for _, h := range r.Header.Values("Accept") {
		for _, part := range strings.Split(h, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1.0
			if v, ok := params["q"]; ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || f < 0 || f > 1 {
					continue
				}
				q = f
			}
			switch mt {
			case eventStream:
				streamQ = max(streamQ, q)
			case "application/json", "application/*", "*/*":
				spec := map[string]int{"application/json": 2, "application/*": 1, "*/*": 0}[mt]
				if spec > jsonSpec {
					jsonQ, jsonSpec = q, spec
				} else if spec == jsonSpec {
					jsonQ = max(jsonQ, q)
				}
			}
		}
	}
	return streamQ > 0 && streamQ >= jsonQ
}

// storageCtx bounds the storage calls of a long-lived request as any
// request's: RequestTimeout (the call budget is already in r's context).
func (s *server) storageCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return s.set.StorageCtx(r)
}

// waitParam reads how long GET /v1/commands/{id} may wait: ?wait= (a
// duration such as 30s or 1m, or whole seconds), else the Prefer header's
// wait preference (RFC 7240, seconds; over MaxWait it is cut to MaxWait,
// and Preference-Applied says what was applied). 0: answer at once.
func (s *server) waitParam(w http.ResponseWriter, r *http.Request) (time.Duration, *client.Problem) {
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := parseWait(v)
		max := s.cfg.MaxWait
		if err != nil || d < 0 || d > max {
			detail := fmt.Sprintf("wait must be a duration from 0s to %s, such as 30s, or whole seconds", max)
			return 0, newProblem(client.ProblemInvalidRequest, detail, client.FieldError{Pointer: "query:wait", Detail: detail})
		}
		return d, nil
	}
	for _, pref := range strings.Split(r.Header.Get("Prefer"), ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(pref), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
			continue
		}
		d, ok := preferWait(strings.Trim(strings.TrimSpace(val), `"`), s.cfg.MaxWait)
		if !ok {
			return 0, nil // a preference that does not parse is ignored (RFC 7240)
		}
		w.Header().Set("Preference-Applied", "wait="+strconv.Itoa(int((d+time.Second-1)/time.Second)))
		return d, nil
	}
	return 0, nil
}

// preferWait reads a Prefer wait's delta-seconds (RFC 7240: one or more
// digits), capped at limit however many digits it has (a number past what
// an int64 holds included); ok is false when v is not digits.
func preferWait(v string, limit time.Duration) (d time.Duration, ok bool) {
	if v == "" {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	secs, err := strconv.ParseInt(v, 10, 64)
	if err != nil || secs > int64(limit/time.Second) {
		return limit, true // out of range: more than any maximum
	}
	return min(time.Duration(secs)*time.Second, limit), true
}

// parseWait parses a wait: a Go duration ("30s", "1m", "500ms") or whole
// seconds ("30"). A number of seconds past what a time.Duration holds is
// an error (it would wrap around).
func parseWait(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n > int(math.MaxInt64/int64(time.Second)) || n < 0 {
			return -1, fmt.Errorf("wait %d s is out of range", n)
		}
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(v)
}

// etagList parses If-None-Match: its entity tags (weak ones compared
// weakly, as RFC 9110 says for If-None-Match), or ["*"].
func etagList(h string) []string {
	var out []string
	for _, t := range strings.Split(h, ",") {
		t = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(t), "W/"))
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

// matches reports whether tag is one of tags ("*" matches any).
func matches(tags []string, tag string) bool {
	for _, t := range tags {
		if t == "*" || t == tag {
			return true
		}
	}
	return false
}

// writeStatus answers with a command's status and its ETag, or 304 when
// the request's If-None-Match names that ETag.
func writeStatus(w http.ResponseWriter, r *http.Request, st cmdq.Status, tag string) {
	h := w.Header()
	h.Set("ETag", tag)
	h.Set("Cache-Control", "private, no-cache")
	if matches(etagList(r.Header.Get("If-None-Match")), tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// get answers GET /v1/commands/{id}: the status now (one storage read,
// none for a completed or discarded command read before), or, with a
// wait, as soon as it differs from the request's If-None-Match (without
// one: from the status when the request came), else at the end of the
// wait.
func (s *server) get(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, RoleReader); !ok {
		return
	}
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	wait, p := s.waitParam(w, r)
	if p != nil {
		writeProblem(w, r, p)
		return
	}
	sctx, cancel := s.storageCtx(r)
	defer cancel()
	if wait == 0 {
		st, err := s.cfg.Client.Get(sctx, id)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeStatus(w, r, st, cmdq.ETag(st))
		return
	}
	extendDeadlines(w, wait+s.set.RequestTimeout)
	watch := s.cfg.Client.Watch(id)
	defer watch.Close()
	st, tag, changed, err := watch.Current(sctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	have := etagList(r.Header.Get("If-None-Match"))
	if len(have) == 0 {
		have = []string{tag} // wait for a change from now
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for matches(have, tag) {
		select {
		case <-changed:
		case <-timer.C:
			writeStatus(w, r, st, tag)
			return
		case <-r.Context().Done():
			return // the client went away
		}
		if st, tag, changed, err = watch.Current(sctx); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeStatus(w, r, st, tag)
}

// extendDeadlines lets a long-lived answer outlive the http.Server's read
// and write timeouts (cmdq serve's are 1 minute), for d from now. A server
// whose connections cannot say so keeps its timeouts.
func extendDeadlines(w http.ResponseWriter, d time.Duration) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(d))
	_ = rc.SetWriteDeadline(time.Now().Add(d))
}

// events answers GET /v1/commands/{id}/events: the events as JSON, or,
// for Accept: text/event-stream, as a stream.
func (s *server) events(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, RoleReader); !ok {
		return
	}
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if acceptsStream(r) {
		s.stream(w, r, id)
		return
	}
	evs, err := s.cfg.Client.Events(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if evs == nil {
		evs = []cmdq.Event{}
	}
	writeJSON(w, http.StatusOK, client.EventsResponse{ID: id, Events: evs})
}

// stream streams a command's events (each an SSE message whose id is the
// event's seq and whose data is the event) and, after them, its status
// (an SSE event "status"), again at every change, until the command is
// final (completed, poisoned, discarded or cancelled): then the stream ends. It
// starts after the request's Last-Event-ID; a reconnect to a final
// command with nothing more to send answers 204 (EventSource then stops
// reconnecting). A comment line is sent every StreamHeartbeat; the stream
// ends after MaxStream (the client reconnects with Last-Event-ID). A
// storage failure mid-stream ends it too.
func (s *server) stream(w http.ResponseWriter, r *http.Request, id string) {
	var after int64
	if v := strings.TrimSpace(r.Header.Get("Last-Event-ID")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeProblem(w, r, newProblem(client.ProblemInvalidRequest, "Last-Event-ID must be the seq of the last event received (a whole number), as the stream's ids are",
				client.FieldError{Pointer: "header:Last-Event-ID", Detail: "not a whole number"}))
			return
		}
		after = n
	}
	watch := s.cfg.Client.Watch(id)
	defer watch.Close()
	sctx, cancel := s.storageCtx(r)
	st, tag, changed, err := watch.Current(sctx)
	var evs []cmdq.Event
	if err == nil {
		evs, err = watch.Events(sctx, after)
	}
	cancel()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if st.State.Final() && len(evs) == 0 && after > 0 {
		w.WriteHeader(http.StatusNoContent) // all sent before: do not reconnect
		return
	}
	h := w.Header()
	h.Set("Content-Type", eventStream)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	sw := httpserve.NewSSEWriter(w, s.cfg.StreamHeartbeat+s.set.RequestTimeout) // the request is read; its client may stay long
	sw.Printf("retry: %d\n\n", StreamRetryMillis)
	sent := after
	send := func(evs []cmdq.Event, st cmdq.Status) bool {
		for _, e := range evs {
			sw.Message(strconv.FormatInt(e.Seq, 10), "", e)
			sent = max(sent, e.Seq)
		}
		sw.Message("", "status", st)
		return sw.Flush()
	}
	if !send(evs, st) || st.State.Final() {
		return
	}
	heartbeat := time.NewTicker(s.cfg.StreamHeartbeat)
	defer heartbeat.Stop()
	end := time.NewTimer(s.set.MaxStream)
	defer end.Stop()
	for {
		select {
		case <-changed:
		case <-heartbeat.C:
			sw.Printf(": keep-alive\n\n")
			if !sw.Flush() {
				return
			}
			continue
		case <-end.C:
			return // the client reconnects with Last-Event-ID
		case <-r.Context().Done():
			return
		}
		sctx, cancel := s.storageCtx(r)
		next, nextTag, ch, err := watch.Current(sctx)
		if err == nil && nextTag != tag {
			evs, err = watch.Events(sctx, sent)
		} else {
			evs = nil
		}
		cancel()
		if err != nil {
			logCmd(s.log.Warn().Err(err), id, st.TraceID).Msg("cmdq api: event stream ended by a storage failure; the client reconnects")
			return
		}
		changed = ch
		if nextTag == tag {
			continue // Client.InFlight changed, not the status
		}
		st, tag = next, nextTag
		if !send(evs, st) || st.State.Final() {
			return
		}
	}
}
