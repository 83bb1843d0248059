package cmdqtype

import "time"

// Defaults of the processor's settings (cmdq.Config), used when the
// corresponding field is zero.
const (
	// DefaultBatchSize is the number of messages one dequeue asks for (32, the service maximum).
	DefaultBatchSize = 32
	// DefaultConcurrency is the number of handlers one processor runs at once (32).
	DefaultConcurrency = 32
	// DefaultMinPollInterval is the first wait after an empty poll (100 ms).
	DefaultMinPollInterval = 100 * time.Millisecond
	// DefaultMaxPollInterval caps the empty-poll backoff (1 minute).
	DefaultMaxPollInterval = time.Minute
	// DefaultPollJitter is the fraction of each poll wait that is randomized (0.2).
	DefaultPollJitter = 0.2
	// DefaultDrainTimeout is how long running handlers may finish after Run's context ends (30 s).
	DefaultDrainTimeout = 30 * time.Second
	// DefaultStartedWriteDelay is how long a handler runs before its `started`
	// event is written on its own (1 s); faster handlers get it in their final batch.
	DefaultStartedWriteDelay = time.Second
	// DefaultHandlerDurationEstimate is RunFor's handler-duration guess before
	// it has observed one (1 s).
	DefaultHandlerDurationEstimate = time.Second
	// DefaultTolerance multiplies the handler duration to get RunFor's margin (1.5).
	DefaultTolerance = 1.5
	// DefaultReconcileInterval is how often the reconciler's marker query
	// runs on an idle processor (1 hour).
	DefaultReconcileInterval = time.Hour
	// DefaultReconcileActiveInterval is how often the marker query runs
	// while the processor has work (5 minutes).
	DefaultReconcileActiveInterval = 5 * time.Minute
	// DefaultReconcileGrace is how old an `~unqueued` marker must be before it
	// is re-enqueued (30 s).
	DefaultReconcileGrace = 30 * time.Second
	// DefaultReconcileStaleAfter is how old a `pending` command with no marker
	// must be before the whole-table scan re-enqueues it (15 minutes).
	DefaultReconcileStaleAfter = 15 * time.Minute
	// DefaultReconcileScanInterval is how often a reconciler run is the
	// pending scan (24 hours).
	DefaultReconcileScanInterval = 24 * time.Hour
	// DefaultUnhealthyAfter is the number of consecutive infrastructure faults
	// that make the processor unhealthy (5).
	DefaultUnhealthyAfter = 5
	// DefaultLostLeaseThreshold is the number of lost leases of one command
	// type after which that type's lease grows (3).
	DefaultLostLeaseThreshold = 3
	// DefaultLeaseGrowthFactor multiplies a type's lease each time it grows (2).
	DefaultLeaseGrowthFactor = 2.0
	// DefaultMaxLeaseFactor bounds lease growth to this multiple of the
	// definition's lease (10), and never past MaxLease.
	DefaultMaxLeaseFactor = 10.0
	// DefaultLeaseShrinkAfter is the number of clean finishes in a row after
	// which a grown lease shrinks one step (10).
	DefaultLeaseShrinkAfter = 10
	// DefaultLeaseQuietPeriod is how long after the last lost lease (or
	// change) a grown lease shrinks one step at the next clean finish
	// (10 minutes).
	DefaultLeaseQuietPeriod = 10 * time.Minute
	// MaxLease is the longest lease growth may reach (1 hour).
	MaxLease = time.Hour
)

// Special values for cmdq.Config fields whose zero value means "default".
const (
	// MaxNewBatchThreshold is the largest NewBatchThreshold (10,000).
	MaxNewBatchThreshold = 10000
	// NoThreshold set as NewBatchThreshold means 0: no prefetch (hold at
	// most Concurrency messages).
	NoThreshold = -1
	// NoReconcile set as ReconcileInterval disables the reconciler; set as
	// ReconcileScanInterval it disables only the pending scan.
	NoReconcile time.Duration = -1
)

// Readiness probe defaults.
const (
	// DefaultProbeTimeout bounds one readiness probe call (2 s), whatever
	// the driver's own retries and per-try timeouts.
	DefaultProbeTimeout = 2 * time.Second
	// DefaultProbeInterval (5 s): a storage call that succeeded this
	// recently makes a probe unnecessary; while storage is failing the
	// processor probes on its own this often, to notice its return.
	DefaultProbeInterval = 5 * time.Second
)
