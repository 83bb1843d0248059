package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/metrics"
)

func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	for range 2 {
		decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"SendEmail"}`), http.StatusAccepted)
	}
	decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"Other"}`), http.StatusAccepted)

	r := send(t, http.MethodGet, s.URL+"/metrics", "", "", "")
	if r.code != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %s", r.code, r.header.Get("Content-Type"))
	}
	body := string(r.body)
	for _, want := range []string{
		`cmdq_commands_issued_total{type="SendEmail"} 2`,
		`cmdq_commands_issued_total{type="Other"} 1`,
		// Every issue is one table batch and one enqueue.
		`cmdq_storage_operations_total{op="table_batch",result="ok"} 3`,
		`cmdq_storage_operations_total{op="queue_enqueue",result="ok"} 3`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

func TestQueueDepthSampled(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	for range 3 {
		decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"A"}`), http.StatusAccepted)
	}
	q, err := s.Client.StorageQueue(context.Background(), cmdq.DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}
	s.Metrics.WatchQueue(q)
	for range 5 { // a scrape storm
		r := send(t, http.MethodGet, s.URL+"/metrics", "", "", "")
		if !strings.Contains(string(r.body), `cmdq_queue_depth{queue="cmdq-commands"} 3`) {
			t.Fatalf("depth missing:\n%s", r.body)
		}
	}
	if got := apitest.StorageOps(t, s.Prom, "queue_count"); got != 1 {
		t.Fatalf("ApproximateCount called %v times for 5 scrapes within the TTL, want 1", got)
	}
}

// seriesOf counts the series of metric name in a /metrics body.
func seriesOf(body, name string) int {
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, name+"{") {
			n++
		}
	}
	return n
}

// TestTypeLabelsBounded: an issuer sending 200 distinct unknown type names
// (a server without a registry, like serve --no-demo) must not create 200
// series. With LabelTypes, only those types and "other" appear; before it,
// at most DefaultMaxTypeLabels names get their own label.
func TestTypeLabelsBounded(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	s.Metrics.LabelTypes("SendEmail")
	for i := range 200 {
		decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", fmt.Sprintf(`{"type":"junk%d"}`, i)), http.StatusAccepted)
	}
	decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"SendEmail"}`), http.StatusAccepted)
	body := string(send(t, http.MethodGet, s.URL+"/metrics", "", "", "").body)
	if n := seriesOf(body, "cmdq_commands_issued_total"); n != 2 {
		t.Fatalf("cmdq_commands_issued_total has %d series, want 2 (SendEmail, other):\n%s", n, body)
	}
	for _, want := range []string{`cmdq_commands_issued_total{type="other"} 200`, `cmdq_commands_issued_total{type="SendEmail"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	// Without LabelTypes: bounded by DefaultMaxTypeLabels, every type counted.
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * metrics.DefaultMaxTypeLabels {
		m.Observe(cmdq.Observation{Kind: cmdq.ObservedCompleted, Type: fmt.Sprintf("t%d", i)})
		m.Observe(cmdq.Observation{Kind: cmdq.ObservedPoisoned, Type: fmt.Sprintf("t%d", i)})
	}
	m.Observe(cmdq.Observation{Kind: cmdq.ObservedPoisoned})
	if n := testutil.CollectAndCount(reg, "cmdq_commands_completed_total"); n != metrics.DefaultMaxTypeLabels+1 {
		t.Fatalf("completed has %d series, want %d", n, metrics.DefaultMaxTypeLabels+1)
	}
	if got := counterValue(t, reg, "cmdq_commands_completed_total", metrics.OtherType); got != 2*metrics.DefaultMaxTypeLabels {
		t.Fatalf("other counted %v, want %d", got, 2*metrics.DefaultMaxTypeLabels)
	}
	if n := testutil.CollectAndCount(reg, "cmdq_commands_poisoned_total"); n != metrics.DefaultMaxTypeLabels+2 {
		t.Fatalf("poisoned has %d series, want %d (+ the malformed \"\")", n, metrics.DefaultMaxTypeLabels+2)
	}
}

// counterValue returns the value of counter name{type=typ} in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name, typ string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == typ {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{type=%q}", name, typ)
	return 0
}
