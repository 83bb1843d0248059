package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// job is what every system carries: a sequence number and, in the latency
// phase, the Unix nanoseconds at which its issue call began (0 otherwise).
type job struct {
	Seq  int   `json:"seq"`
	Sent int64 `json:"sent,omitempty"`
}

// system is one row of the table: a queue at one configuration.
type system interface {
	// Name is the system's name (first column).
	Name() string
	// Config describes the configuration (second column).
	Config() string
	// Durable says whether an issued job survives a power cut, and why.
	Durable() string
	// Open prepares a fresh store (empty queue, no history) for one run.
	Open(ctx context.Context, run int) (instance, error)
}

// instance is one run's store.
type instance interface {
	// Issue enqueues j with one call; it returns once the system says the
	// job is accepted (for cmdq and River: committed).
	Issue(ctx context.Context, j job) error
	// Start starts workers handlers, each calling onStart with its job as
	// its first statement and returning nil.
	Start(ctx context.Context, workers int, onStart func(job)) (runner, error)
	// Close releases the store.
	Close(ctx context.Context) error
}

// runner is a started set of workers.
type runner interface {
	// WaitCompleted returns once n jobs have completed since Start, as the
	// system records completion (the completed state written and, where it
	// applies, the message deleted).
	WaitCompleted(ctx context.Context, n int64) error
	// Stop stops the workers.
	Stop(ctx context.Context) error
}

// batchIssuer is an instance with a batch insert (River's InsertMany):
// measured as an extra row with only the issue column.
type batchIssuer interface {
	IssueBatch(ctx context.Context, jobs []job) error
}

// issueOnly marks a system whose row measures issuing alone.
type issueOnly interface {
	IssueOnly() bool
}

// params are the workload's knobs, shared by every system.
type params struct {
	N               int           // jobs per burn-down
	Issuers         int           // goroutines issuing, one call per job
	Workers         []int         // worker counts of the burn-downs
	Rate            int           // latency phase, jobs per second
	LatencyDuration time.Duration // latency phase length
	BatchSize       int           // jobs per batch insert call (batchIssuer)
	Timeout         time.Duration // bound of each phase
}

// runResult is what one run of one system measured.
type runResult struct {
	IssuedPerS    []float64 `json:"issued_per_s"`              // one per fill
	ProcessedPerS []float64 `json:"processed_per_s,omitempty"` // one per Workers entry
	LatencyP50MS  float64   `json:"latency_p50_ms,omitempty"`
	LatencyP99MS  float64   `json:"latency_p99_ms,omitempty"`
	Samples       int       `json:"latency_samples,omitempty"`
}

// runOnce runs every phase of the workload once on a fresh store of s:
// for each worker count, issue N jobs from Issuers goroutines (timed), then
// drain them with that many workers (timed); then, with the last worker
// count still running, issue Rate jobs a second for LatencyDuration and time
// issue call → handler start.
func runOnce(ctx context.Context, s system, p params, run int, logf func(string, ...any)) (res runResult, err error) {
	logf("%s (%s) run %d: started", s.Name(), s.Config(), run)
	inst, err := s.Open(ctx, run)
	if err != nil {
		return res, fmt.Errorf("%s (%s): open: %w", s.Name(), s.Config(), err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if cerr := inst.Close(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("%s (%s): close: %w", s.Name(), s.Config(), cerr)
		}
	}()
	if only, ok := s.(issueOnly); ok && only.IssueOnly() {
		b, ok := inst.(batchIssuer)
		if !ok {
			return res, fmt.Errorf("%s (%s): issue-only row without a batch insert", s.Name(), s.Config())
		}
		for range p.Workers {
			d, err := issueBatches(ctx, b, p)
			if err != nil {
				return res, err
			}
			res.IssuedPerS = append(res.IssuedPerS, float64(p.N)/d.Seconds())
		}
		logf("%s (%s) run %d: issued %s/s (batches of %d)", s.Name(), s.Config(), run, group(median(res.IssuedPerS)), p.BatchSize)
		return res, nil
	}

	var lat latencies
	onStart := func(j job) {
		if j.Sent != 0 {
			lat.add(time.Since(time.Unix(0, j.Sent)))
		}
	}
	for i, w := range p.Workers {
		d, err := issueAll(ctx, inst, p)
		if err != nil {
			return res, fmt.Errorf("%s (%s): %w", s.Name(), s.Config(), err)
		}
		res.IssuedPerS = append(res.IssuedPerS, float64(p.N)/d.Seconds())

		began := time.Now()
		r, err := inst.Start(ctx, w, onStart)
		if err != nil {
			return res, fmt.Errorf("%s (%s): start %d workers: %w", s.Name(), s.Config(), w, err)
		}
		err = bounded(ctx, p.Timeout, fmt.Sprintf("process %d jobs with %d workers", p.N, w), func(ctx context.Context) error {
			return r.WaitCompleted(ctx, int64(p.N))
		})
		elapsed := time.Since(began)
		if err != nil {
			_ = stopRunner(ctx, r)
			return res, fmt.Errorf("%s (%s): %w", s.Name(), s.Config(), err)
		}
		res.ProcessedPerS = append(res.ProcessedPerS, float64(p.N)/elapsed.Seconds())
		logf("%s (%s) run %d: issued %s/s, processed %s/s with %d workers", s.Name(), s.Config(), run,
			group(res.IssuedPerS[i]), group(res.ProcessedPerS[i]), w)

		if i < len(p.Workers)-1 || p.LatencyDuration <= 0 {
			if err := stopRunner(ctx, r); err != nil {
				return res, fmt.Errorf("%s (%s): stop: %w", s.Name(), s.Config(), err)
			}
			continue
		}
		d, err = steady(ctx, inst, r, p, int64(p.N))
		if err != nil {
			_ = stopRunner(ctx, r)
			return res, fmt.Errorf("%s (%s): %w", s.Name(), s.Config(), err)
		}
		if err := stopRunner(ctx, r); err != nil {
			return res, fmt.Errorf("%s (%s): stop: %w", s.Name(), s.Config(), err)
		}
		samples := lat.take()
		res.Samples = len(samples)
		res.LatencyP50MS, res.LatencyP99MS = ms(quantile(samples, 0.50)), ms(quantile(samples, 0.99))
		logf("%s (%s) run %d: latency at %d/s over %s: p50 %.2f ms, p99 %.2f ms (%d samples)", s.Name(), s.Config(), run,
			p.Rate, d.Round(time.Millisecond), res.LatencyP50MS, res.LatencyP99MS, res.Samples)
	}
	return res, nil
}

// stopRunner stops r within a minute, even when ctx has ended.
func stopRunner(ctx context.Context, r runner) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	return r.Stop(sctx)
}

// bounded runs f with ctx bounded by timeout; an expired bound is reported
// with what.
func bounded(ctx context.Context, timeout time.Duration, what string, f func(context.Context) error) error {
	cause := fmt.Errorf("%s: not done within %s", what, timeout)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, cause)
	defer cancel()
	err := f(ctx)
	if err != nil && errors.Is(context.Cause(ctx), cause) {
		return cause
	}
	return err
}

// issueAll issues N jobs from Issuers goroutines, one call each, and
// returns the time taken.
func issueAll(ctx context.Context, inst instance, p params) (time.Duration, error) {
	var d time.Duration
	err := bounded(ctx, p.Timeout, fmt.Sprintf("issue %d jobs", p.N), func(ctx context.Context) error {
		var err error
		d, err = parallel(ctx, p.Issuers, p.N, 1, func(ctx context.Context, from, to int) error {
			return inst.Issue(ctx, job{Seq: from})
		})
		return err
	})
	return d, err
}

// issueBatches issues N jobs in batches of BatchSize from Issuers goroutines.
func issueBatches(ctx context.Context, b batchIssuer, p params) (time.Duration, error) {
	var d time.Duration
	err := bounded(ctx, p.Timeout, fmt.Sprintf("batch-issue %d jobs", p.N), func(ctx context.Context) error {
		var err error
		d, err = parallel(ctx, p.Issuers, p.N, p.BatchSize, func(ctx context.Context, from, to int) error {
			jobs := make([]job, 0, to-from)
			for i := from; i < to; i++ {
				jobs = append(jobs, job{Seq: i})
			}
			return b.IssueBatch(ctx, jobs)
		})
		return err
	})
	return d, err
}

// parallel calls f for [0,n) in chunks of size from goroutines goroutines
// and returns the time taken; the first error cancels the rest.
func parallel(ctx context.Context, goroutines, n, size int, f func(ctx context.Context, from, to int) error) (time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for range goroutines {
		wg.Go(func() {
			for ctx.Err() == nil {
				from := int(next.Add(int64(size))) - size
				if from >= n {
					return
				}
				to := min(from+size, n)
				if err := f(ctx, from, to); err != nil {
					cancel(fmt.Errorf("job %d: %w", from, err))
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(began)
	if err := context.Cause(ctx); err != nil {
		return d, err
	}
	return d, nil
}

// steady issues Rate jobs a second for LatencyDuration, each from its own
// goroutine at its scheduled time with Sent set, and waits until the runner
// (which had completed done jobs) completes them. It returns the time the
// issuing took.
func steady(ctx context.Context, inst instance, r runner, p params, done int64) (time.Duration, error) {
	total := max(1, int(float64(p.Rate)*p.LatencyDuration.Seconds()))
	interval := time.Second / time.Duration(p.Rate)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	t := time.NewTimer(0)
	defer t.Stop()
	began := time.Now()
	for i := range total {
		if w := time.Until(began.Add(time.Duration(i) * interval)); w > 0 {
			t.Reset(w)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			if err := inst.Issue(ctx, job{Seq: i, Sent: time.Now().UnixNano()}); err != nil {
				cancel(fmt.Errorf("latency phase: issue job %d: %w", i, err))
			}
		})
	}
	wg.Wait()
	d := time.Since(began)
	if err := context.Cause(ctx); err != nil {
		return d, err
	}
	err := bounded(ctx, p.Timeout, fmt.Sprintf("complete the latency phase's %d jobs", total), func(ctx context.Context) error {
		return r.WaitCompleted(ctx, done+int64(total))
	})
	return d, err
}

// latencies collects issue → handler start samples.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) take() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.d
	l.d = nil
	return d
}

// waitCount polls count every 500 µs until it reaches n or ctx ends.
func waitCount(ctx context.Context, n int64, count func() int64) error {
	t := time.NewTicker(500 * time.Microsecond)
	defer t.Stop()
	for count() < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d completed: %w", count(), n, context.Cause(ctx))
		case <-t.C:
		}
	}
	return nil
}

// quantile returns the q-quantile (nearest rank) of d; 0 for none.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// median returns the median of v (the mean of the middle two for an even
// count); 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
