package apitest

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
)

// SSEMessage is one message of an event stream.
type SSEMessage struct {
	// ID, Event and Data are the message's fields ("" when absent).
	ID, Event, Data string
	// Comment: the message had a comment line (a heartbeat).
	Comment bool
}

// SSE opens the event stream at url (Accept: text/event-stream, with
// Last-Event-ID lastID when set and headers as name, value pairs) and
// reads its messages into a channel, closed at its end (or ctx's). A
// failed request is reported with t.Errorf and gives an empty response and
// a closed channel.
func SSE(t testing.TB, ctx context.Context, url, lastID string, headers ...string) (*http.Response, <-chan SSEMessage) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	out := make(chan SSEMessage, 100)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		// Errorf, not Fatal: streams are read from other goroutines too.
		t.Errorf("GET %s: %v", url, err)
		close(out)
		return &http.Response{}, out
	}
	go func() {
		defer close(out)
		defer r.Body.Close()
		br := bufio.NewReader(r.Body)
		var m SSEMessage
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				if m != (SSEMessage{}) {
					out <- m
				}
				m = SSEMessage{}
			case strings.HasPrefix(line, ":"):
				m.Comment = true
			case strings.HasPrefix(line, "id: "):
				m.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				m.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				m.Data = line[6:]
			}
		}
	}()
	return r, out
}

// NextSSE returns the stream's next message that is not a comment or the
// retry hint, failing when it ends first.
func NextSSE(t testing.TB, ms <-chan SSEMessage) SSEMessage {
	t.Helper()
	for m := range ms {
		if !m.Comment && (m.Data != "" || m.Event != "") {
			return m
		}
	}
	t.Fatal("the stream ended")
	return SSEMessage{}
}
