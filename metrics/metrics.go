// Package metrics holds cmdq's Prometheus collectors: the processor's
// observer (completions, failures, poisonings, handler durations, lost
// leases, polls), a store wrapper counting every storage operation, the
// sampled queue depths, and the count of commands issued through the HTTP
// API, with bounded type labels. `cmdq serve` and `cmdq worker
// --metrics-addr` expose them on /metrics; in your own program:
//
//	m, err := metrics.New(prometheus.DefaultRegisterer)
//	st := m.InstrumentStore(raw) // before cmdq.New
//	c, err := cmdq.New(st, cmdq.Config{Observers: []cmdq.Observer{m}})
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage"
)

// DefaultQueueDepthTTL is how long a sampled queue depth is reused before
// ApproximateCount is called again (5 s), so a burst of scrapes costs one
// storage operation per queue.
const DefaultQueueDepthTTL = 5 * time.Second

// Metrics holds cmdq's Prometheus metrics. It is a cmdq.Observer (pass it
// in cmdq.Config.Observers),
// counts commands issued through the HTTP API (CommandIssued), counts
// storage operations through InstrumentStore, and samples queue depths
// registered with WatchQueue. All methods are safe for concurrent use; a
// nil *Metrics ignores every call.
//
// Metric names (all prefixed cmdq_):
//
// Type labels are bounded: see LabelTypes; other types count as "other".
//
//	commands_issued_total{type}          commands issued (via the API)
//	commands_completed_total{type}       commands completed
//	commands_failed_total{type}          failed attempts that will be retried (deferrals and the poisoning attempt do not count)
//	commands_deferred_total{type}        deferred attempts (RetryAfter) that did not count toward the poison ceiling
//	commands_poisoned_total{type}        commands moved to the poison table
//	handler_duration_seconds{type}       handler run time (success or failure)
//	polls_total{queue,result}            dequeues by the processor; result empty|messages, or paused (a read of a paused queue's control row in place of a dequeue)
//	queue_paused{queue}                  1 while the processor knows the queue as paused, else 0
//	lease_lost_total{type}               messages whose lease was lost mid-run
//	queue_depth{queue}                   approximate messages in the queue (sampled, cached DefaultQueueDepthTTL)
//	poll_interval_seconds{queue}         the poller's current wait between empty dequeues
//	storage_operations_total{op,result}  storage calls; op like queue_dequeue, table_batch; result ok|error
type Metrics struct {
	issued    *prometheus.CounterVec
	completed *prometheus.CounterVec
	failed    *prometheus.CounterVec
	deferred  *prometheus.CounterVec
	poisoned  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	polls     *prometheus.CounterVec
	leaseLost *prometheus.CounterVec
	poll      *prometheus.GaugeVec
	paused    *prometheus.GaugeVec
	ops       *prometheus.CounterVec
	wakes     *prometheus.CounterVec
	rings     *prometheus.CounterVec
	depth     *depthCollector

	typesMu sync.RWMutex
	fixed   bool            // LabelTypes was called: only types in labels get their own label
	labels  map[string]bool // types with their own label
}

// OtherType is the type label of commands whose type has no label of its
// own (see Metrics.LabelTypes), so an issuer sending many type names cannot
// create many series.
const OtherType = "other"

// DefaultMaxTypeLabels is how many distinct type names get their own label
// before LabelTypes is called (100); later ones count as OtherType.
const DefaultMaxTypeLabels = 100

// LabelTypes adds command types that get their own `type` label value
// (normally every type the client knows: cmdq.Client.Types) and
// from then on counts every other type under OtherType, so the number of
// series stays bounded by the registered types plus one. Called with no
// types it still switches to that mode (everything counts as OtherType).
// api.New calls it with its client's types when there are any. Before any call, the first
// DefaultMaxTypeLabels type names seen get their own label. The empty type
// (a malformed message) keeps the label "".
func (m *Metrics) LabelTypes(types ...string) {
	if m == nil {
		return
	}
	m.typesMu.Lock()
	defer m.typesMu.Unlock()
	if !m.fixed {
		m.fixed, m.labels = true, map[string]bool{}
	}
	for _, t := range types {
		m.labels[t] = true
	}
}

// typeLabel returns the `type` label value for typ.
func (m *Metrics) typeLabel(typ string) string {
	if typ == "" {
		return ""
	}
	m.typesMu.RLock()
	ok, fixed, n := m.labels[typ], m.fixed, len(m.labels)
	m.typesMu.RUnlock()
	switch {
	case ok:
		return typ
	case fixed || n >= DefaultMaxTypeLabels:
		return OtherType
	}
	m.typesMu.Lock()
	defer m.typesMu.Unlock()
	if m.labels[typ] {
		return typ
	}
	if m.fixed || len(m.labels) >= DefaultMaxTypeLabels {
		return OtherType
	}
	m.labels[typ] = true
	return typ
}

// New creates the metrics and registers them with reg (nil =
// prometheus.DefaultRegisterer). It fails if they are already registered
// there.
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	m := &Metrics{
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cmdq", Name: "commands_issued_total",
			Help: "Commands issued through the HTTP API, by type."}, []string{"type"}),
		completed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cmdq", Name: "commands_completed_total",
			Help: "Commands completed, by type."}, []string{"type"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cmdq", Name: "commands_failed_total",
			Help: "Failed handler attempts that will be retried, by type (an attempt whose failure poisons the command counts in cmdq_commands_poisoned_total instead)."}, []string{"type"}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cmdq", Name: "commands_deferred_total",
			Help: "Handler attempts deferred with RetryAfter that did not count toward the poison ceiling, by type."}, []string{"type"}),
		poisoned: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cmdq", Name: "commands_poisoned_total",
			Help: "Commands moved to the poison table, by type."}, []string{"type"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "cmdq", Name: "handler_duration_seconds",
			Help:    "Handler run time in seconds (success or failure), by type.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}, []string{"type"}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cmdq", Name: "polls_total",
			Help: "Dequeues by the processor, by queue and result (empty, messages; paused: a read of a paused queue's control row instead)."}, []string{"queue", "result"}),
		leaseLost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cmdq", Name: "lease_lost_total",
			Help: "Messages whose lease was lost while their handler ran, by type."}, []string{"type"}),
		poll: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "cmdq", Name: "poll_interval_seconds",
			Help: "The poller's current wait between dequeues of an empty queue, in seconds."}, []string{"queue"}),
		paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "cmdq", Name: "queue_paused",
			Help: "1 while the processor knows the queue as paused (it starts none of its commands), else 0."}, []string{"queue"}),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cmdq", Name: "storage_operations_total",
			Help: "Storage operations (each is one billable transaction on Azure), by operation and result (ok, error)."}, []string{"op", "result"}),
		wakes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cmdq", Name: "doorbell_wakes_total",
			Help: "Datagrams the processor's doorbell got from other processes, by result: accepted, forged (not of this deployment), replayed, stale (sent too far from this clock) or limited (over the rate)."}, []string{"result"}),
		rings: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cmdq", Name: "doorbell_rings_total",
			Help: "Times this process rang the processors of a queue in other processes (an issue, a requeue, a resume, more work than its processor can start), by queue."}, []string{"queue"}),
		labels: map[string]bool{},
		depth: &depthCollector{
			desc: prometheus.NewDesc("cmdq_queue_depth", "Approximate number of messages in the queue (sampled; cached for a few seconds).", []string{"queue"}, nil),
			ttl:  DefaultQueueDepthTTL,
		},
	}
	for _, c := range []prometheus.Collector{m.issued, m.completed, m.failed, m.deferred, m.poisoned, m.duration, m.polls, m.leaseLost, m.poll, m.paused, m.ops, m.wakes, m.rings, m.depth} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// CommandIssued counts one command of type typ issued.
func (m *Metrics) CommandIssued(typ string) {
	if m != nil {
		m.issued.WithLabelValues(m.typeLabel(typ)).Inc()
	}
}

// Observe records one processing event (cmdq.Observer): completions,
// failed and deferred attempts, poisonings and handler durations by type, lost leases,
// dequeues by queue and result, the poller's wait, paused queues, and the
// wake-ups between processes heard and rung.
// Other kinds are ignored.
func (m *Metrics) Observe(o cmdq.Observation) {
	if m == nil {
		return
	}
	switch o.Kind {
	case cmdq.ObservedCompleted:
		typ := m.typeLabel(o.Type)
		m.completed.WithLabelValues(typ).Inc()
		m.duration.WithLabelValues(typ).Observe(o.Duration.Seconds())
	case cmdq.ObservedFailed:
		typ := m.typeLabel(o.Type)
		m.failed.WithLabelValues(typ).Inc()
		m.duration.WithLabelValues(typ).Observe(o.Duration.Seconds())
	case cmdq.ObservedDeferred:
		typ := m.typeLabel(o.Type)
		m.deferred.WithLabelValues(typ).Inc()
		m.duration.WithLabelValues(typ).Observe(o.Duration.Seconds())
	case cmdq.ObservedPoisoned:
		typ := m.typeLabel(o.Type)
		m.poisoned.WithLabelValues(typ).Inc()
		if o.Duration > 0 {
			m.duration.WithLabelValues(typ).Observe(o.Duration.Seconds())
		}
	case cmdq.ObservedLeaseLost:
		m.leaseLost.WithLabelValues(m.typeLabel(o.Type)).Inc()
	case cmdq.ObservedPolled:
		result := "messages"
		switch {
		case o.Paused:
			result = "paused"
		case o.Err == nil && o.Received == 0:
			result = "empty"
		}
		m.polls.WithLabelValues(o.Queue, result).Inc()
		m.poll.WithLabelValues(o.Queue).Set(o.Wait.Seconds())
	case cmdq.ObservedPaused:
		m.paused.WithLabelValues(o.Queue).Set(1)
	case cmdq.ObservedResumed:
		m.paused.WithLabelValues(o.Queue).Set(0)
	case cmdq.ObservedWake:
		m.wakes.WithLabelValues(o.Reason).Inc()
	case cmdq.ObservedRing:
		m.rings.WithLabelValues(o.Queue).Inc()
	}
}

// StorageOp counts one storage operation op ("queue_enqueue", "table_batch",
// …) that failed when err is non-nil.
func (m *Metrics) StorageOp(op string, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.ops.WithLabelValues(op, result).Inc()
}

// WatchQueue adds q to the cmdq_queue_depth gauge. Its ApproximateCount is
// called at most once per DefaultQueueDepthTTL, during a scrape. Watching the
// same queue name again replaces the earlier one.
func (m *Metrics) WatchQueue(q storage.Queue) {
	if m == nil || q == nil {
		return
	}
	m.depth.mu.Lock()
	defer m.depth.mu.Unlock()
	for i := range m.depth.queues {
		if m.depth.queues[i].q.Name() == q.Name() {
			m.depth.queues[i] = watchedQueue{q: q}
			return
		}
	}
	m.depth.queues = append(m.depth.queues, watchedQueue{q: q})
}

type watchedQueue struct {
	q       storage.Queue
	sampled time.Time
	depth   int
	ok      bool
}

// depthCollector samples ApproximateCount at most once per ttl per queue.
type depthCollector struct {
	desc   *prometheus.Desc
	ttl    time.Duration
	mu     sync.Mutex // held during sampling, so concurrent scrapes share one call
	queues []watchedQueue
}

func (c *depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *depthCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for i := range c.queues {
		w := &c.queues[i]
		if !w.ok || now.Sub(w.sampled) >= c.ttl {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			n, err := w.q.ApproximateCount(ctx)
			cancel()
			w.sampled = now
			if err == nil {
				w.depth, w.ok = n, true
			}
		}
		if w.ok {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(w.depth), w.q.Name())
		}
	}
}

// Metrics is an observer of the processor (cmdq.Config.Observers).
var _ cmdq.Observer = (*Metrics)(nil)
