package processor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// probeFailureTTL is how long a failed probe's answer is reused (1 s).
const probeFailureTTL = time.Second

// StorageProbe tells, within a bounded time and at a bounded cost, whether
// storage answers: the readiness check of a server, independent of the
// poll interval and of the driver's long retries. Check makes no storage
// call when one succeeded (Succeeded) within the interval and none failed
// since (Failed); otherwise one ApproximateCount of a queue, bounded by the
// timeout, whose failure is reused for a second. Concurrent checks share
// one call. Safe for concurrent use.
type StorageProbe struct {
	open     func(ctx context.Context) (storage.Queue, error)
	timeout  time.Duration
	interval time.Duration

	mu       sync.Mutex
	q        storage.Queue
	lastOK   time.Time // last call known to have succeeded
	faulted  bool      // a call failed after lastOK
	failAt   time.Time // last failed probe
	failErr  error
	inFlight chan struct{} // closed when the running probe ends
	calls    int64
}

// NewStorageProbe returns a probe of the queue that open opens (once). A
// zero timeout or interval takes model.DefaultProbeTimeout or model.DefaultProbeInterval.
func NewStorageProbe(open func(ctx context.Context) (storage.Queue, error), timeout, interval time.Duration) *StorageProbe {
	return &StorageProbe{open: open, timeout: orDur(timeout, model.DefaultProbeTimeout), interval: orDur(interval, model.DefaultProbeInterval)}
}

// Succeeded records a storage call that succeeded at t.
func (sp *StorageProbe) Succeeded(t time.Time) {
	sp.mu.Lock()
	if t.After(sp.lastOK) {
		sp.lastOK = t
	}
	sp.faulted = false
	sp.mu.Unlock()
}

// Failed records a storage call that failed (an infrastructure fault).
func (sp *StorageProbe) Failed() {
	sp.mu.Lock()
	sp.faulted = true
	sp.mu.Unlock()
}

// Calls returns the number of probe calls made to storage.
func (sp *StorageProbe) Calls() int64 {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.calls
}

// Check reports whether storage answers: nil, or an error wrapping
// model.ErrStorageUnavailable. It returns within the probe timeout (or when ctx
// ends).
func (sp *StorageProbe) Check(ctx context.Context) error {
	for {
		sp.mu.Lock()
		now := time.Now()
		if !sp.faulted && now.Sub(sp.lastOK) < sp.interval {
			sp.mu.Unlock()
			return nil
		}
		if sp.failErr != nil && now.Sub(sp.failAt) < probeFailureTTL {
			err := sp.failErr
			sp.mu.Unlock()
			return err
		}
		if wait := sp.inFlight; wait != nil {
			sp.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return fmt.Errorf("%w: %w", model.ErrStorageUnavailable, ctx.Err())
			}
		}
		done := make(chan struct{})
		sp.inFlight = done
		sp.calls++
		sp.mu.Unlock()
		err := sp.probe(ctx)
		sp.mu.Lock()
		sp.inFlight = nil
		if err == nil {
			sp.lastOK, sp.faulted, sp.failErr = time.Now(), false, nil
		} else {
			sp.failAt, sp.failErr = time.Now(), err
		}
		sp.mu.Unlock()
		close(done)
		return err
	}
}

// probe makes the one bounded call.
func (sp *StorageProbe) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, sp.timeout)
	defer cancel()
	sp.mu.Lock()
	q := sp.q
	sp.mu.Unlock()
	if q == nil {
		var err error
		if q, err = sp.open(ctx); err != nil {
			return fmt.Errorf("%w: open queue: %w", model.ErrStorageUnavailable, err)
		}
		sp.mu.Lock()
		sp.q = q
		sp.mu.Unlock()
	}
	if _, err := q.ApproximateCount(ctx); err != nil {
		return fmt.Errorf("%w (no answer to a queue length query within %s): %w", model.ErrStorageUnavailable, sp.timeout, err)
	}
	return nil
}

// CheckStorage is the processor's readiness check (see StorageProbe): nil
// when one of its storage calls succeeded within ProbeInterval and none
// failed since, otherwise the result of one ApproximateCount of its first
// queue bounded by ProbeTimeout (a failure is reused for a second). A
// successful probe counts as a successful storage call: it clears the
// fault count (and the unhealthy state, without Flywheel) and wakes the
// pollers. Pass it as api.Config.Ready.
func (p *Processor) CheckStorage(ctx context.Context) error {
	if err := p.probe.Check(ctx); err != nil {
		return err
	}
	if p.Health().ConsecutiveFaults > 0 {
		p.ok()
	}
	return nil
}

// ProbeCalls returns the number of storage calls CheckStorage and the
// processor's own recovery probing have made.
func (p *Processor) ProbeCalls() int64 { return p.probe.Calls() }

// probeLoop runs while the session takes work: while storage is failing
// (infrastructure faults since the last success) it probes every
// ProbeInterval, so that the processor notices storage's return within
// seconds even when its pollers back off for a minute. It costs nothing
// while storage answers.
func (p *Processor) probeLoop(s *session) {
	t := time.NewTicker(p.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-s.take.Done():
			return
		case <-t.C:
		}
		if p.Health().ConsecutiveFaults > 0 {
			_ = p.CheckStorage(s.take)
		}
	}
}
