package bench

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

// checkRun asserts what every run must report, whatever the machine's speed.
func checkRun(t *testing.T, r Result, n int) {
	t.Helper()
	if r.Completed != int64(n)+1 { // + the warm-up command
		t.Errorf("completed %d, want %d", r.Completed, n+1)
	}
	if r.IssuedPerS <= 0 || r.ProcessedPerS <= 0 {
		t.Errorf("issued %v/s, processed %v/s: want both > 0", r.IssuedPerS, r.ProcessedPerS)
	}
	// Issue: one batch + one enqueue. Process: one final batch, one
	// delete, and a dequeue per batch (a few more at the start and end
	// while the queue fills and drains); the first delivery's fast path
	// skips the Load point read of every command (docs/lifecycle.md,
	// "First delivery").
	want := map[string][2]float64{
		"batch": {2, 2}, "enqueue": {1, 1}, "delete_message": {1, 1}, "dequeue": {1.0 / 32, 0.1},
	}
	for k, lim := range want {
		if got := r.OpsPerCommandByKind[k]; got < lim[0] || got > lim[1] {
			t.Errorf("%s: %.3f per command, want %.3f..%.3f (all: %v)", k, got, lim[0], lim[1], r.OpsPerCommandByKind)
		}
	}
	// The processor reads the queues' control rows (the pause check) once
	// per ControlInterval at most while it has work: one query per 9 s of
	// the run, and one at its start.
	phase := float64(n)/r.IssuedPerS + float64(n)/r.ProcessedPerS
	maxQueries := (math.Ceil(phase/model.ControlInterval.Seconds()) + 2) / float64(n)
	if q := r.OpsPerCommandByKind["query"]; q > maxQueries {
		t.Errorf("query: %.5f per command, want at most %.5f (one pause check per %s of the %.1f s run, and one at its start)", q, maxQueries, model.ControlInterval, phase)
	}
	for k := range r.OpsPerCommandByKind {
		if _, ok := want[k]; !ok && k != "query" {
			t.Errorf("calls made: %v, want only %v and the pause check's queries", r.OpsPerCommandByKind, want)
		}
	}
	if r.BurnDownFastPath != 1 {
		t.Errorf("burn-down fast-path share %v, want 1", r.BurnDownFastPath)
	}
	if r.IssueOpsPerCommand != 2 {
		t.Errorf("issue ops per command %v, want 2", r.IssueOpsPerCommand)
	}
	if r.StorageOpsPerCommand > 4.1 || r.StorageOpsPerCommand < 4 {
		t.Errorf("storage ops per command %.3f, want 4..4.1", r.StorageOpsPerCommand)
	}
	if r.MaxRSSMB <= 0 {
		t.Errorf("max RSS %v MiB, want > 0", r.MaxRSSMB)
	}
	b := r.BurnDown
	if b.TableBatch != 2 || b.QueueEnqueue != 1 || b.TablePointRead != 0 || b.QueueDelete != 1 || b.QueueDequeue != r.OpsPerCommandByKind["dequeue"] ||
		math.Abs(b.Total-r.StorageOpsPerCommand) > 1e-9 {
		t.Errorf("burn-down breakdown %+v, want batch 2, enqueue 1, point read 0, delete 1, dequeue %.3f, total %.3f", b, r.OpsPerCommandByKind["dequeue"], r.StorageOpsPerCommand)
	}
	fd := r.FirstDelivery
	if fd == nil {
		t.Fatal("no first-delivery result")
	}
	// The dequeues per command depend on how the messages arrive (more
	// empty or short dequeues on a loaded machine: 0.094 seen on
	// Azurite); every other call is per command.
	if fd.FastPathShare != 1 || fd.FastPath.TablePointRead != 0 || fd.Fallback.TablePointRead != 1 ||
		math.Abs((fd.Fallback.Total-fd.Fallback.QueueDequeue)-(fd.FastPath.Total-fd.FastPath.QueueDequeue)-1) > 0.02 ||
		fd.FastPath.Total-fd.FastPath.QueueDequeue > 4.02 {
		t.Errorf("first delivery %+v: want every delivery on the fast path, no point read there, one per command without it", fd)
	}
	checkRetention(t, r, n)
}

// sumCalls adds the fields of c but Total.
func sumCalls(c Calls) float64 {
	return c.QueueEnqueue + c.QueueDequeue + c.QueueDelete + c.QueueUpdate + c.QueueOther +
		c.TableBatch + c.TablePointRead + c.TableQuery + c.TableOther + c.TableList + c.TableDrop
}

// checkRetention asserts the retention phase: the sweep, its clock past
// every command's retention, read the run's commands (the burn-down's, its
// warm-up and the latency phase's), dropped their day table (gone from
// the store's listing) and cost at most 0.05 calls per command: the base
// table's query, the listing, a query per 1000 rows (Azurite may add an
// empty last page), the drop and the registration's delete, nothing else.
func checkRetention(t *testing.T, r Result, n int) {
	t.Helper()
	rt := r.Retention
	if rt == nil {
		t.Fatal("no retention result")
	}
	if want := n + 1 + r.LatencySamples; rt.Commands != want {
		t.Errorf("retention read %d commands, want %d (burn-down %d + warm-up + latency %d)", rt.Commands, want, n, r.LatencySamples)
	}
	if rt.DayTables < 1 || rt.Dropped != rt.DayTables || !rt.DayTableGone {
		t.Errorf("retention %+v: want every day table (at least 1) dropped and gone from the listing", rt)
	}
	if rt.ClockAheadH != 240 {
		t.Errorf("sweep clock %v h ahead, want 240 (7 days retention + 2 days issue window + 1 day)", rt.ClockAheadH)
	}
	c, per := rt.Calls, rt.CallsPerCommand
	if c.Total != float64(rt.SweepCalls) {
		t.Errorf("counted %v sweep calls, the sweep counted %d (%+v)", c.Total, rt.SweepCalls, c)
	}
	for what, k := range map[string]Calls{"calls": c, "calls per command": per} {
		if math.Abs(sumCalls(k)-k.Total) > 1e-9 {
			t.Errorf("retention %s %+v: fields sum to %v, total %v", what, k, sumCalls(k), k.Total)
		}
	}
	days := float64(rt.DayTables)
	minQ := 1 + math.Ceil(float64(rt.Commands)/1000)
	if c.TableList != 1 || c.TableDrop != days || c.TableOther != days || c.TableQuery < minQ || c.TableQuery > minQ+2*days ||
		c.QueueEnqueue+c.QueueDequeue+c.QueueDelete+c.QueueUpdate+c.QueueOther+c.TableBatch+c.TablePointRead != 0 {
		t.Errorf("retention calls %+v: want 1 listing, %v drop(s) and registration delete(s), %v..%v queries, nothing else", c, days, minQ, minQ+2*days)
	}
	if per.Total <= 0 || per.Total > 0.05 || math.Abs(per.Total*float64(rt.Commands)-c.Total) > 1e-6 {
		t.Errorf("retention %v calls per command (%v calls / %d commands), want 0 < x <= 0.05", per.Total, c.Total, rt.Commands)
	}
}

// checkSteady asserts the per-command calls of a steady stream of commands
// issued in process (or through the HTTP API): the fixed four (no point
// read: the fast path), and, at most, one dequeue per command (coalesced
// wake-ups; plus one per full batch and the first poll) — in fact hardly
// any, the in-process hand-off running each from its enqueue's answer. The
// one single-entity write allowed is the day table's registration, once
// per process and issue day (docs/lifecycle.md, "Retention"): at most 1/n
// per command.
func checkSteady(t *testing.T, what string, c Calls, n int) {
	t.Helper()
	maxDequeue := 1 + 1.0/32 + 1/float64(n)
	if c.TableBatch != 2 || c.QueueEnqueue != 1 || c.TablePointRead != 0 || c.QueueDelete != 1 ||
		c.QueueDequeue < 0 || c.QueueDequeue > maxDequeue || c.Total > 4.2 || c.QueueUpdate != 0 || c.QueueOther != 0 || c.TableQuery != 0 ||
		c.TableOther*float64(n) > 1+1e-9 ||
		math.Abs(c.Total-(4+c.QueueDequeue+c.TableOther)) > 1e-9 {
		t.Errorf("%s: %+v, want batch 2, enqueue 1, point read 0 (the fast path), delete 1, 0 <= dequeue <= %.3f, at most one day-table registration, nothing else, total <= 4.2 (the hand-off: hardly a dequeue)", what, c, maxDequeue)
	}
}

func checkTrickle(t *testing.T, tr *TrickleResult, n int) {
	t.Helper()
	if tr == nil {
		t.Fatal("no HTTP trickle result")
	}
	if tr.N != n || tr.Completed != int64(n) || tr.Clients != DefaultTrickleClients || tr.IssuedPerS <= 0 {
		t.Errorf("trickle %+v: want %d commands completed by %d clients", tr, n, DefaultTrickleClients)
	}
	checkSteady(t, "HTTP trickle", tr.CallsPerCommand, n)
	if math.Abs(tr.CommandsPerDequeue*tr.CallsPerCommand.QueueDequeue-1) > 1e-9 {
		t.Errorf("commands per dequeue %v, want 1 / %v", tr.CommandsPerDequeue, tr.CallsPerCommand.QueueDequeue)
	}
}

func TestRunEmbedded(t *testing.T) {
	t.Parallel()
	const n = 2000
	r, err := Run(context.Background(), Config{
		Store: StoreEmbedded, Path: filepath.Join(t.TempDir(), "cmdq-data"), N: n,
		Rate: 200, LatencyDuration: 500 * time.Millisecond, IdleWindow: time.Second, Timeout: time.Minute,
		TrickleN: 300,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, r, n)
	if r.LatencySamples != 100 || r.LatencyP50MS <= 0 || r.LatencyP99MS < r.LatencyP50MS {
		t.Errorf("latency: %d samples, p50 %v ms, p99 %v ms; want 100 samples, 0 < p50 <= p99", r.LatencySamples, r.LatencyP50MS, r.LatencyP99MS)
	}
	if r.SteadyCalls == nil {
		t.Fatal("no steady in-process breakdown")
	}
	checkSteady(t, "steady in-process", *r.SteadyCalls, r.LatencySamples)
	checkTrickle(t, r.HTTPTrickle, 300)
	if r.HTTPTrickle.RatePerS != DefaultTrickleRateEmbedded {
		t.Errorf("trickle rate %d, want the default %d", r.HTTPTrickle.RatePerS, DefaultTrickleRateEmbedded)
	}
	if r.CommitsPerCommand <= 0 || r.CommitsPerCommand > 3.1 {
		t.Errorf("commits per command %v, want 0 < x <= 3.1 (issue 1, final batch 1, delete 1, dequeue 1/32)", r.CommitsPerCommand)
	}
	// Idle: at its cap the poller waits exactly MaxPollInterval (jitter
	// lengthens waits but never past the cap): 60 dequeues an hour, or a
	// little more when a poll in flight at the window's end is counted
	// (1 in about 10 in a 1 s window at the scaled 100 ms). The reconciler
	// costs one query an hour on an empty deployment (the hourly marker
	// query; the daily pending scan replaces one of them and is 1 query too).
	if r.IdlePollOpsPerHour < 60 || r.IdlePollOpsPerHour > 67 {
		t.Errorf("idle poll ops per hour %.1f, want 60 (up to 67 with sampling)", r.IdlePollOpsPerHour)
	}
	if r.IdleReconcileOpsPerHour != 1 {
		t.Errorf("reconciler ops per hour %v, want 1", r.IdleReconcileOpsPerHour)
	}
	// The heartbeat, per process: 60 upserts and one clean-up query an
	// hour, apart from the queue's figure.
	if r.IdleHeartbeatOpsPerHour != 61 {
		t.Errorf("heartbeat ops per hour %v, want 61 (60 upserts + 1 query)", r.IdleHeartbeatOpsPerHour)
	}
	if r.IdleOpsPerHour != r.IdlePollOpsPerHour+r.IdleReconcileOpsPerHour {
		t.Errorf("idle total %v != polls %v + reconciler %v", r.IdleOpsPerHour, r.IdlePollOpsPerHour, r.IdleReconcileOpsPerHour)
	}
	if i := r.IdlePerHour; i == nil || math.Abs(i.QueueDequeue-r.IdlePollOpsPerHour) > 1e-9 || i.TableQuery != 1 || math.Abs(i.Total-r.IdleOpsPerHour) > 1e-9 {
		t.Errorf("idle per hour by kind %+v: want dequeue %.1f (the polls), query 1 (the reconciler), total %.1f", i, r.IdlePollOpsPerHour, r.IdleOpsPerHour)
	}
	// Woken by Notify, not by the scheduled poll 48..60 s later (the run
	// fails if the handler does not start within 30 s).
	if r.IdleWakeLatencyMS <= 0 {
		t.Errorf("idle wake latency %v ms, want > 0", r.IdleWakeLatencyMS)
	}
	// The pending scan on the loaded tables pages through every command
	// row: one query of the base table (it holds only the day table's
	// registration), then the day table's 2001 rows, 1000 per query.
	if r.ReconcileOpsPerPassLoaded != 4 {
		t.Errorf("pending scan on the loaded tables: %d ops, want 4", r.ReconcileOpsPerPassLoaded)
	}
}

func TestRunAzureWithBaseline(t *testing.T) {
	t.Parallel()
	conn := azurite.ConnectionString(t)
	const n = 300
	prefix := "benchleft" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	r, err := Run(context.Background(), Config{
		Store: StoreAzure, ConnectionString: conn, N: n, Baseline: BaselineRaw, Prefix: prefix,
		Rate: 50, LatencyDuration: 400 * time.Millisecond, IdleWindow: -1, Timeout: 2 * time.Minute,
		TrickleN: 100, TrickleRate: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, r, n)
	if r.CommitsPerCommand != 0 {
		t.Errorf("commits per command %v on azure, want 0 (embedded only)", r.CommitsPerCommand)
	}
	if r.LatencySamples != 20 {
		t.Errorf("latency samples %d, want 20", r.LatencySamples)
	}
	checkTrickle(t, r.HTTPTrickle, 100)
	if r.HTTPTrickle.RatePerS != 0 {
		t.Errorf("trickle rate %d, want 0 (unpaced)", r.HTTPTrickle.RatePerS)
	}
	if r.BaselineProcessedPerS <= 0 || r.BaselineIssuedPerS <= 0 || r.Ratio != r.ProcessedPerS/r.BaselineProcessedPerS {
		t.Errorf("baseline issued %v/s processed %v/s ratio %v: want > 0 and ratio = processed / baseline", r.BaselineIssuedPerS, r.BaselineProcessedPerS, r.Ratio)
	}
	// The run removes what it created: no table or queue of its prefix
	// is left (day tables of every phase included).
	st, err := azure.Open(context.Background(), azure.Config{ConnectionString: conn})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tables, err := st.Tables(context.Background(), prefix)
	if err != nil || len(tables) != 0 {
		t.Errorf("tables left by the run: %q (%v), want none", tables, err)
	}
	queues, err := st.Queues(context.Background(), prefix)
	if err != nil || len(queues) != 0 {
		t.Errorf("queues left by the run: %q (%v), want none", queues, err)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]Config{
		"store":                {Store: "sqlite"},
		"baseline on embedded": {Baseline: BaselineRaw},
		"baseline name":        {Store: StoreAzure, Baseline: "fast"},
		"batch":                {BatchSize: 33},
		"n":                    {N: -1},
		"poll":                 {MaxPollInterval: time.Millisecond},
		"trickle clients":      {TrickleClients: -2},
	} {
		if _, err := Run(context.Background(), c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestCounterCountsEveryCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := NewCounter(st)
	counted := c.Counted()
	cb, ok := counted.(storage.Combiner)
	if !ok {
		t.Fatal("the counted embedded store does not implement storage.Combiner")
	}
	q, err := counted.Queue(ctx, "benchq")
	if err != nil {
		t.Fatal(err)
	}
	tb, err := counted.Table(ctx, "bencht")
	if err != nil {
		t.Fatal(err)
	}
	if c.Total() != 0 {
		t.Fatalf("Queue and Table counted %d calls, want 0", c.Total())
	}
	m, _ := q.Enqueue(ctx, "x", 0, 0)
	_, _ = q.Peek(ctx, 1)
	_, _ = q.ApproximateCount(ctx)
	ms, err := q.Dequeue(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Dequeue: %v, %v", ms, err)
	}
	r, _, _ := q.UpdateVisibility(ctx, ms[0].ID, ms[0].PopReceipt, time.Minute)
	_ = q.Delete(ctx, m.ID, r)
	e := storage.Entity{PartitionKey: "p", RowKey: "r"}
	_, _ = tb.Insert(ctx, e)
	_, _ = tb.Get(ctx, "p", "r")
	_, _ = tb.Update(ctx, e, storage.Merge, "")
	_, _ = tb.Upsert(ctx, e, storage.Merge)
	_, _ = tb.Query(ctx, storage.Query{PartitionKey: "p"})
	_, _ = tb.Batch(ctx, "p", []storage.BatchOp{{Kind: storage.OpUpsert, Entity: e}})
	_ = tb.Delete(ctx, "p", "r", "")
	if _, ok := counted.(storage.TableOpener); !ok {
		t.Error("the counted store does not implement storage.TableOpener (reads of day tables would list the tables)")
	}
	if _, _, err := cb.BatchEnqueue(ctx, "bencht", "p", []storage.BatchOp{{Kind: storage.OpInsert, Entity: e}}, "benchq", "y", 0, 0); err != nil {
		t.Fatal(err)
	}
	if names, err := counted.Tables(ctx, "bench"); err != nil || len(names) != 1 {
		t.Fatalf("Tables: %v, %v", names, err)
	}
	if err := counted.DeleteTable(ctx, "bencht"); err != nil {
		t.Fatal(err)
	}
	snap := c.Snapshot()
	for i, n := range snap {
		want := int64(1)
		if Op(i) == OpBatch || Op(i) == OpEnqueue {
			want = 2 // BatchEnqueue counts as one of each
		}
		if n != want {
			t.Errorf("%s counted %d, want %d", Op(i), n, want)
		}
	}
	if c.Total() != 17 {
		t.Errorf("total %d, want 17", c.Total())
	}
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	d := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	if q := quantile(d, 0.5); q != 5 {
		t.Errorf("p50 = %v, want 5", q)
	}
	if q := quantile(d, 0.99); q != 10 {
		t.Errorf("p99 = %v, want 10", q)
	}
	if q := quantile(nil, 0.5); q != 0 {
		t.Errorf("p50 of nothing = %v, want 0", q)
	}
}

func TestCallsPerGroupsKinds(t *testing.T) {
	t.Parallel()
	var d [numOps]int64
	for i := range d {
		d[i] = int64(i + 1) // every kind distinct
	}
	c := callsPer(d, 2)
	h := func(ops ...Op) (n float64) {
		for _, o := range ops {
			n += float64(d[o]) / 2
		}
		return n
	}
	want := Calls{
		QueueEnqueue: h(OpEnqueue), QueueDequeue: h(OpDequeue), QueueDelete: h(OpDeleteMessage), QueueUpdate: h(OpUpdateVisibility),
		QueueOther: h(OpPeek, OpCount), TableBatch: h(OpBatch), TablePointRead: h(OpGet), TableQuery: h(OpQuery),
		TableOther: h(OpInsert, OpUpdate, OpUpsert, OpDeleteEntity), TableList: h(OpListTables), TableDrop: h(OpDeleteTable),
	}
	want.Total = float64(numOps*(numOps+1)/2) / 2
	if c != want {
		t.Errorf("callsPer = %+v, want %+v", c, want)
	}
}
