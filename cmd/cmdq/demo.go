package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// Demo handlers, registered by serve and worker unless --no-demo. Their retry
// delay is about a second (instead of exponential from 1 s) so that a tour of
// retries and poisoning finishes in seconds; their poison ceiling is the
// default (cmdq.DefaultPoisonCeiling, 5 attempts).

// demoRetry is the demo handlers' retry policy: 1 s ± 20 % after every failed attempt.
var demoRetry = cmdq.RetryPolicy{Base: time.Second, Max: time.Second, Multiplier: 1}

// demoMaxSleep bounds demo.sleep's ms (10 minutes).
const demoMaxSleep = 10 * time.Minute

// demoEcho completes at once; it records one step whose note is its
// params, and its params as its output.
type demoEcho map[string]any

func (demoEcho) CommandType() string { return "demo.echo" }

// demoSleep sleeps MS milliseconds, then completes.
type demoSleep struct {
	MS int `json:"ms"`
}

func (demoSleep) CommandType() string { return "demo.sleep" }

// demoFail fails its first Times attempts, then completes. With DeferMS
// above 0 it defers them instead (cmdq.RetryAfter by that many
// milliseconds), which do not count toward the poison ceiling.
type demoFail struct {
	Times   int `json:"times"`
	DeferMS int `json:"deferMs,omitempty"`
}

func (demoFail) CommandType() string { return "demo.fail" }

// demoSteps records Steps steps and fails once (on the first attempt) at step FailAt.
type demoSteps struct {
	Steps  int `json:"steps"`
	FailAt int `json:"failAt"`
}

func (demoSteps) CommandType() string { return "demo.steps" }

// registerDemo registers the demo handlers on c. lease, when > 0, is their
// lease (default cmdq.DefaultLease); j, when not nil, journals every
// execution (test instrumentation, see demoJournal).
func registerDemo(c *cmdq.Client, lease time.Duration, j *demoJournal) error {
	opts := cmdq.HandlerOptions{Retry: demoRetry, Lease: lease}
	return errors.Join(
		cmdq.RegisterWith(c, func(ctx context.Context, cmd demoEcho, run *cmdq.Attempt) (err error) {
			defer j.execution(run)(&err)
			b, err := json.Marshal(cmd)
			if err != nil {
				return cmdq.Permanent(err)
			}
			if cmd == nil {
				b = []byte("{}")
				cmd = demoEcho{}
			}
			if err := run.SetOutput(cmd); err != nil {
				return cmdq.Permanent(err)
			}
			return j.step(ctx, run, 1, "echo "+string(b))
		}, opts),
		cmdq.RegisterWith(c, func(ctx context.Context, cmd demoSleep, run *cmdq.Attempt) (err error) {
			defer j.execution(run)(&err)
			d := time.Duration(cmd.MS) * time.Millisecond
			if cmd.MS < 0 || d > demoMaxSleep {
				return cmdq.Permanent(fmt.Errorf("demo.sleep: ms %d is out of range 0..%d", cmd.MS, demoMaxSleep.Milliseconds()))
			}
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return fmt.Errorf("demo.sleep: interrupted: %w", ctx.Err())
			}
		}, opts),
		cmdq.RegisterWith(c, func(ctx context.Context, cmd demoFail, run *cmdq.Attempt) (err error) {
			defer j.execution(run)(&err)
			d := time.Duration(cmd.DeferMS) * time.Millisecond
			if cmd.DeferMS < 0 || d > demoMaxSleep {
				return cmdq.Permanent(fmt.Errorf("demo.fail: deferMs %d is out of range 0..%d", cmd.DeferMS, demoMaxSleep.Milliseconds()))
			}
			if run.Number() > cmd.Times {
				return nil
			}
			if d > 0 {
				return cmdq.RetryAfter(d, fmt.Errorf("demo.fail: planned deferral %d of %d", run.Number(), cmd.Times))
			}
			return fmt.Errorf("demo.fail: planned failure %d of %d", run.Number(), cmd.Times)
		}, opts),
		cmdq.RegisterWith(c, func(ctx context.Context, cmd demoSteps, run *cmdq.Attempt) (err error) {
			defer j.execution(run)(&err)
			if cmd.Steps < 1 || cmd.Steps > 1000 {
				return cmdq.Permanent(fmt.Errorf("demo.steps: steps %d is out of range 1..1000", cmd.Steps))
			}
			for s := run.LastStep() + 1; s <= cmd.Steps; s++ {
				if s == cmd.FailAt && run.Number() == 1 {
					return fmt.Errorf("demo.steps: planned failure at step %d (the retry resumes here)", s)
				}
				if err := j.step(ctx, run, s, fmt.Sprintf("step %d of %d", s, cmd.Steps)); err != nil {
					return err
				}
			}
			return nil
		}, opts),
	)
}

// declareDemo declares the demo types on c without their handlers (serve
// --no-processor: the web tier routes them and checks their params; the
// workers run them), with the lease registerDemo gives them.
func declareDemo(c *cmdq.Client, lease time.Duration) error {
	opts := cmdq.CommandOptions{Lease: lease}
	return errors.Join(
		cmdq.DeclareWith[demoEcho](c, opts),
		cmdq.DeclareWith[demoSleep](c, opts),
		cmdq.DeclareWith[demoFail](c, opts),
		cmdq.DeclareWith[demoSteps](c, opts),
	)
}
