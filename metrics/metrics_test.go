package metrics_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/metrics"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

func TestProcessorMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg); err == nil {
		t.Fatal("registering twice succeeded")
	}
	obs := func(o cmdq.Observation) { m.Observe(o) }
	obs(cmdq.Observation{Kind: cmdq.ObservedCompleted, Type: "A", Duration: 30 * time.Millisecond})
	obs(cmdq.Observation{Kind: cmdq.ObservedCompleted, Type: "A", Duration: 10 * time.Millisecond})
	obs(cmdq.Observation{Kind: cmdq.ObservedFailed, Type: "A", Duration: 20 * time.Millisecond})
	obs(cmdq.Observation{Kind: cmdq.ObservedDeferred, Type: "A", Duration: 5 * time.Millisecond}) // not a failure
	obs(cmdq.Observation{Kind: cmdq.ObservedPoisoned, Type: ""})
	obs(cmdq.Observation{Kind: cmdq.ObservedLeaseLost, Type: "A"})
	obs(cmdq.Observation{Kind: cmdq.ObservedPolled, Queue: "commands", Wait: 750 * time.Millisecond})
	obs(cmdq.Observation{Kind: cmdq.ObservedPolled, Queue: "commands", Received: 3})
	obs(cmdq.Observation{Kind: cmdq.ObservedPolled, Queue: "commands", Wait: 1500 * time.Millisecond})
	obs(cmdq.Observation{Kind: cmdq.ObservedAlert, Op: "dequeue"}) // not a metric
	obs(cmdq.Observation{Kind: cmdq.ObservedPaused, Queue: "commands"})
	obs(cmdq.Observation{Kind: cmdq.ObservedPolled, Queue: "commands", Paused: true, Wait: 1500 * time.Millisecond})
	obs(cmdq.Observation{Kind: cmdq.ObservedPaused, Queue: "slow"})
	obs(cmdq.Observation{Kind: cmdq.ObservedResumed, Queue: "slow"})
	want := `
# HELP cmdq_commands_completed_total Commands completed, by type.
# TYPE cmdq_commands_completed_total counter
cmdq_commands_completed_total{type="A"} 2
# HELP cmdq_commands_deferred_total Handler attempts deferred with RetryAfter that did not count toward the poison ceiling, by type.
# TYPE cmdq_commands_deferred_total counter
cmdq_commands_deferred_total{type="A"} 1
# HELP cmdq_commands_failed_total Failed handler attempts that will be retried, by type (an attempt whose failure poisons the command counts in cmdq_commands_poisoned_total instead).
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
# HELP cmdq_polls_total Dequeues by the processor, by queue and result (empty, messages; paused: a read of a paused queue's control row instead).
# TYPE cmdq_polls_total counter
cmdq_polls_total{queue="commands",result="empty"} 2
cmdq_polls_total{queue="commands",result="messages"} 1
cmdq_polls_total{queue="commands",result="paused"} 1
# HELP cmdq_queue_paused 1 while the processor knows the queue as paused (it starts none of its commands), else 0.
# TYPE cmdq_queue_paused gauge
cmdq_queue_paused{queue="commands"} 1
cmdq_queue_paused{queue="slow"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"cmdq_commands_completed_total", "cmdq_commands_deferred_total", "cmdq_commands_failed_total", "cmdq_commands_poisoned_total",
		"cmdq_lease_lost_total", "cmdq_poll_interval_seconds", "cmdq_polls_total", "cmdq_queue_paused"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "cmdq_handler_duration_seconds"); n != 1 {
		t.Fatalf("handler duration series: %d", n)
	}
	// Four handler runs of A (two completed, one failed, one deferred)
	// are in its histogram; the poisoning without a handler run is not.
	if got := histCount(t, reg, "cmdq_handler_duration_seconds"); got != 4 {
		t.Fatalf("handler durations observed: %d, want 4", got)
	}
	// A nil *Metrics ignores every call.
	var nilM *metrics.Metrics
	nilM.Observe(cmdq.Observation{Kind: cmdq.ObservedCompleted, Type: "A"})
	nilM.StorageOp("x", nil)
	nilM.WatchQueue(nil)
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
	m, err := metrics.New(reg)
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
	if b, e := apitest.StorageOps(t, reg, "table_batch"), apitest.StorageOps(t, reg, "queue_enqueue"); b != 1 || e != 1 {
		t.Fatalf("counted %v batches and %v enqueues, want 1 and 1", b, e)
	}
}

// histCount returns the sample count of the one series of histogram name.
func histCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no single series of %s", name)
	return 0
}
