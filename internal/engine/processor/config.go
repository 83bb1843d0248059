package processor

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq/internal/engine/clock"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// LeaseGrowth is cmdq.LeaseGrowth (documented there; the same fields,
// converted with a Go conversion). A lease counts as lost only when it
// really ended while this processor held the message (a queue call
// answered "stale receipt" or "no such message" after the lease's end as
// this processor knew it); an answer that comes back earlier is the effect
// of the call's own first try, landed with its answer lost, and is not a
// loss.
type LeaseGrowth struct {
	Threshold   int
	Factor      float64
	MaxFactor   float64
	ShrinkAfter int
	QuietPeriod time.Duration
}

// Config configures a Processor. Its settings are the fields of
// cmdq.Config of the same names, documented there with their defaults;
// withDefaults applies the defaults (the model constants, the one home of
// each) and Validate checks the ranges (cmdq.Config.Validate calls it).
// The zero Config is valid. Below them are the switches the Client sets
// for its own tests and benchmarks (tuning.Switches) and its hooks.
type Config struct {
	Prefix                  string
	Shards                  map[string]int
	Worker                  string
	BatchSize               int
	NewBatchThreshold       int
	Concurrency             int
	MinPollInterval         time.Duration
	MaxPollInterval         time.Duration
	PollJitter              float64
	PoisonCeiling           int
	GlobalConcurrency       map[string]int
	MaxDeferrals            int
	Rates                   map[string]model.Rate
	LeaseGrowth             LeaseGrowth
	DrainTimeout            time.Duration
	StartedWriteDelay       time.Duration
	HandlerDurationEstimate time.Duration
	Tolerance               float64
	ReconcileInterval       time.Duration
	ReconcileActiveInterval time.Duration
	ReconcileScanInterval   time.Duration
	ReconcileGrace          time.Duration
	ReconcileStaleAfter     time.Duration
	Retention               model.Retention
	UnhealthyAfter          int
	ProbeTimeout            time.Duration
	ProbeInterval           time.Duration
	HeartbeatInterval       time.Duration
	Flywheel                bool
	Logger                  zerolog.Logger
	// QueueWeights shares the handler slots between the queues the
	// processor polls in proportion under saturation (weights.go;
	// docs/processor.md, "Queue weights"): queue → weight, 1..
	// model.MaxQueueWeight; a polled queue left out weighs 1. New refuses
	// a weight for a queue no registered or declared type routes to.
	// Default nil: no weights, the queues take slots as their messages
	// come (first come, first served).
	QueueWeights map[string]int

	// Doorbell is the wake-ups between processes (doorbell.go): the
	// Client fills it from cmdq.Config.Doorbell and its store.
	Doorbell Doorbell

	// RateToken, when set, is called when a message of a rated type takes
	// its token (rates.go), with its type, its command ID and its grant's
	// stamp (tests check the bound with it; tuning.Switches.RateToken).
	RateToken func(cmdType, id string, stamp time.Time)

	// NoFastPath turns the first delivery's fast path off: every delivery
	// loads its command (one point read) before running the handler.
	// Default false: the first delivery of an issue's own message, soon
	// after the issue, runs from what the message carries without the read
	// (docs/lifecycle.md, "First delivery").
	NoFastPath bool
	// NoGroupCommit turns the grouped completion off: on a store that can
	// write many completions in one durable write
	// (storage.GroupCombiner: the embedded store), each completion is
	// then its own write (storage.Combiner.BatchDelete), as on a store
	// that cannot. For comparisons and tests. Default false: completions
	// that are ready together share one write (record.Completer).
	NoGroupCommit bool
	// NoHandOff turns the in-process hand-off off (HandOff returns nil):
	// an Issuer in this process enqueues every message visible and wakes
	// the poller. Default false: an issue's own message is handed to this
	// processor when it has a free handler slot, without a dequeue
	// (docs/lifecycle.md, "In-process hand-off").
	NoHandOff bool
	// HopHorizon, when above 0, replaces storage.MaxVisibility (7 days) as
	// the longest visibility delay the processor's own enqueues use (a
	// hop, a reconciler's recovery): a scheduled command due later hops
	// again when it shows up. Tests shorten it (tuning.Switches.HopHorizon);
	// the Issuer must use the same. Default 0: storage.MaxVisibility.
	HopHorizon time.Duration
	// ControlInterval is how stale the processor's knowledge of its queues'
	// control rows (pause state, recent cancels) may be when it starts a
	// command: an older one is read again first (one query for every
	// queue). Default model.ControlInterval (9 s); tests shorten it.
	ControlInterval time.Duration
	// Clock is the time the processor runs on: due times, leases, retry
	// delays, held and hopped messages and its waits for them (a run's
	// deadline, its drain, probes and heartbeats keep the system clock).
	// The Client sets it from cmdq.Config.Clock; its store, Issuer and
	// records must use the same. Default nil: the system clock
	// (clock.Real).
	Clock clock.Clock

	// Observer receives every processing event (model.Observation):
	// metrics, logs, tracing. Default nil (none).
	Observer model.Observer
	// Changes, if set, receives every change this processor stores and
	// every handler start and end (the Client's watchers). Default nil.
	Changes ChangeObserver
}

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("processor: invalid config")

// Validate reports every problem with c at once (errors.Join); each wraps
// ErrInvalidConfig. Zero fields are valid (they take defaults).
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if err := c.Retention.Validate(); err != nil {
		bad("Retention: %v", err)
	}
	if c.BatchSize < 0 || c.BatchSize > 32 {
		bad("BatchSize %d is outside 1..32 (0 = default 32)", c.BatchSize)
	}
	if c.NewBatchThreshold < model.NoThreshold || c.NewBatchThreshold > model.MaxNewBatchThreshold {
		bad("NewBatchThreshold %d is outside -1..%d (0 = default BatchSize, -1 = no prefetch)", c.NewBatchThreshold, model.MaxNewBatchThreshold)
	}
	if c.Concurrency < 0 {
		bad("Concurrency %d is negative (0 = default 32)", c.Concurrency)
	}
	if c.MinPollInterval < 0 {
		bad("MinPollInterval %s is negative (0 = default 100ms)", c.MinPollInterval)
	}
	if c.MaxPollInterval < 0 {
		bad("MaxPollInterval %s is negative (0 = default 1m)", c.MaxPollInterval)
	}
	minP, maxP := orDur(c.MinPollInterval, model.DefaultMinPollInterval), orDur(c.MaxPollInterval, model.DefaultMaxPollInterval)
	if minP > maxP {
		bad("MinPollInterval %s exceeds MaxPollInterval %s", minP, maxP)
	}
	if c.PollJitter != model.NoJitter && (c.PollJitter < 0 || c.PollJitter >= 1) {
		bad("PollJitter %g is outside 0..1 (0 = default 0.2, -1 = none)", c.PollJitter)
	}
	for t, n := range c.GlobalConcurrency {
		if err := model.ValidateType(t); err != nil {
			bad("GlobalConcurrency: %v", err)
		} else if err := model.ValidateGlobalConcurrency(n); err != nil {
			bad("GlobalConcurrency of %s: %v", t, err)
		}
	}
	for t, r := range c.Rates {
		if err := model.ValidateType(t); err != nil {
			bad("Rates: %v", err)
		} else if r.IsZero() {
			bad("Rates of %s: %s: Limit 0 must be at least 1 start per interval, Per a positive interval (leave the type out for its own rate)", t, r)
		} else if err := model.ValidateRate(r); err != nil {
			bad("Rates of %s: %v", t, err)
		}
	}
	if c.PoisonCeiling < 0 {
		bad("PoisonCeiling %d is negative (0 = each definition's ceiling)", c.PoisonCeiling)
	}
	if c.MaxDeferrals < 0 || c.MaxDeferrals > model.MaxDeferralsLimit {
		bad("MaxDeferrals %d is outside 0..%d (0 = each definition's own)", c.MaxDeferrals, model.MaxDeferralsLimit)
	}
	if c.LeaseGrowth.Threshold < 0 {
		bad("LeaseGrowth.Threshold %d is negative (0 = default 3)", c.LeaseGrowth.Threshold)
	}
	if c.LeaseGrowth.Factor != 0 && c.LeaseGrowth.Factor <= 1 {
		bad("LeaseGrowth.Factor %g must be above 1 (0 = default 2)", c.LeaseGrowth.Factor)
	}
	if c.LeaseGrowth.MaxFactor != 0 && c.LeaseGrowth.MaxFactor < 1 {
		bad("LeaseGrowth.MaxFactor %g must be at least 1 (0 = default 10)", c.LeaseGrowth.MaxFactor)
	}
	if c.LeaseGrowth.ShrinkAfter < 0 {
		bad("LeaseGrowth.ShrinkAfter %d is negative (0 = default 10)", c.LeaseGrowth.ShrinkAfter)
	}
	if c.LeaseGrowth.QuietPeriod < 0 {
		bad("LeaseGrowth.QuietPeriod %s is negative (0 = default 10m)", c.LeaseGrowth.QuietPeriod)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"DrainTimeout", c.DrainTimeout}, {"StartedWriteDelay", c.StartedWriteDelay},
		{"HandlerDurationEstimate", c.HandlerDurationEstimate}, {"ReconcileGrace", c.ReconcileGrace},
		{"ReconcileActiveInterval", c.ReconcileActiveInterval},
		{"ProbeTimeout", c.ProbeTimeout}, {"ProbeInterval", c.ProbeInterval}, {"ControlInterval", c.ControlInterval},
		{"ReconcileStaleAfter", c.ReconcileStaleAfter}, {"HopHorizon", c.HopHorizon},
	} {
		if d.v < 0 {
			bad("%s %s is negative (0 = default)", d.name, d.v)
		}
	}
	if c.ReconcileInterval < 0 && c.ReconcileInterval != model.NoReconcile {
		bad("ReconcileInterval %s is negative (0 = default 1h, -1 = disabled)", c.ReconcileInterval)
	}
	if c.HeartbeatInterval < 0 && c.HeartbeatInterval != model.NoHeartbeat {
		bad("HeartbeatInterval %s is negative (0 = default 1m, -1 = disabled)", c.HeartbeatInterval)
	}
	if c.ReconcileScanInterval < 0 && c.ReconcileScanInterval != model.NoReconcile {
		bad("ReconcileScanInterval %s is negative (0 = default 24h, -1 = disabled)", c.ReconcileScanInterval)
	}
	if c.Tolerance != 0 && c.Tolerance < 1 {
		bad("Tolerance %g is below 1 (0 = default 1.5)", c.Tolerance)
	}
	if c.UnhealthyAfter < 0 {
		bad("UnhealthyAfter %d is negative (0 = default 5)", c.UnhealthyAfter)
	}
	for _, q := range slices.Sorted(maps.Keys(c.QueueWeights)) {
		if err := model.ValidateQueue(q); err != nil {
			bad("QueueWeights: %v", err)
		}
		if w := c.QueueWeights[q]; w < 1 || w > model.MaxQueueWeight {
			bad("QueueWeights[%q] = %d is outside 1..%d; a weight is a share (critical=6,default=3,low=1), and a queue left out weighs 1", q, w, model.MaxQueueWeight)
		}
	}
	return errors.Join(errs...)
}

func orDur(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = model.DefaultPrefix
	}
	if c.Worker == "" {
		c.Worker = model.DefaultWorker()
	}
	if c.BatchSize == 0 {
		c.BatchSize = model.DefaultBatchSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = model.DefaultConcurrency
	}
	switch c.NewBatchThreshold {
	case 0:
		c.NewBatchThreshold = c.BatchSize
	case model.NoThreshold:
		c.NewBatchThreshold = 0
	}
	c.MinPollInterval = orDur(c.MinPollInterval, model.DefaultMinPollInterval)
	c.MaxPollInterval = orDur(c.MaxPollInterval, model.DefaultMaxPollInterval)
	switch c.PollJitter {
	case 0:
		c.PollJitter = model.DefaultPollJitter
	case model.NoJitter:
		c.PollJitter = 0
	}
	if c.LeaseGrowth.Threshold == 0 {
		c.LeaseGrowth.Threshold = model.DefaultLostLeaseThreshold
	}
	if c.LeaseGrowth.Factor == 0 {
		c.LeaseGrowth.Factor = model.DefaultLeaseGrowthFactor
	}
	if c.LeaseGrowth.MaxFactor == 0 {
		c.LeaseGrowth.MaxFactor = model.DefaultMaxLeaseFactor
	}
	if c.LeaseGrowth.ShrinkAfter == 0 {
		c.LeaseGrowth.ShrinkAfter = model.DefaultLeaseShrinkAfter
	}
	c.LeaseGrowth.QuietPeriod = orDur(c.LeaseGrowth.QuietPeriod, model.DefaultLeaseQuietPeriod)
	c.DrainTimeout = orDur(c.DrainTimeout, model.DefaultDrainTimeout)
	c.StartedWriteDelay = orDur(c.StartedWriteDelay, model.DefaultStartedWriteDelay)
	c.HandlerDurationEstimate = orDur(c.HandlerDurationEstimate, model.DefaultHandlerDurationEstimate)
	if c.Tolerance == 0 {
		c.Tolerance = model.DefaultTolerance
	}
	c.ReconcileInterval = orDur(c.ReconcileInterval, model.DefaultReconcileInterval)
	c.ReconcileActiveInterval = orDur(c.ReconcileActiveInterval, model.DefaultReconcileActiveInterval)
	if c.ReconcileInterval > 0 {
		c.ReconcileActiveInterval = min(c.ReconcileActiveInterval, c.ReconcileInterval)
	}
	c.ReconcileGrace = orDur(c.ReconcileGrace, model.DefaultReconcileGrace)
	c.ReconcileStaleAfter = orDur(c.ReconcileStaleAfter, model.DefaultReconcileStaleAfter)
	c.ReconcileScanInterval = orDur(c.ReconcileScanInterval, model.DefaultReconcileScanInterval)
	if c.UnhealthyAfter == 0 {
		c.UnhealthyAfter = model.DefaultUnhealthyAfter
	}
	c.ProbeTimeout = orDur(c.ProbeTimeout, model.DefaultProbeTimeout)
	c.ProbeInterval = orDur(c.ProbeInterval, model.DefaultProbeInterval)
	c.ControlInterval = orDur(c.ControlInterval, model.ControlInterval)
	c.HeartbeatInterval = orDur(c.HeartbeatInterval, model.DefaultHeartbeatInterval)
	c.Clock = clock.Or(c.Clock)
	return c
}
