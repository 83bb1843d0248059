package main

// The cmdq adapter: every call into cmdq is in this file, through cmdq's
// public packages only, so a change of cmdq's front door changes this file
// alone.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/commands"
	"github.com/cmdq-dev/cmdq/handlers"
	"github.com/cmdq-dev/cmdq/processor"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// cmdqSystem is cmdq on its embedded store (one file, fsync on), at its
// defaults, with the Issuer waking the in-process processor (Notify), as
// the README shows.
type cmdqSystem struct {
	dir string // parent of each run's store file
}

func (cmdqSystem) Name() string   { return "cmdq" }
func (cmdqSystem) Config() string { return "embedded store, defaults (Issuer wakes the processor)" }
func (cmdqSystem) Durable() string {
	return "yes: fsync per group commit"
}

// cmdqJob is the command the harness issues.
type cmdqJob job

// CommandType implements commands.Command.
func (cmdqJob) CommandType() string { return "peers.noop" }

type cmdqInstance struct {
	dir    string
	st     *embedded.Store
	issuer *commands.Issuer
	// proc is the running processor, woken by the Issuer; nil between phases.
	proc atomic.Pointer[processor.Processor]
}

func (s cmdqSystem) Open(ctx context.Context, run int) (instance, error) {
	dir, err := os.MkdirTemp(s.dir, "cmdq-")
	if err != nil {
		return nil, fmt.Errorf("store directory: %w", err)
	}
	st, err := embedded.Open(filepath.Join(dir, "cmdq-data"), nil)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("open embedded store: %w", err)
	}
	in := &cmdqInstance{dir: dir, st: st}
	in.issuer, err = commands.NewIssuer(st, commands.Options{Notify: in.notify})
	if err != nil {
		_ = in.Close(ctx)
		return nil, fmt.Errorf("issuer: %w", err)
	}
	return in, nil
}

func (in *cmdqInstance) notify(queue string) {
	if p := in.proc.Load(); p != nil {
		p.Notify(queue)
	}
}

func (in *cmdqInstance) Issue(ctx context.Context, j job) error {
	_, err := in.issuer.Issue(ctx, cmdqJob(j))
	return err
}

func (in *cmdqInstance) Start(ctx context.Context, workers int, onStart func(job)) (runner, error) {
	reg := handlers.NewRegistry()
	if err := handlers.Register(reg, func(_ context.Context, c cmdqJob, _ *handlers.Run) error {
		onStart(job(c))
		return nil
	}, handlers.Options{}); err != nil {
		return nil, fmt.Errorf("register handler: %w", err)
	}
	r := &cmdqRunner{in: in, done: make(chan error, 1)}
	p, err := processor.New(in.st, reg, processor.Config{Concurrency: workers, Metrics: &r.count})
	if err != nil {
		return nil, fmt.Errorf("processor: %w", err)
	}
	r.p = p
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	in.proc.Store(p)
	go func() { r.done <- p.Run(pctx) }()
	return r, nil
}

func (in *cmdqInstance) Close(context.Context) error {
	err := in.st.Close()
	if rerr := os.RemoveAll(in.dir); err == nil {
		err = rerr
	}
	return err
}

type cmdqRunner struct {
	in     *cmdqInstance
	p      *processor.Processor
	count  completions
	cancel context.CancelFunc
	done   chan error
}

// WaitCompleted: the processor counts a completion once the final batch is
// written; its message is deleted in the same commit on the embedded store
// (otherwise just after), so the count is also checked against in-flight
// messages.
func (r *cmdqRunner) WaitCompleted(ctx context.Context, n int64) error {
	if err := waitCount(ctx, n, r.count.completed.Load); err != nil {
		return err
	}
	return waitCount(ctx, 1, func() int64 {
		if r.p.Health().InFlight == 0 {
			return 1
		}
		return 0
	})
}

func (r *cmdqRunner) Stop(ctx context.Context) error {
	r.in.proc.CompareAndSwap(r.p, nil)
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// completions counts completed commands (processor.Metrics).
type completions struct{ completed atomic.Int64 }

func (c *completions) CommandCompleted(string)               { c.completed.Add(1) }
func (c *completions) CommandFailed(string)                  {}
func (c *completions) CommandPoisoned(string)                {}
func (c *completions) HandlerDuration(string, time.Duration) {}
func (c *completions) LeaseLost(string)                      {}
func (c *completions) PollInterval(string, time.Duration)    {}
func (c *completions) Polled(string, bool)                   {}
