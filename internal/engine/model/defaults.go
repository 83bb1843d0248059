package model

import "time"

// Defaults of the processor's settings (documented in package cmdq).
const (
	DefaultBatchSize               = 32
	DefaultConcurrency             = 32
	DefaultMinPollInterval         = 100 * time.Millisecond
	DefaultMaxPollInterval         = time.Minute
	DefaultPollJitter              = 0.2
	DefaultDrainTimeout            = 30 * time.Second
	DefaultStartedWriteDelay       = time.Second
	DefaultHandlerDurationEstimate = time.Second
	DefaultTolerance               = 1.5
	DefaultReconcileInterval       = time.Hour
	DefaultReconcileActiveInterval = 5 * time.Minute
	DefaultReconcileGrace          = 30 * time.Second
	DefaultReconcileStaleAfter     = 15 * time.Minute
	DefaultReconcileScanInterval   = 24 * time.Hour
	DefaultUnhealthyAfter          = 5
	DefaultLostLeaseThreshold      = 3
	DefaultLeaseGrowthFactor       = 2.0
	DefaultMaxLeaseFactor          = 10.0
	DefaultLeaseShrinkAfter        = 10
	DefaultLeaseQuietPeriod        = 10 * time.Minute
	MaxLease                       = time.Hour
)

// Special values of Config fields (documented in package cmdq).
const (
	MaxNewBatchThreshold               = 10000
	MaxQueueWeight                     = 1000
	NoThreshold                        = -1
	NoReconcile          time.Duration = -1
)

// Readiness probe defaults (documented in package cmdq).
const (
	DefaultProbeTimeout  = 2 * time.Second
	DefaultProbeInterval = 5 * time.Second
)
