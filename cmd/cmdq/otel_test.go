package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a small OTLP/HTTP trace receiver: it decodes the
// protobuf export requests posted to /v1/traces and keeps their spans,
// and counts every connection it accepts.
type otlpReceiver struct {
	URL   string
	conns atomic.Int64

	mu    sync.Mutex
	spans []receivedSpan
}

// receivedSpan is one exported span with its resource's service name
// and instance ID.
type receivedSpan struct {
	service, instance string
	span              *tracepb.Span
}

// startReceiver starts a receiver on addr ("127.0.0.1:0" for any port),
// closed when the test ends.
func startReceiver(t *testing.T, addr string) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("OTLP receiver: listen on %s: %v", addr, err)
	}
	r := &otlpReceiver{URL: "http://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.export)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			r.conns.Add(1)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

func (r *otlpReceiver) export(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &in); err != nil {
		http.Error(w, "not an OTLP protobuf export request: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range in.ResourceSpans {
		service, instance := "", ""
		for _, kv := range rs.GetResource().GetAttributes() {
			switch kv.Key {
			case "service.name":
				service = kv.GetValue().GetStringValue()
			case "service.instance.id":
				instance = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, receivedSpan{service, instance, s})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// received returns the spans received so far.
func (r *otlpReceiver) received() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.spans...)
}

func spanAttr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

// TestTracingOn: the OTEL_* variables that turn span export on and off,
// and the settings cmdq refuses with a clear error.
func TestTracingOn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		on   bool
		fail string
	}{
		{env: nil},
		{env: map[string]string{"OTEL_SERVICE_NAME": "orders", "OTEL_RESOURCE_ATTRIBUTES": "a=b", "OTEL_TRACES_SAMPLER": "always_on"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, fail: "otlp (OTLP over HTTP) or not at all"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, fail: "set it to http/protobuf"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true},
	} {
		on, err := tracingOn(func(k string) string { return c.env[k] })
		switch {
		case c.fail != "":
			if err == nil || !strings.Contains(err.Error(), c.fail) {
				t.Errorf("%v: error %v, want one saying %q", c.env, err, c.fail)
			}
		case err != nil || on != c.on:
			t.Errorf("%v: on %v err %v, want on %v", c.env, on, err, c.on)
		}
	}
}

// issueTraced issues demo.fail {"times":1} (fails once, then completes)
// through serve's API with a traceparent header and returns its ID.
func issueTraced(t *testing.T, base, traceID, parentID string) string {
	t.Helper()
	r := do(t, http.MethodPost, base+"/v1/commands", "", `{"type":"demo.fail","params":{"times":1}}`,
		"traceparent", "00-"+traceID+"-"+parentID+"-01")
	if r.code != http.StatusAccepted {
		t.Fatalf("POST /v1/commands: %d %s", r.code, r.body)
	}
	var res struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(r.body), &res); err != nil || res.ID == "" {
		t.Fatalf("POST /v1/commands: %v in %s", err, r.body)
	}
	return res.ID
}

// TestServeExportsSpans: `cmdq serve` with OTEL_EXPORTER_OTLP_ENDPOINT
// pointing at an OTLP/HTTP receiver exports the spans of a command issued
// through its API with a traceparent header that fails once and then
// completes: in the caller's trace, the issue span (a child of the
// caller's span) and two attempt spans (its children) with their attempt
// numbers and outcomes, under the service name OTEL_SERVICE_NAME gives
// and the worker's name (--worker-id) as service.instance.id. The last
// spans are flushed when serve stops.
func TestServeExportsSpans(t *testing.T) {
	t.Parallel()
	rcv := startReceiver(t, "127.0.0.1:0")
	srv := startServe(t, serveOpts{args: []string{"--worker-id", "otlp-worker"}, env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.URL, "OTEL_SERVICE_NAME=cmdq-otlp-test"}})
	if !strings.Contains(srv.stderr.String(), "exporting OpenTelemetry spans over OTLP/HTTP") {
		t.Errorf("serve does not say it exports spans:\n%s", srv.stderr.String())
	}
	const traceID, parentID = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
	id := issueTraced(t, srv.URL, traceID, parentID)
	waitState(t, srv.URL, "", id, "completed", 60*time.Second)
	if code := srv.stop(t, 30*time.Second); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, srv.stderr.String())
	}
	var issue *tracepb.Span
	var attempts []*tracepb.Span
	for _, r := range rcv.received() {
		if hex.EncodeToString(r.span.TraceId) != traceID {
			continue
		}
		if r.service != "cmdq-otlp-test" || r.instance != "otlp-worker" {
			t.Errorf("span %s from service %q instance %q, want cmdq-otlp-test, otlp-worker", r.span.Name, r.service, r.instance)
		}
		switch r.span.Name {
		case "cmdq issue demo.fail":
			issue = r.span
		case "cmdq process demo.fail":
			attempts = append(attempts, r.span)
		}
	}
	if issue == nil || len(attempts) != 2 {
		t.Fatalf("trace %s: issue span %v and %d attempt spans, want 1 and 2 (received %d spans)", traceID, issue, len(attempts), len(rcv.received()))
	}
	if hex.EncodeToString(issue.ParentSpanId) != parentID || issue.Kind != tracepb.Span_SPAN_KIND_PRODUCER {
		t.Errorf("issue span: parent %x kind %v, want %s, producer", issue.ParentSpanId, issue.Kind, parentID)
	}
	outcomes := map[int64]string{}
	for _, a := range attempts {
		if !bytes.Equal(a.ParentSpanId, issue.SpanId) || a.Kind != tracepb.Span_SPAN_KIND_CONSUMER {
			t.Errorf("attempt span: parent %x kind %v, want the issue span %x, consumer", a.ParentSpanId, a.Kind, issue.SpanId)
		}
		if v := spanAttr(a, "messaging.message.id"); v.GetStringValue() != id {
			t.Errorf("attempt span: messaging.message.id %v, want %s", v, id)
		}
		outcomes[spanAttr(a, "cmdq.attempt").GetIntValue()] = spanAttr(a, "cmdq.outcome").GetStringValue()
	}
	if outcomes[1] != "retrying" || outcomes[2] != "completed" {
		t.Errorf("attempt outcomes %v, want 1: retrying, 2: completed", outcomes)
	}
}

// TestServeWithoutOTELExportsNothing: without the OTLP variables (other
// OTEL_* settings do not turn it on) serve sets up no exporter: a receiver
// on the SDK's default endpoint (127.0.0.1:4318), where an exporter
// would send, is never connected to, not even when serve stops (which
// would flush one).
func TestServeWithoutOTELExportsNothing(t *testing.T) {
	t.Parallel()
	// Another test binary on the machine (a second checkout's tests) may
	// hold the port for a while: wait for it, up to 2 minutes.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		ln, err := net.Listen("tcp", "127.0.0.1:4318")
		if err == nil {
			_ = ln.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test needs the OTLP/HTTP default port 127.0.0.1:4318 free (it stands in for a collector there): %v", err)
		}
		time.Sleep(200 * time.Millisecond) // polling for the port to be free
	}
	rcv := startReceiver(t, "127.0.0.1:4318")
	srv := startServe(t, serveOpts{env: []string{"OTEL_SERVICE_NAME=cmdq-off", "OTEL_BSP_SCHEDULE_DELAY=10"}})
	id := issueTraced(t, srv.URL, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
	waitState(t, srv.URL, "", id, "completed", 60*time.Second)
	// The trace context is stored all the same (and shown with the status).
	if r := do(t, http.MethodGet, srv.URL+"/v1/commands/"+id, "", ""); !strings.Contains(r.body, `"traceId":"0af7651916cd43dd8448eb211c80319c"`) {
		t.Errorf("status %s: want the issuing trace ID", r.body)
	}
	if code := srv.stop(t, 30*time.Second); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, srv.stderr.String())
	}
	if n := rcv.conns.Load(); n != 0 || len(rcv.received()) != 0 {
		t.Fatalf("serve without OTEL_EXPORTER_OTLP_ENDPOINT connected %d times to the default OTLP endpoint and sent %d spans", n, len(rcv.received()))
	}
	if strings.Contains(srv.stderr.String(), "exporting OpenTelemetry spans") {
		t.Errorf("serve says it exports spans without the variables:\n%s", srv.stderr.String())
	}
}
