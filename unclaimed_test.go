package cmdq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// slowStart is a command whose first attempt runs until its context ends.
type slowStart struct{}

func (slowStart) CommandType() string { return "slow.start" }

// TestStartedNotWrittenInTime: a first run of a pending command whose
// started event cannot be written (table writes fail while the queue
// answers, so its lease is renewed) ends its handler before a recovery's
// second message could show up (the type's lease + StartedWriteDelay after
// it read the command), instead of running on beside that message's
// delivery. Renewals stop; the message reappears when its lease ends and
// its next delivery completes the command, recording that delivery 1
// left no outcome. Both stores.
//
// Table writes fail from before the processor starts, so the test does not
// depend on which way the first delivery goes: a delivery that starts
// late in its window claims first instead (handle.go), and that claim
// fails, so no handler runs on a written started event; the first
// handler to run (whatever its attempt) runs unclaimed.
func TestStartedNotWrittenInTime(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		var failWrites atomic.Bool
		errInjected := fmt.Errorf("%w: injected table write failure", storage.ErrUnavailable)
		st := instrument.Wrap(s.st, instrument.Hooks{Before: func(op instrument.Op) error {
			switch op {
			case instrument.TableBatch, instrument.TableInsert, instrument.TableUpdate, instrument.TableUpsert:
				if failWrites.Load() {
					return errInjected
				}
			}
			return nil
		}})
		c := newClient(t, store{driver: s.driver, st: st, prefix: s.prefix}, fast())
		const lease = 5 * time.Second
		type ended struct {
			attempt int
			cause   string
		}
		first := make(chan ended, 1)
		var runs atomic.Int32
		if err := cmdq.RegisterWith(c, func(ctx context.Context, _ slowStart, run *cmdq.Attempt) error {
			if runs.Add(1) > 1 {
				return nil
			}
			<-ctx.Done()
			first <- ended{run.Number(), context.Cause(ctx).Error()}
			failWrites.Store(false)
			return ctx.Err()
		}, cmdq.HandlerOptions{Lease: lease}); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, slowStart{})
		if err != nil {
			t.Fatal(err)
		}
		failWrites.Store(true) // from now on, started cannot be written
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var e ended
		select {
		case e = <-first:
			// Without the deadline the handler ran on (its lease renewed)
			// until its timeout, 10 leases.
			if !strings.Contains(e.cause, "started event could not be written") {
				t.Fatalf("attempt %d's handler ended with %q; want it cancelled because its started event was not written in time", e.attempt, e.cause)
			}
		case <-ctx.Done():
			t.Fatal("the first handler to run never ended")
		}
		stx, err := c.Wait(ctx, res.ID)
		if err != nil || stx.State != cmdq.StateCompleted || stx.Attempts != e.attempt+1 {
			t.Fatalf("%+v %v, want completed on attempt %d", stx, err, e.attempt+1)
		}
		evs, err := c.Events(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(evs, func(ev cmdq.Event) bool { return ev.Kind == cmdq.EventLeaseLost && ev.Attempt == e.attempt }) {
			t.Fatalf("events %+v: want a lease_lost event for attempt %d", evs, e.attempt)
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatal("test context ended")
		}
	})
}

// lateComplete is a command whose first attempt completes after its lease
// has ended.
type lateComplete struct{}

func (lateComplete) CommandType() string { return "late.complete" }

// TestCompletionAfterFailedRenewals: renewals fail (the queue refuses
// them), the handler is cancelled shortly before its lease ends but
// returns nil only after the lease has ended, and its completion lands. A
// delivery that loaded the command before the completion may have run the
// handler again meanwhile, so the attempt records a lease_lost event
// after its completed one (before, only a lost or orphaned lease did, and
// a delete that found the message taken; here the delete fails). Azure
// only: the embedded store writes the completion and the delete in one
// durable write (storage.Combiner), whose delete answers whether the
// message was taken.
func TestCompletionAfterFailedRenewals(t *testing.T) {
	t.Parallel()
	s := openStore(t, "azure")
	ctx := ctxT(t)
	var failRenewals atomic.Bool
	st := instrument.Wrap(s.st, instrument.Hooks{Before: func(op instrument.Op) error {
		switch {
		case op == instrument.QueueUpdateVisibility && failRenewals.Load():
			return fmt.Errorf("%w: injected renewal failure", storage.ErrUnavailable)
		case op == instrument.QueueDelete && failRenewals.CompareAndSwap(true, false):
			// The completion's delete fails too, so no "message
			// taken" answer tells that the lease ended.
			return fmt.Errorf("%w: injected delete failure", storage.ErrUnavailable)
		}
		return nil
	}})
	c := newClient(t, store{driver: s.driver, st: st, prefix: s.prefix}, fast())
	const lease = 2 * time.Second
	if err := cmdq.RegisterWith(c, func(ctx context.Context, _ lateComplete, run *cmdq.Attempt) error {
		if run.Number() > 1 {
			return nil
		}
		failRenewals.Store(true)
		<-ctx.Done() // cancelled shortly before the lease ends
		// The handler notices late: the lease has ended when it
		// returns (time passing is what is tested here).
		time.Sleep(lease)
		return nil
	}, cmdq.HandlerOptions{Lease: lease}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Issue(ctx, lateComplete{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stx, err := c.Wait(ctx, res.ID)
	if err != nil || stx.State != cmdq.StateCompleted || stx.Attempts != 1 {
		t.Fatalf("%+v %v, want completed on attempt 1", stx, err)
	}
	var evs []cmdq.Event
	waitUntil(t, 30*time.Second, "a lease_lost event after the completion", func() bool {
		evs, err = c.Events(ctx, res.ID)
		return err == nil && slices.ContainsFunc(evs, func(e cmdq.Event) bool { return e.Kind == cmdq.EventLeaseLost && e.Attempt == 1 })
	})
}
