package main

// The cmdq adapter: every call into cmdq is in this file, through cmdq's
// public packages only, so a change of cmdq's front door changes this file
// alone.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// cmdqSystem is cmdq on its embedded store (one data directory, fsync on),
// at its defaults, through its front door (cmdq.Client): the client that
// processes also issues while it runs, so an issue wakes its processor at
// once, as the README shows.
type cmdqSystem struct {
	dir string // parent of each run's store directory
}

func (cmdqSystem) Name() string   { return "cmdq" }
func (cmdqSystem) Config() string { return "embedded store, defaults (an issue wakes the processor)" }
func (cmdqSystem) Durable() string {
	return "yes: fsync per group commit"
}

// cmdqJob is the command the harness issues.
type cmdqJob job

// CommandType implements cmdq.Command.
func (cmdqJob) CommandType() string { return "peers.noop" }

type cmdqInstance struct {
	dir  string
	st   *embedded.Store
	idle *cmdq.Client // issues while no phase processes
	// active is the processing phase's client, which issues too (its
	// issues wake its processor); nil between phases.
	active atomic.Pointer[cmdq.Client]
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
	if in.idle, err = cmdq.New(st, cmdq.Config{}); err != nil {
		_ = in.Close(ctx)
		return nil, fmt.Errorf("client: %w", err)
	}
	return in, nil
}

func (in *cmdqInstance) Issue(ctx context.Context, j job) error {
	c := in.active.Load()
	if c == nil {
		c = in.idle
	}
	_, err := c.Issue(ctx, cmdqJob(j))
	return err
}

func (in *cmdqInstance) Start(ctx context.Context, workers int, onStart func(job)) (runner, error) {
	r := &cmdqRunner{in: in}
	c, err := cmdq.New(in.st, cmdq.Config{Concurrency: workers, Observers: []cmdq.Observer{&r.count}})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if err := cmdq.Register(c, func(_ context.Context, cj cmdqJob, _ *cmdq.Attempt) error {
		onStart(job(cj))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("register handler: %w", err)
	}
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	r.c = c
	in.active.Store(c)
	return r, nil
}

func (in *cmdqInstance) Close(ctx context.Context) error {
	if in.idle != nil {
		_ = in.idle.Stop(ctx)
	}
	err := in.st.Close()
	if rerr := os.RemoveAll(in.dir); err == nil {
		err = rerr
	}
	return err
}

type cmdqRunner struct {
	in    *cmdqInstance
	c     *cmdq.Client
	count completions
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
		if r.c.Stats().InFlight == 0 {
			return 1
		}
		return 0
	})
}

func (r *cmdqRunner) Stop(ctx context.Context) error {
	r.in.active.CompareAndSwap(r.c, nil)
	return r.c.Stop(ctx)
}

// completions counts completed commands (a cmdq.Observer).
type completions struct {
	completed atomic.Int64
}

// Observe counts completions.
func (c *completions) Observe(o cmdq.Observation) {
	if o.Kind == cmdq.ObservedCompleted {
		c.completed.Add(1)
	}
}
