package cmdq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// tracing is a real SDK TracerProvider whose spans go, as each ends, to an
// in-memory exporter.
type tracing struct {
	tp  *sdktrace.TracerProvider
	exp *tracetest.InMemoryExporter
}

func newTracing(t *testing.T) tracing {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tracing{tp, exp}
}

// named returns the ended spans called name, in the order they ended.
func (tr tracing) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range tr.exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t *testing.T, s tracetest.SpanStub, key string, want any) {
	t.Helper()
	v, ok := attrOf(s, key)
	if !ok {
		t.Errorf("span %s has no attribute %s (has %v)", s.Name, key, s.Attributes)
		return
	}
	if got := v.AsInterface(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("span %s: %s = %v, want %v", s.Name, key, got, want)
	}
}

// flaky fails its first attempt and completes on the second, which starts
// a span of its own in the handler's context.
type flaky struct {
	N int `json:"n"`
}

func (flaky) CommandType() string { return "trace.flaky" }

// registerFlaky registers flaky's handler; spans the handler starts come
// from tp.
func registerFlaky(t *testing.T, c *cmdq.Client, tp trace.TracerProvider) {
	t.Helper()
	err := cmdq.RegisterWith(c, func(ctx context.Context, cmd flaky, run *cmdq.Attempt) error {
		if run.Number() == 1 {
			return errors.New("flaky: the first attempt fails")
		}
		_, span := tp.Tracer("handler").Start(ctx, "handler work")
		span.End()
		return nil
	}, cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: 20 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: cmdq.NoJitter}})
	if err != nil {
		t.Fatal(err)
	}
}

// checkCommandTrace asserts the trace of command id, issued under the span
// parent (in trace traceID): one trace; the issue span, a child of
// parent; two attempt spans, children of the issue span and linked to
// it, with their attempt numbers, outcomes and the messaging attributes
// (the first failed: an error recorded and status Error); the handler's
// span nested in the second attempt.
func checkCommandTrace(t *testing.T, tr tracing, id, corr string, traceID trace.TraceID, parent trace.SpanID) {
	t.Helper()
	for _, s := range tr.exp.GetSpans() {
		if s.SpanContext.TraceID() != traceID {
			t.Errorf("span %s is in trace %s, want every span in %s", s.Name, s.SpanContext.TraceID(), traceID)
		}
	}
	issues := tr.named("cmdq issue trace.flaky")
	if len(issues) != 1 {
		t.Fatalf("%d issue spans, want 1: %v", len(issues), tr.exp.GetSpans())
	}
	iss := issues[0]
	if iss.SpanKind != trace.SpanKindProducer || iss.Parent.SpanID() != parent {
		t.Errorf("issue span: kind %v parent %s, want producer, child of %s", iss.SpanKind, iss.Parent.SpanID(), parent)
	}
	wantAttr(t, iss, "messaging.message.id", id)
	wantAttr(t, iss, "messaging.destination.name", "commands")
	wantAttr(t, iss, "messaging.message.conversation_id", corr) // the correlation ID: the issue span's
	attempts := tr.named("cmdq process trace.flaky")
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2: %v", len(attempts), tr.exp.GetSpans())
	}
	for i, a := range attempts {
		if a.SpanKind != trace.SpanKindConsumer {
			t.Errorf("attempt %d: kind %v, want consumer", i+1, a.SpanKind)
		}
		if a.Parent.SpanID() != iss.SpanContext.SpanID() {
			t.Errorf("attempt %d: parent %s, want the issue span %s", i+1, a.Parent.SpanID(), iss.SpanContext.SpanID())
		}
		if len(a.Links) != 1 || a.Links[0].SpanContext.SpanID() != iss.SpanContext.SpanID() {
			t.Errorf("attempt %d: links %v, want one to the issue span", i+1, a.Links)
		}
		wantAttr(t, a, "cmdq.attempt", i+1)
		wantAttr(t, a, "messaging.system", "cmdq")
		wantAttr(t, a, "messaging.destination.name", "commands")
		wantAttr(t, a, "messaging.operation.type", "process")
		wantAttr(t, a, "messaging.message.id", id)
		wantAttr(t, a, "cmdq.command.type", "trace.flaky")
		if len(a.Attributes) > 8 {
			t.Errorf("attempt %d: %d attributes %v, want at most 8 (the SDK's cheap de-duplication)", i+1, len(a.Attributes), a.Attributes)
		}
	}
	wantAttr(t, attempts[0], "cmdq.outcome", cmdq.OutcomeRetrying)
	if attempts[0].Status.Code != codes.Error || !strings.Contains(attempts[0].Status.Description, "the first attempt fails") {
		t.Errorf("attempt 1: status %+v, want Error with the handler's error", attempts[0].Status)
	}
	if len(attempts[0].Events) == 0 || attempts[0].Events[0].Name != "exception" {
		t.Errorf("attempt 1: events %v, want the error recorded", attempts[0].Events)
	}
	wantAttr(t, attempts[1], "cmdq.outcome", cmdq.OutcomeCompleted)
	if attempts[1].Status.Code == codes.Error {
		t.Errorf("attempt 2: status %+v, want no error", attempts[1].Status)
	}
	work := tr.named("handler work")
	if len(work) != 1 || work[0].Parent.SpanID() != attempts[1].SpanContext.SpanID() {
		t.Fatalf("handler spans %v, want one, a child of the second attempt %s", work, attempts[1].SpanContext.SpanID())
	}
}

// TestTraceIssueAndAttempts: a command issued inside a span, failing once
// and then completing, is one trace: the caller's span, the issue span,
// two attempt spans (children of the issue span) and the handler's own
// span nested in the second attempt (checkCommandTrace); its status
// names the trace. Both stores.
func TestTraceIssueAndAttempts(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		tr := newTracing(t)
		cfg := fast()
		cfg.TracerProvider = tr.tp
		c := newClient(t, s, cfg)
		registerFlaky(t, c, tr.tp)
		sctx, root := tr.tp.Tracer("web").Start(ctx, "POST /orders")
		res, err := c.Issue(sctx, flaky{N: 1}, cmdq.CorrelationID("order-41"))
		root.End()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := c.Wait(ctx, res.ID)
		if err != nil || st.State != cmdq.StateCompleted || st.Attempts != 2 {
			t.Fatalf("wait: %+v %v, want completed in 2 attempts", st, err)
		}
		if st.TraceID != root.SpanContext().TraceID().String() {
			t.Errorf("status trace ID %q, want %s", st.TraceID, root.SpanContext().TraceID())
		}
		// Stop returns once every handler returned and its attempt ended:
		// every span is exported.
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		checkCommandTrace(t, tr, res.ID, "order-41", root.SpanContext().TraceID(), root.SpanContext().SpanID())
	})
}

// TestTraceHTTP: the same through the HTTP API, whose caller sends its
// trace context as a W3C traceparent header: the issue span is a child of
// the caller's span, and the rest as in TestTraceIssueAndAttempts. Both
// stores.
func TestTraceHTTP(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		tr := newTracing(t)
		cfg := fast()
		cfg.TracerProvider = tr.tp
		srv := apitest.Start(t, apitest.Options{Store: s.st, Prefix: s.prefix, Config: cfg, Setup: func(c *cmdq.Client) error {
			registerFlaky(t, c, tr.tp)
			return nil
		}})
		traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
		parent, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/commands", bytes.NewReader([]byte(`{"type":"trace.flaky","params":{"n":2},"correlationId":"order-42"}`)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", "00-"+traceID.String()+"-"+parent.String()+"-01")
		req.Header.Set("tracestate", "vendor=opaque")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusAccepted || loc == "" {
			t.Fatalf("POST /v1/commands: %s, Location %q", resp.Status, loc)
		}
		id := loc[strings.LastIndex(loc, "/")+1:]
		st, err := srv.Client.Wait(ctx, id)
		if err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("wait: %+v %v", st, err)
		}
		if st.TraceID != traceID.String() {
			t.Errorf("status trace ID %q, want %s", st.TraceID, traceID)
		}
		if err := srv.Client.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		checkCommandTrace(t, tr, id, "order-42", traceID, parent)
		if a := tr.named("cmdq process trace.flaky"); len(a) > 0 && a[0].SpanContext.TraceState().Get("vendor") != "opaque" {
			t.Errorf("attempt span trace state %q, want the caller's vendor=opaque", a[0].SpanContext.TraceState())
		}
	})
}

// TestTraceLinkOnly: with Config.TraceLinkOnly each attempt starts a trace
// of its own, linked to the issuing span; without a trace at issue, an
// attempt span is a root with no link. The handler's ctx carries the
// attempt span either way.
func TestTraceLinkOnly(t *testing.T) {
	t.Parallel()
	s := openStore(t, "embedded")
	ctx := ctxT(t)
	tr := newTracing(t)
	cfg := fast()
	cfg.TracerProvider, cfg.TraceLinkOnly = tr.tp, true
	c := newClient(t, s, cfg)
	var inHandler atomic.Value
	if err := cmdq.Register(c, func(ctx context.Context, g greet, run *cmdq.Attempt) error {
		inHandler.Store(trace.SpanContextFromContext(ctx))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sctx, root := tr.tp.Tracer("web").Start(ctx, "request")
	linked, err := c.Issue(sctx, greet{Name: "linked"})
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, linked.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	att := tr.named("cmdq process greet")
	iss := tr.named("cmdq issue greet")
	if len(att) != 1 || len(iss) != 1 {
		t.Fatalf("spans %v", tr.exp.GetSpans())
	}
	if att[0].SpanContext.TraceID() == root.SpanContext().TraceID() || att[0].Parent.IsValid() {
		t.Errorf("attempt span in trace %s with parent %v, want a new root", att[0].SpanContext.TraceID(), att[0].Parent)
	}
	if len(att[0].Links) != 1 || att[0].Links[0].SpanContext.SpanID() != iss[0].SpanContext.SpanID() {
		t.Errorf("attempt links %v, want the issue span", att[0].Links)
	}
	if got, _ := inHandler.Load().(trace.SpanContext); got.SpanID() != att[0].SpanContext.SpanID() {
		t.Errorf("handler ctx span %s, want the attempt span %s", got.SpanID(), att[0].SpanContext.SpanID())
	}
}
