package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// TestParamsTooLargeDetail: the 413 for oversized params is one clear
// sentence: the size, the limit, what to do (it read "…pass a…; store large
// data elsewhere and pass a reference").
func TestParamsTooLargeDetail(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	params := `{"blob":"` + strings.Repeat("x", cmdq.MaxParamsBytes) + `"}`
	p := problem(t, post(t, s.URL+"/v1/commands", `{"type":"billing.ImportLedgerFromArchive","params":`+params+`}`), http.StatusRequestEntityTooLarge, client.ProblemTooLarge)
	want := fmt.Sprintf("The params of billing.ImportLedgerFromArchive are %d bytes of JSON, over the %d-byte limit: store large data elsewhere (a blob, a file) and pass a reference to it in the params.", len(params), cmdq.MaxParamsBytes)
	if p.Detail != want {
		t.Fatalf("detail %q\nwant   %q", p.Detail, want)
	}
	if strings.Count(p.Detail, "reference") != 1 || strings.Contains(p.Detail, "…") {
		t.Fatalf("detail %q repeats itself or is cut", p.Detail)
	}
}

// sleepCmd is a command whose params have a field "ms", as demo.sleep's.
type sleepCmd struct {
	Ms int `json:"ms"`
}

func (sleepCmd) CommandType() string { return "test.sleep" }

// TestParamsKeysMatchExactly: a params key is the field only when spelled
// exactly: encoding/json matched "mſ" (long s, which folds to s) and "MS"
// to the field "ms", so a handler ran with what the stored JSON does not
// say. The API refuses such params for a known type (400 naming the key),
// and a handler never sees them: a command stored by a process that does
// not know the type is poisoned (its params do not decode), not run.
func TestParamsKeysMatchExactly(t *testing.T) {
	t.Parallel()
	seen := make(chan int, 10)
	log, opts := other(t)
	_ = log
	store := opts.Store
	opts.Setup = func(c *cmdq.Client) error {
		return cmdq.Register(c, func(ctx context.Context, cmd sleepCmd, run *cmdq.Attempt) error {
			seen <- cmd.Ms
			return nil
		})
	}
	s := apitest.Start(t, opts)
	for _, key := range []string{"mſ", "MS", "Ms"} {
		p := problem(t, post(t, s.URL+"/v1/commands", `{"type":"test.sleep","params":{"`+key+`":3000}}`), http.StatusBadRequest, client.ProblemInvalidRequest)
		if len(p.Errors) != 1 || p.Errors[0].Pointer != "#/params" || !strings.Contains(p.Detail, key) || !strings.Contains(p.Detail, `"ms"`) {
			t.Fatalf("params {%q:3000}: problem %+v, want one naming the key and the field \"ms\"", key, p)
		}
	}
	// Another process that does not know the type stores one.
	issuer, err := cmdq.New(store, cmdq.Config{ReconcileInterval: cmdq.NoReconcile})
	if err != nil {
		t.Fatal(err)
	}
	res, err := issuer.IssueRaw(t.Context(), cmdq.Raw{Type: "test.sleep", Params: json.RawMessage(`{"mſ":3000}`)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := s.Client.Wait(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != cmdq.StatePoisoned || !strings.Contains(st.LastError, "mſ") {
		t.Fatalf("status %+v, want poisoned with an error naming the key", st)
	}
	select {
	case ms := <-seen:
		t.Fatalf("the handler ran with ms=%d", ms)
	default:
	}
	// Spelled exactly, it runs.
	ok := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"test.sleep","params":{"ms":3000}}`), http.StatusAccepted)
	if st, err := s.Client.Wait(ctx, ok.ID); err != nil || st.State != cmdq.StateCompleted || <-seen != 3000 {
		t.Fatalf("exact key: %+v %v", st, err)
	}
}

// TestCorrelationIDInvalidUTF8: bytes that are not UTF-8 in correlationId
// (or any string of the body) are refused with 400, as they are in params,
// instead of being stored replaced by U+FFFD.
func TestCorrelationIDInvalidUTF8(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	p := problem(t, post(t, s.URL+"/v1/commands", "{\"type\":\"A\",\"correlationId\":\"order-\xff\xfe-1\"}"), http.StatusBadRequest, client.ProblemInvalidRequest)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "#/correlationId" || !strings.Contains(p.Detail, "UTF-8") {
		t.Fatalf("problem %+v, want one naming #/correlationId and UTF-8", p)
	}
	p = problem(t, post(t, s.URL+"/v1/commands", "{\"type\":\"A\",\"params\":{\"k\xff\":1}}"), http.StatusBadRequest, client.ProblemInvalidRequest)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "#/params" {
		t.Fatalf("problem %+v, want one naming #/params", p)
	}
	if n := s.QueueCount(t, ""); n != 0 {
		t.Fatalf("%d commands queued", n)
	}
}

// TestContentEncodingRefused: a body labelled with a Content-Encoding
// other than identity is refused with 415 (it was read as plain JSON).
func TestContentEncodingRefused(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	for _, enc := range []string{"gzip", "br, identity", "deflate"} {
		req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/commands", strings.NewReader(`{"type":"A"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", enc)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		p := problem(t, resp{code: r.StatusCode, header: r.Header, body: body}, http.StatusUnsupportedMediaType, client.ProblemUnsupportedMediaType)
		if !strings.Contains(p.Detail, "Content-Encoding") || r.Header.Get("Accept-Encoding") != "identity" {
			t.Fatalf("Content-Encoding %s: %+v, Accept-Encoding %q", enc, p, r.Header.Get("Accept-Encoding"))
		}
	}
	for _, enc := range []string{"identity", "IDENTITY"} {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/commands", strings.NewReader(`{"type":"A"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", enc)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = r.Body.Close()
		if r.StatusCode != http.StatusAccepted {
			t.Fatalf("Content-Encoding %s: %d", enc, r.StatusCode)
		}
	}
	if n := s.QueueCount(t, ""); n != 2 {
		t.Fatalf("%d commands queued, want 2", n)
	}
}

// TestEventsAcceptQValues: the events route honours the q-values of
// Accept: text/event-stream with q=0 (not acceptable) or below
// application/json gets JSON; preferred, a stream.
func TestEventsAcceptQValues(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	id := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"A"}`), http.StatusAccepted).ID
	s.Poison(t, id, "ceiling exceeded", "boom") // final: a stream ends by itself
	for accept, want := range map[string]string{
		"text/event-stream;q=0, application/json":   "application/json",
		"text/event-stream; q=0":                    "application/json",
		"text/event-stream;q=0.5, application/json": "application/json",
		"application/json;q=0.5, text/event-stream": "text/event-stream",
		"text/event-stream":                         "text/event-stream",
		"application/json, text/event-stream;q=0.9": "application/json",
		"*/*":                       "application/json",
		"text/event-stream;q=0.001": "text/event-stream",
		"application/json;q=0, text/event-stream;q=1": "text/event-stream",
	} {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/v1/commands/"+id+"/events", nil)
		req.Header.Set("Accept", accept)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, want) {
			t.Errorf("Accept %q: %d %s, want %s", accept, r.StatusCode, ct, want)
		}
	}
}

// TestPoisonEntryHasParams: GET /v1/poison/{id} carries the poisoned
// command's params, so that an operator (cmdq poison show) sees what it was
// asked to do.
func TestPoisonEntryHasParams(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	id := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"A","params":{"to":"ada@example.com","n":[1,2]}}`), http.StatusAccepted).ID
	s.Poison(t, id, "ceiling exceeded", "boom")
	e := decode[client.PoisonEntryResponse](t, send(t, http.MethodGet, s.URL+"/v1/poison/"+id, "", "", ""), http.StatusOK)
	if e.CommandID != id || string(e.Params) != `{"to":"ada@example.com","n":[1,2]}` {
		t.Fatalf("entry %+v params %s", e.PoisonEntry, e.Params)
	}
}
