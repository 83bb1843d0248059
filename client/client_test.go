package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

func newClient(t *testing.T, url string, opts ...client.Option) *client.Remote {
	t.Helper()
	c, err := client.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewRejectsBadURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "localhost:8080", "ftp://x", "http://", "http://x/?a=1", "://"} {
		if _, err := client.New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

func TestIssueGetEvents(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	c := newClient(t, s.URL+"/") // a trailing slash is fine
	ctx := context.Background()

	res, err := c.Issue(ctx, client.IssueRequest{Type: "SendEmail", Params: json.RawMessage(`{"to":"a@example.com"}`), CorrelationID: "corr"})
	if err != nil {
		t.Fatal(err)
	}
	if cmdq.ValidateID(res.ID) != nil || res.Status != cmdq.StatePending || res.Existing {
		t.Fatalf("issue %+v", res)
	}
	st, err := c.Get(ctx, res.ID)
	if err != nil || st.ID != res.ID || st.Type != "SendEmail" || st.State != cmdq.StatePending || st.CorrelationID != "corr" {
		t.Fatalf("get %+v %v", st, err)
	}
	evs, err := c.Events(ctx, res.ID)
	if err != nil || len(evs) != 1 || evs[0].Kind != cmdq.EventCreated {
		t.Fatalf("events %+v %v", evs, err)
	}

	// Params as JSON (a json.RawMessage, a []byte from json.Marshal, other
	// spacing), an explicit ID, and the idempotent repeat.
	id := uuid.NewString()
	marshalled, err := json.Marshal(map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []json.RawMessage{json.RawMessage(`{"n":1}`), marshalled, json.RawMessage(`{ "n" : 1 }`)} {
		res, err := c.Issue(ctx, client.IssueRequest{Type: "Count", ID: id, Params: p})
		if err != nil || res.ID != id || res.Existing != (i > 0) {
			t.Fatalf("issue %d: %+v %v", i, res, err)
		}
	}
	_, err = c.Issue(ctx, client.IssueRequest{Type: "Count", ID: id, Params: json.RawMessage(`{"n":2}`)})
	var ce *client.Error
	if !errors.Is(err, client.ErrConflict) || !errors.As(err, &ce) || ce.Status != http.StatusConflict || ce.Detail == "" || len(ce.Errors) != 1 {
		t.Fatalf("conflict: %v", err)
	}
	_, err = c.Issue(ctx, client.IssueRequest{Type: "1bad", Params: json.RawMessage(`[1]`)})
	if !errors.Is(err, client.ErrInvalid) || !errors.As(err, &ce) || len(ce.Errors) != 2 || !strings.Contains(err.Error(), "#/params") {
		t.Fatalf("invalid: %v", err)
	}
	if _, err := c.Issue(ctx, client.IssueRequest{Type: "A", Params: json.RawMessage(`{"a":`)}); err == nil || errors.As(err, &ce) {
		t.Fatalf("params that are not JSON: %v, want an error before sending", err)
	}
	if _, err := c.Get(ctx, uuid.NewString()); !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := c.Get(ctx, "bad/../id"); !errors.Is(err, client.ErrInvalid) && !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("malformed id: %v", err)
	}
	if _, err := c.Events(ctx, "x"); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("malformed id: %v", err)
	}
}

func TestAuthErrors(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	ctx := context.Background()
	_, err := newClient(t, s.URL).Issue(ctx, client.IssueRequest{Type: "A"})
	if !errors.Is(err, client.ErrUnauthorized) || errors.Is(err, client.ErrForbidden) {
		t.Fatalf("no token: %v", err)
	}
	_, err = newClient(t, s.URL, client.WithToken(apitest.ReaderToken)).Issue(ctx, client.IssueRequest{Type: "A"})
	if !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("reader issuing: %v", err)
	}
	res, err := newClient(t, s.URL, client.WithToken(apitest.IssuerToken)).Issue(ctx, client.IssueRequest{Type: "A"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, s.URL, client.WithToken(apitest.OperatorToken), client.WithHTTPClient(&http.Client{Timeout: 5 * time.Second})).Get(ctx, res.ID); err != nil {
		t.Fatalf("operator reading: %v", err)
	}
}

func TestPoisonOperations(t *testing.T) {
	t.Parallel()
	poisonFlow(t, apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()}))
}

// poisonFlow issues three commands, poisons them and exercises every poison
// route through the client.
func poisonFlow(t *testing.T, s *apitest.Server) {
	c := newClient(t, s.URL, client.WithToken(apitest.AllToken))
	ctx := context.Background()
	var ids []string
	for _, typ := range []string{"A", "B", "A"} {
		res, err := c.Issue(ctx, client.IssueRequest{Type: typ})
		if err != nil {
			t.Fatal(err)
		}
		s.Poison(t, res.ID, "ceiling exceeded", "boom")
		ids = append(ids, res.ID)
	}
	page, err := c.ListPoison(ctx, cmdq.PoisonQuery{Type: "A", Limit: 1})
	if err != nil || len(page.Entries) != 1 || page.Entries[0].Type != "A" || page.Continuation == "" {
		t.Fatalf("page 1 %+v %v", page, err)
	}
	page2, err := c.ListPoison(ctx, cmdq.PoisonQuery{Type: "A", Limit: 1, Continuation: page.Continuation})
	if err != nil || len(page2.Entries) != 1 || page2.Continuation != "" || page2.Entries[0].CommandID == page.Entries[0].CommandID {
		t.Fatalf("page 2 %+v %v", page2, err)
	}
	if _, err := c.ListPoison(ctx, cmdq.PoisonQuery{Limit: 5000}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("bad limit: %v", err)
	}
	e, err := c.GetPoison(ctx, ids[1])
	if err != nil || e.CommandID != ids[1] || e.Type != "B" || e.Reason != "ceiling exceeded" {
		t.Fatalf("get poison %+v %v", e, err)
	}
	if err := c.Requeue(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Requeue(ctx, ids[0]); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("second requeue: %v", err)
	}
	if err := c.Discard(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetPoison(ctx, ids[1]); !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("discarded entry: %v", err)
	}
	if st, err := c.Wait(ctx, ids[1]); err != nil || st.State != cmdq.StateDiscarded {
		t.Fatalf("wait on discarded: %+v %v", st, err)
	}
	if err := c.Discard(ctx, uuid.NewString()); !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("unknown discard: %v", err)
	}
	// Operator actions are recorded with who did them.
	evs, err := c.Events(ctx, ids[0])
	if err != nil || evs[len(evs)-1].Kind != cmdq.EventRequeued || !strings.HasPrefix(evs[len(evs)-1].By, "api:token:") {
		t.Fatalf("events %+v %v", evs, err)
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	c := newClient(t, s.URL)
	res, err := c.Issue(context.Background(), client.IssueRequest{Type: "A"})
	if err != nil {
		t.Fatal(err)
	}
	// 2 s: the first read answers (pending) inside it on a loaded
	// machine; the long poll after it ends with the context.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.Wait(ctx, res.ID)
	if !errors.Is(err, context.DeadlineExceeded) || st.State != cmdq.StatePending {
		t.Fatalf("wait: %+v %v", st, err)
	}
	if _, err := c.Wait(context.Background(), uuid.NewString()); !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("wait on unknown: %v", err)
	}
}

func TestNonProblemError(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html>bad gateway</html>"))
	}))
	defer hs.Close()
	_, err := newClient(t, hs.URL).Get(context.Background(), uuid.NewString())
	var ce *client.Error
	if !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &ce) || ce.Status != 502 || ce.Title != "Bad Gateway" || !strings.Contains(ce.Detail, "bad gateway") {
		t.Fatalf("err %v", err)
	}
}

type greet struct {
	Name string `json:"name"`
}

func (greet) CommandType() string { return "Greet" }

type reject struct{}

func (reject) CommandType() string { return "Reject" }

// TestWithProcessor issues through the client and waits for a real processor
// (the server's own: same process, same embedded store, woken on enqueue).
func TestWithProcessor(t *testing.T) {
	t.Parallel()
	greeted := make(chan string, 1)
	s := apitest.Start(t, apitest.Options{Setup: func(c *cmdq.Client) error {
		return errors.Join(
			cmdq.Register(c, func(ctx context.Context, g greet, run *cmdq.Attempt) error {
				if err := run.CompleteStep(ctx, 1, "looked up "+g.Name); err != nil {
					return err
				}
				greeted <- g.Name
				return nil
			}),
			cmdq.Register(c, func(context.Context, reject, *cmdq.Attempt) error {
				return cmdq.Permanent(errors.New("rejected on purpose"))
			}))
	}})
	c := newClient(t, s.URL)

	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	params, err := json.Marshal(greet{Name: "Ada"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Issue(wctx, client.IssueRequest{Type: "Greet", Params: params})
	if err != nil {
		t.Fatal(err)
	}
	final, err := c.Wait(wctx, res.ID)
	if err != nil || final.State != cmdq.StateCompleted || final.Step != 1 || final.Attempts != 1 {
		t.Fatalf("wait: %+v %v", final, err)
	}
	if got := <-greeted; got != "Ada" {
		t.Fatalf("handler got %q", got)
	}
	evs, err := c.Events(wctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, string(e.Kind))
	}
	if strings.Join(kinds, ",") != "created,started,step_completed,completed" {
		t.Fatalf("events %v", kinds)
	}

	// The registry makes the API refuse what the handler could not decode.
	if _, err := c.Issue(wctx, client.IssueRequest{Type: "Greet", Params: json.RawMessage(`{"name":1}`)}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("undecodable params: %v", err)
	}
	// A permanent failure ends poisoned; the poison entry is visible.
	res, err = c.Issue(wctx, client.IssueRequest{Type: "Reject"})
	if err != nil {
		t.Fatal(err)
	}
	final, err = c.Wait(wctx, res.ID)
	if err != nil || final.State != cmdq.StatePoisoned || !strings.Contains(final.LastError, "rejected on purpose") {
		t.Fatalf("wait: %+v %v", final, err)
	}
	e, err := c.GetPoison(wctx, res.ID)
	if err != nil || e.Type != "Reject" {
		t.Fatalf("poison entry %+v %v", e, err)
	}
}

// TestTooManyFailedAuthentications: after a burst of wrong tokens the
// server answers 429; the client reports ErrUnavailable with the server's
// Retry-After.
func TestTooManyFailedAuthentications(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), AuthFailureBurst: 1})
	c := newClient(t, s.URL, client.WithToken("not-a-configured-token-0123"))
	if _, err := c.ListPoison(context.Background(), cmdq.PoisonQuery{}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("first wrong token: %v", err)
	}
	// Over the burst the address is refused for 1 s, doubling with each
	// further failure: keep trying until a refusal (at once, unless the
	// machine stalls for longer than the refusal).
	var err error
	for range 10 {
		_, err = c.ListPoison(context.Background(), cmdq.PoisonQuery{})
		if !errors.Is(err, client.ErrUnauthorized) {
			break
		}
	}
	var ce *client.Error
	if !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &ce) || ce.Status != http.StatusTooManyRequests || ce.RetryAfter <= 0 {
		t.Fatalf("after the burst: %v (%+v), want 429 ErrUnavailable with RetryAfter", err, ce)
	}
}

// TestIssueSendsTraceContext: Issue in a context with a span sends its
// W3C trace context (traceparent, tracestate): the server stores the
// command in that trace (Status.TraceID); without a span, none is sent.
func TestIssueSendsTraceContext(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	c := newClient(t, s.URL)
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	res, err := c.Issue(ctx, client.IssueRequest{Type: "SendEmail"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := c.Get(ctx, res.ID); err != nil || st.TraceID != traceID.String() {
		t.Fatalf("get %+v %v: want trace ID %s", st, err, traceID)
	}
	plain, err := c.Issue(context.Background(), client.IssueRequest{Type: "SendEmail"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := c.Get(ctx, plain.ID); err != nil || st.TraceID != "" {
		t.Fatalf("get %+v %v: want no trace", st, err)
	}
}
