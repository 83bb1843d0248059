package httpserve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// EventStream is the media type of an event stream (server-sent events).
const EventStream = "text/event-stream"

// SSEWriter writes server-sent events, extending the connection's write
// deadline before each write.
type SSEWriter struct {
	w     io.Writer
	rc    *http.ResponseController
	grace time.Duration
	err   error
}

// NewSSEWriter returns an SSEWriter on w that gives each write grace
// before the connection's write deadline. It lifts the read deadline: the
// request is read, and its client may stay long.
func NewSSEWriter(w http.ResponseWriter, grace time.Duration) *SSEWriter {
	sw := &SSEWriter{w: w, rc: http.NewResponseController(w), grace: grace}
	_ = sw.rc.SetReadDeadline(time.Time{})
	return sw
}

// Printf writes text (the caller ends each message with a blank line).
func (sw *SSEWriter) Printf(format string, a ...any) {
	if sw.err != nil {
		return
	}
	_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.grace))
	_, sw.err = fmt.Fprintf(sw.w, format, a...)
}

// Message writes one SSE message: an optional id and event name, and v as
// one line of JSON data.
func (sw *SSEWriter) Message(id, event string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		sw.err = err
		return
	}
	if id != "" {
		sw.Printf("id: %s\n", id)
	}
	if event != "" {
		sw.Printf("event: %s\n", event)
	}
	sw.Printf("data: %s\n\n", b)
}

// Flush sends what was written; false once the client is gone.
func (sw *SSEWriter) Flush() bool {
	if sw.err == nil {
		sw.err = sw.rc.Flush()
	}
	return sw.err == nil
}
