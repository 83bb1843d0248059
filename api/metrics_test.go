package api_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/api/apitest"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	for range 2 {
		decode[api.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"SendEmail"}`), http.StatusAccepted)
	}
	decode[api.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"Other"}`), http.StatusAccepted)

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

func TestProcessorMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := api.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.NewMetrics(reg); err == nil {
		t.Fatal("registering twice succeeded")
	}
	m.CommandCompleted("A")
	m.CommandCompleted("A")
	m.CommandFailed("A")
	m.CommandPoisoned("")
	m.HandlerDuration("A", 30*time.Millisecond)
	m.LeaseLost("A")
	m.PollInterval("commands", 1500*time.Millisecond)
	m.Polled("commands", true)
	m.Polled("commands", false)
	m.Polled("commands", true)
	want := `
# HELP cmdq_commands_completed_total Commands completed, by type.
# TYPE cmdq_commands_completed_total counter
cmdq_commands_completed_total{type="A"} 2
# HELP cmdq_commands_failed_total Failed handler attempts (each retry counts), by type.
# TYPE cmdq_commands_failed_total counter
cmdq_commands_failed_total{type="A"} 1
# HELP cmdq_commands_poisoned_total Commands moved to the poison table, by type.
# TYPE cmdq_commands_poisoned_total counter
cmdq_commands_poisoned_total{type=""} 1
# HELP cmdq_lease_lost_total Messages whose lease was lost while their handler ran, by type.
# TYPE cmdq_lease_lost_total counter
cmdq_lease_lost_total{type="A"} 1
# HELP cmdq_poll_interval_seconds The poller's current wait between dequeues of an empty queue, in seconds.
# TYPE cmdq_poll_interval_seconds gauge
cmdq_poll_interval_seconds{queue="commands"} 1.5
# HELP cmdq_polls_total Dequeues by the processor, by queue and result (empty, messages).
# TYPE cmdq_polls_total counter
cmdq_polls_total{queue="commands",result="empty"} 2
cmdq_polls_total{queue="commands",result="messages"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"cmdq_commands_completed_total", "cmdq_commands_failed_total", "cmdq_commands_poisoned_total",
		"cmdq_lease_lost_total", "cmdq_poll_interval_seconds", "cmdq_polls_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "cmdq_handler_duration_seconds"); n != 1 {
		t.Fatalf("handler duration series: %d", n)
	}
	// A nil *Metrics ignores every call.
	var nilM *api.Metrics
	nilM.CommandCompleted("A")
	nilM.StorageOp("x", nil)
	nilM.WatchQueue(nil)
}

func TestQueueDepthSampled(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	for range 3 {
		decode[api.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"A"}`), http.StatusAccepted)
	}
	q, err := s.Store.Queue(context.Background(), s.Names.Queue(""))
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
	if got := storageOps(t, s.Prom, "queue_count"); got != 1 {
		t.Fatalf("ApproximateCount called %v times for 5 scrapes within the TTL, want 1", got)
	}
}

// storageOps sums cmdq_storage_operations_total for op.
func storageOps(t *testing.T, g prometheus.Gatherer, op string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != "cmdq_storage_operations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					v += m.GetCounter().GetValue()
				}
			}
		}
	}
	return v
}

// TestInstrumentStoreKeepsCombiner: instrumenting the embedded store keeps
// its one-commit fast path (storage.Combiner) and counts a combined call as
// the two operations it stands for.
func TestInstrumentStoreKeepsCombiner(t *testing.T) {
	t.Parallel()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	m, err := api.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cb, ok := m.InstrumentStore(st).(storage.Combiner)
	if !ok {
		t.Fatal("InstrumentStore hid the embedded store's storage.Combiner")
	}
	ops := []storage.BatchOp{{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: "p", RowKey: "r"}}}
	if _, _, err := cb.BatchEnqueue(context.Background(), "cmdqcommands", "p", ops, "cmdq-commands", "hello", 0, 0); err != nil {
		t.Fatal(err)
	}
	if b, e := storageOps(t, reg, "table_batch"), storageOps(t, reg, "queue_enqueue"); b != 1 || e != 1 {
		t.Fatalf("counted %v batches and %v enqueues, want 1 and 1", b, e)
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
		decode[api.IssueResponse](t, post(t, s.URL+"/v1/commands", fmt.Sprintf(`{"type":"junk%d"}`, i)), http.StatusAccepted)
	}
	decode[api.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"SendEmail"}`), http.StatusAccepted)
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
	m, err := api.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * api.DefaultMaxTypeLabels {
		m.CommandCompleted(fmt.Sprintf("t%d", i))
		m.CommandPoisoned(fmt.Sprintf("t%d", i))
	}
	m.CommandPoisoned("")
	if n := testutil.CollectAndCount(reg, "cmdq_commands_completed_total"); n != api.DefaultMaxTypeLabels+1 {
		t.Fatalf("completed has %d series, want %d", n, api.DefaultMaxTypeLabels+1)
	}
	if got := counterValue(t, reg, "cmdq_commands_completed_total", api.OtherType); got != 2*api.DefaultMaxTypeLabels {
		t.Fatalf("other counted %v, want %d", got, 2*api.DefaultMaxTypeLabels)
	}
	if n := testutil.CollectAndCount(reg, "cmdq_commands_poisoned_total"); n != api.DefaultMaxTypeLabels+2 {
		t.Fatalf("poisoned has %d series, want %d (+ the malformed \"\")", n, api.DefaultMaxTypeLabels+2)
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
