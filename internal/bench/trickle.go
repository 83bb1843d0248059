package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/client"
)

// TrickleResult is the HTTP trickle phase: Clients concurrent HTTP clients
// issue N no-op commands through a real HTTP server (package api on a
// loopback listener, in process) whose cmdq.Client runs the processor, at a
// steady total rate; every storage call of the server is counted until each
// command is completed and its message deleted.
type TrickleResult struct {
	// N is the number of commands issued (after one warm-up command).
	N int `json:"n"`
	// Clients is the number of concurrent HTTP clients.
	Clients int `json:"clients"`
	// RatePerS is the total issue rate, commands per second; 0 means
	// unpaced (each client issues its next command as soon as the last
	// one was answered).
	RatePerS int `json:"rate_per_s"`
	// IssuedPerS is the rate achieved, commands per second.
	IssuedPerS float64 `json:"issued_per_s"`
	// Completed is the number of commands completed in the phase.
	Completed int64 `json:"completed"`
	// CallsPerCommand is every storage call of the phase per completed
	// command, by kind.
	CallsPerCommand Calls `json:"calls_per_command"`
	// CommandsPerDequeue is Completed / dequeues (32 at best, with full
	// batches).
	CommandsPerDequeue float64 `json:"commands_per_dequeue"`
	// LatencyP50MS and LatencyP99MS are HTTP request sent → handler start,
	// milliseconds.
	LatencyP50MS float64 `json:"latency_p50_ms"`
	LatencyP99MS float64 `json:"latency_p99_ms"`
}

// FirstDeliveryResult compares the first delivery of freshly issued
// commands with the fast path (no point read: docs/lifecycle.md, "First
// delivery") and without it (processor.Config.NoFastPath): per completed
// command, issue included, in a burn-down of Config.FirstDeliveryN
// commands each.
type FirstDeliveryResult struct {
	// FastPathShare is the share of the fast-path phase's deliveries that
	// ran without the point read.
	FastPathShare float64 `json:"fast_path_share"`
	// BurnDownShare is the same share in the main burn-down (its messages
	// wait longer: a first delivery more than half a lease after the
	// issue loads the command).
	BurnDownShare float64 `json:"burn_down_share"`
	// FastPath and Fallback are the calls per command of each phase.
	FastPath Calls `json:"fast_path"`
	Fallback Calls `json:"fallback"`
}

// trickle runs the HTTP trickle phase on a fresh prefix.
func (e *env) trickle(ctx context.Context) (*TrickleResult, error) {
	cfg := e.cfg
	res := &TrickleResult{N: cfg.TrickleN, Clients: cfg.TrickleClients, RatePerS: max(cfg.TrickleRate, 0)}
	var completed atomic.Int64
	var lat latencies
	c, err := cmdq.New(e.counted, cmdq.Config{Prefix: cfg.Prefix + "h",
		Worker: "bench", Concurrency: cfg.Concurrency, BatchSize: cfg.BatchSize, NewBatchThreshold: cfg.NewBatchThreshold,
		MaxPollInterval: cfg.MaxPollInterval, ReconcileInterval: cmdq.NoReconcile, Observers: []cmdq.Observer{cmdq.ObserverFunc(func(o cmdq.Observation) {
			if o.Kind == cmdq.ObservedCompleted {
				completed.Add(1)
			}
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("bench: trickle client: %w", err)
	}
	if err := cmdq.Register(c, func(ctx context.Context, b benchCmd, _ *cmdq.Attempt) error {
		if b.Sent != 0 {
			lat.add(time.Since(time.Unix(0, b.Sent)))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("bench: trickle handler: %w", err)
	}
	h, err := api.New(api.Config{Client: c, Gatherer: prometheus.NewRegistry()})
	if err != nil {
		return nil, fmt.Errorf("bench: trickle API: %w", err)
	}
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	if err := c.Start(pctx); err != nil {
		return nil, fmt.Errorf("bench: trickle processor: %w", err)
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: trickle listener: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	base := "http://" + ln.Addr().String()
	newClient := func() (*client.Remote, error) {
		return client.New(base, client.WithHTTPClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}))
	}
	issue := func(hc *client.Remote, seq int) error {
		params, err := json.Marshal(benchCmd{Seq: seq, Sent: time.Now().UnixNano()})
		if err != nil {
			return err
		}
		_, err = hc.Issue(ctx, client.IssueRequest{Type: benchCmd{}.CommandType(), Params: json.RawMessage(params)})
		return err
	}

	// Warm-up: the queue and tables exist and one command went through
	// before counting.
	hc, err := newClient()
	if err != nil {
		return nil, fmt.Errorf("bench: trickle HTTP client: %w", err)
	}
	if err := issue(hc, -1); err != nil {
		return nil, fmt.Errorf("bench: trickle warm-up issue: %w", err)
	}
	idle := func() bool { return c.Health().InFlight == 0 }
	if err := waitFor(ctx, cfg.Timeout, "trickle warm-up command", func() bool { return completed.Load() >= 1 && idle() }); err != nil {
		return nil, err
	}
	lat.take()
	ops0, done0 := e.counter.Snapshot(), completed.Load()

	pace := "unpaced"
	if cfg.TrickleRate > 0 {
		pace = fmt.Sprintf("%d/s in all", cfg.TrickleRate)
	}
	e.logf("http trickle: %d commands from %d HTTP clients, %s", cfg.TrickleN, cfg.TrickleClients, pace)
	ictx, cancel := context.WithTimeoutCause(ctx, cfg.Timeout, fmt.Errorf("bench: trickle: issuing took over %s", cfg.Timeout))
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, cfg.TrickleClients)
	began := time.Now()
	for range cfg.TrickleClients {
		hc, err := newClient()
		if err != nil {
			return nil, fmt.Errorf("bench: trickle HTTP client: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(0)
			defer t.Stop()
			for {
				k := int(next.Add(1)) - 1
				if k >= cfg.TrickleN || ictx.Err() != nil {
					return
				}
				if cfg.TrickleRate > 0 {
					// Command k's slot; a client that fell behind issues at once.
					if w := time.Until(began.Add(time.Duration(k) * time.Second / time.Duration(cfg.TrickleRate))); w > 0 {
						t.Reset(w)
						select {
						case <-t.C:
						case <-ictx.Done():
							return
						}
					}
				}
				if err := issue(hc, k); err != nil {
					errc <- fmt.Errorf("bench: trickle issue %d: %w", k, err)
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	res.IssuedPerS = float64(cfg.TrickleN) / time.Since(began).Seconds()
	close(errc)
	if err := errors.Join(func() (errs []error) {
		for err := range errc {
			errs = append(errs, err)
		}
		return
	}()...); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, cfg.Timeout, "complete the trickle's commands", func() bool {
		return completed.Load() >= done0+int64(cfg.TrickleN) && idle()
	}); err != nil {
		return nil, err
	}
	d := diff(ops0, e.counter.Snapshot())
	res.Completed = completed.Load() - done0
	res.CallsPerCommand = callsPer(d, float64(res.Completed))
	if d[OpDequeue] > 0 {
		res.CommandsPerDequeue = float64(res.Completed) / float64(d[OpDequeue])
	}
	l := lat.take()
	res.LatencyP50MS, res.LatencyP99MS = ms(quantile(l, 0.50)), ms(quantile(l, 0.99))
	return res, nil
}
