package processor

import (
	"errors"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq/cmdqtype"
	"github.com/rs/zerolog"
)

// LeaseGrowth says how a command type's lease grows when its leases keep
// being lost (a handler that outlives its lease, renewals that fail), and
// how it shrinks back once they no longer are. A lease counts as lost only
// when it really ended while this processor held the message (a queue call
// answered "stale receipt" or "no such message" after the lease's end as
// this processor knew it); an answer that comes back earlier is the effect
// of the call's own first try, landed with its answer lost, and is not a
// loss. A grown lease applies to its own type only.
type LeaseGrowth struct {
	// Threshold is the number of lost leases of one type that triggers growth
	// (default 3). The count restarts after each growth.
	Threshold int
	// Factor multiplies the lease at each growth and divides it at each
	// shrink (default 2; must be > 1).
	Factor float64
	// MaxFactor bounds the grown lease to MaxFactor × the definition's lease
	// (default 10), and never past cmdqtype.MaxLease (1 hour).
	MaxFactor float64
	// ShrinkAfter: a grown lease shrinks one step (÷ Factor, never below the
	// definition's lease) after this many clean finishes of its type in a
	// row (default 10).
	ShrinkAfter int
	// QuietPeriod: a grown lease also shrinks one step at the first clean
	// finish this long after the type's last lost lease or lease change
	// (default 10 minutes), so rarely run types shrink too.
	QuietPeriod time.Duration
}

// Config configures a Processor. The zero Config is valid: every zero field
// takes the default named in its comment.
type Config struct {
	// Prefix names the queues (<prefix>-<queue>) and tables (<prefix>commands,
	// <prefix>poison). Default cmdq.DefaultPrefix ("cmdq"). Lowercase
	// letters and digits, starting with a letter, at most 40 characters.
	// (cmdq.Config.Prefix sets it for a client's processor.)
	Prefix string
	// Shards is the number of shards of each logical queue it names
	// (docs/scaling.md): the processor drains every shard of its queues,
	// in turn. 0 or 1: one storage queue. At most 64. Default none.
	Shards map[string]int
	// Worker identifies this processor in events and logs. Default
	// "<hostname>-<pid>".
	Worker string
	// BatchSize is how many messages one dequeue asks for, 1..32. Default 32.
	BatchSize int
	// NewBatchThreshold bounds the prefetch: the messages the processor
	// holds beyond Concurrency (dequeued, waiting for a handler slot), so
	// that the next batch is in hand when slots free up. The prefetch
	// actually used is what Concurrency slots start within 500 ms at the
	// average handler duration (HandlerDurationEstimate before the first),
	// at most NewBatchThreshold: fast handlers get full batches fetched
	// ahead, slow ones none (a worker with Concurrency 1 and 600 ms
	// handlers holds one message at a time, and competing workers share the
	// queue). A dequeue asks for min(BatchSize, Concurrency + prefetch −
	// held) and is made when a full batch fits or a handler slot would stay
	// idle. Default BatchSize (32). At most 10,000. Set cmdqtype.NoThreshold (-1)
	// for no prefetch.
	NewBatchThreshold int
	// Concurrency is the most handlers this processor runs at once across all
	// queues. Default 32. Dequeued messages beyond it wait for a slot; one
	// still waiting when its lease would need renewing is released (made
	// visible again) instead.
	Concurrency int
	// MinPollInterval is the wait after the first empty poll. Default 100 ms.
	MinPollInterval time.Duration
	// MaxPollInterval caps the empty-poll backoff, which doubles from
	// MinPollInterval. Default 1 minute: an idle queue costs ~60 dequeues an hour.
	MaxPollInterval time.Duration
	// PollJitter is the fraction (0..1) of each wait that is randomized
	// upwards: a wait w becomes a uniform value in [w, w×(1+PollJitter)],
	// capped at MaxPollInterval (so an idle queue costs exactly one dequeue
	// per MaxPollInterval).
	// Default 0.2; registry.NoJitter (-1) disables randomization.
	PollJitter float64
	// PoisonCeiling, when > 0, overrides every definition's poison ceiling: a
	// message dequeued more than this many times is poisoned without running.
	// Default 0 (use each definition's ceiling).
	PoisonCeiling int
	// LeaseGrowth bounds how lost leases grow a type's lease.
	LeaseGrowth LeaseGrowth
	// DrainTimeout is how long Run lets running handlers finish after its
	// context ends, before cancelling their contexts. Default 30 s.
	DrainTimeout time.Duration
	// StartedWriteDelay: a handler still running after this long gets its
	// `started` event (and projection `running`) written on its own; faster
	// handlers get it in their final batch, saving one write. Default 1 s.
	StartedWriteDelay time.Duration
	// HandlerDurationEstimate is RunFor's handler-duration guess until it has
	// observed one. Default 1 s.
	HandlerDurationEstimate time.Duration
	// Tolerance multiplies the average handler duration to get RunFor's
	// safety margin. Default 1.5; at least 1.
	Tolerance float64
	// ReconcileInterval is how often the reconciler's marker query (which
	// re-enqueues commands whose enqueue failed) runs while the processor is
	// idle; Run also runs it once at start, and RunFor(d) runs it with
	// probability d/ReconcileInterval, so scheduled runs cost what one
	// long-lived processor does. Default 1 hour; cmdqtype.NoReconcile (-1) disables
	// the reconciler.
	ReconcileInterval time.Duration
	// ReconcileActiveInterval is how often the marker query runs while the
	// processor has work (a message was dequeued, or Notify called, since
	// the last run); RunFor(d) runs it on its first work with probability
	// d/ReconcileActiveInterval. The query also runs ReconcileGrace (+1 s)
	// after storage faults clear. Default 5 minutes; at most
	// ReconcileInterval.
	ReconcileActiveInterval time.Duration
	// ReconcileScanInterval is how often one of the reconciler's runs is the
	// pending scan instead of the marker query: a whole-table query for
	// commands still `pending` after ReconcileStaleAfter (left by a process
	// that crashed between the issue batch and the enqueue). It costs one
	// request per 1000 commands, so it runs rarely. Default 24 hours;
	// cmdqtype.NoReconcile (-1) disables the scan. An idle processor thus costs one
	// reconciler query an hour.
	ReconcileScanInterval time.Duration
	// ReconcileGrace is how old an enqueue-failure marker must be before the
	// reconciler acts on it. Default 30 s.
	ReconcileGrace time.Duration
	// ReconcileStaleAfter is how old a `pending` command without a marker must
	// be before the reconciler's whole-table scan re-enqueues it (a process
	// that crashed between the issue batch and the enqueue). Default 15 min.
	ReconcileStaleAfter time.Duration
	// Retention is how long final commands are kept before the daily
	// sweep (run with the pending scan, every ReconcileScanInterval)
	// removes them; a command type's own registry.Options.Retention
	// (or declared cmdq.CommandOptions.Retention) overrides it.
	// Defaults: completed 7 days, discarded 30 days; poisoned commands are
	// kept until discarded. See docs/lifecycle.md, "Retention".
	Retention cmdqtype.Retention
	// UnhealthyAfter is the number of consecutive infrastructure faults that
	// make the processor unhealthy. Default 5.
	UnhealthyAfter int
	// ProbeTimeout bounds the readiness probe (CheckStorage): one
	// ApproximateCount call, abandoned after this long whatever the
	// driver's retries. Default 2 s.
	ProbeTimeout time.Duration
	// ProbeInterval: CheckStorage makes no call when a storage call of the
	// processor succeeded within this long and none failed since; while
	// storage is failing the processor probes every ProbeInterval on its
	// own to notice its return (then wakes its pollers). Default 5 s.
	ProbeInterval time.Duration
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
	// queue). Default cmdqtype.ControlInterval (9 s); tests shorten it.
	ControlInterval time.Duration
	// HeartbeatInterval is how often the running processor rewrites its
	// heartbeat row (partition ~processors of the commands table: who and
	// where it is, its state, in-flight count and queues; see heartbeat.go).
	// Default cmdqtype.DefaultHeartbeatInterval (1 minute);
	// cmdqtype.NoHeartbeat (-1) disables it.
	HeartbeatInterval time.Duration
	// Flywheel, when true, makes an unhealthy processor stop pulling work
	// until ResetHealth is called. When false (default) it keeps pulling and
	// becomes healthy again after the next successful storage operation.
	Flywheel bool
	// Logger receives the processor's logs. The zero Logger discards them.
	Logger zerolog.Logger
	// Observer receives every processing event (cmdqtype.Observation):
	// metrics, logs, tracing. Default nil (none).
	Observer cmdqtype.Observer
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
	if c.NewBatchThreshold < cmdqtype.NoThreshold || c.NewBatchThreshold > cmdqtype.MaxNewBatchThreshold {
		bad("NewBatchThreshold %d is outside -1..%d (0 = default BatchSize, -1 = no prefetch)", c.NewBatchThreshold, cmdqtype.MaxNewBatchThreshold)
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
	minP, maxP := orDur(c.MinPollInterval, cmdqtype.DefaultMinPollInterval), orDur(c.MaxPollInterval, cmdqtype.DefaultMaxPollInterval)
	if minP > maxP {
		bad("MinPollInterval %s exceeds MaxPollInterval %s", minP, maxP)
	}
	if c.PollJitter != cmdqtype.NoJitter && (c.PollJitter < 0 || c.PollJitter >= 1) {
		bad("PollJitter %g is outside 0..1 (0 = default 0.2, -1 = none)", c.PollJitter)
	}
	if c.PoisonCeiling < 0 {
		bad("PoisonCeiling %d is negative (0 = each definition's ceiling)", c.PoisonCeiling)
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
	if c.ReconcileInterval < 0 && c.ReconcileInterval != cmdqtype.NoReconcile {
		bad("ReconcileInterval %s is negative (0 = default 1h, -1 = disabled)", c.ReconcileInterval)
	}
	if c.HeartbeatInterval < 0 && c.HeartbeatInterval != cmdqtype.NoHeartbeat {
		bad("HeartbeatInterval %s is negative (0 = default 1m, -1 = disabled)", c.HeartbeatInterval)
	}
	if c.ReconcileScanInterval < 0 && c.ReconcileScanInterval != cmdqtype.NoReconcile {
		bad("ReconcileScanInterval %s is negative (0 = default 24h, -1 = disabled)", c.ReconcileScanInterval)
	}
	if c.Tolerance != 0 && c.Tolerance < 1 {
		bad("Tolerance %g is below 1 (0 = default 1.5)", c.Tolerance)
	}
	if c.UnhealthyAfter < 0 {
		bad("UnhealthyAfter %d is negative (0 = default 5)", c.UnhealthyAfter)
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
		c.Prefix = cmdqtype.DefaultPrefix
	}
	if c.Worker == "" {
		c.Worker = cmdqtype.DefaultWorker()
	}
	if c.BatchSize == 0 {
		c.BatchSize = cmdqtype.DefaultBatchSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = cmdqtype.DefaultConcurrency
	}
	switch c.NewBatchThreshold {
	case 0:
		c.NewBatchThreshold = c.BatchSize
	case cmdqtype.NoThreshold:
		c.NewBatchThreshold = 0
	}
	c.MinPollInterval = orDur(c.MinPollInterval, cmdqtype.DefaultMinPollInterval)
	c.MaxPollInterval = orDur(c.MaxPollInterval, cmdqtype.DefaultMaxPollInterval)
	switch c.PollJitter {
	case 0:
		c.PollJitter = cmdqtype.DefaultPollJitter
	case cmdqtype.NoJitter:
		c.PollJitter = 0
	}
	if c.LeaseGrowth.Threshold == 0 {
		c.LeaseGrowth.Threshold = cmdqtype.DefaultLostLeaseThreshold
	}
	if c.LeaseGrowth.Factor == 0 {
		c.LeaseGrowth.Factor = cmdqtype.DefaultLeaseGrowthFactor
	}
	if c.LeaseGrowth.MaxFactor == 0 {
		c.LeaseGrowth.MaxFactor = cmdqtype.DefaultMaxLeaseFactor
	}
	if c.LeaseGrowth.ShrinkAfter == 0 {
		c.LeaseGrowth.ShrinkAfter = cmdqtype.DefaultLeaseShrinkAfter
	}
	c.LeaseGrowth.QuietPeriod = orDur(c.LeaseGrowth.QuietPeriod, cmdqtype.DefaultLeaseQuietPeriod)
	c.DrainTimeout = orDur(c.DrainTimeout, cmdqtype.DefaultDrainTimeout)
	c.StartedWriteDelay = orDur(c.StartedWriteDelay, cmdqtype.DefaultStartedWriteDelay)
	c.HandlerDurationEstimate = orDur(c.HandlerDurationEstimate, cmdqtype.DefaultHandlerDurationEstimate)
	if c.Tolerance == 0 {
		c.Tolerance = cmdqtype.DefaultTolerance
	}
	c.ReconcileInterval = orDur(c.ReconcileInterval, cmdqtype.DefaultReconcileInterval)
	c.ReconcileActiveInterval = orDur(c.ReconcileActiveInterval, cmdqtype.DefaultReconcileActiveInterval)
	if c.ReconcileInterval > 0 {
		c.ReconcileActiveInterval = min(c.ReconcileActiveInterval, c.ReconcileInterval)
	}
	c.ReconcileGrace = orDur(c.ReconcileGrace, cmdqtype.DefaultReconcileGrace)
	c.ReconcileStaleAfter = orDur(c.ReconcileStaleAfter, cmdqtype.DefaultReconcileStaleAfter)
	c.ReconcileScanInterval = orDur(c.ReconcileScanInterval, cmdqtype.DefaultReconcileScanInterval)
	if c.UnhealthyAfter == 0 {
		c.UnhealthyAfter = cmdqtype.DefaultUnhealthyAfter
	}
	c.ProbeTimeout = orDur(c.ProbeTimeout, cmdqtype.DefaultProbeTimeout)
	c.ProbeInterval = orDur(c.ProbeInterval, cmdqtype.DefaultProbeInterval)
	c.ControlInterval = orDur(c.ControlInterval, cmdqtype.ControlInterval)
	c.HeartbeatInterval = orDur(c.HeartbeatInterval, cmdqtype.DefaultHeartbeatInterval)
	return c
}
