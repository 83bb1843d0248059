package periodic_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/periodic"
)

// TestStopDrainsIssuesInFlight: a tick whose issue is in flight when Run's
// context ends is not canceled (every process may have left that tick to
// the others): Run waits for it, and the issue ends as stored. With Drain
// 0, or once Drain has passed, the issue's context is canceled.
func TestStopDrainsIssuesInFlight(t *testing.T) {
	sched, err := periodic.Parse("@every 1s")
	if err != nil {
		t.Fatal(err)
	}
	run := func(drain time.Duration) (issueCtx context.Context, release func(), cancel context.CancelFunc, done <-chan struct{}, issued *atomic.Int32) {
		began := make(chan context.Context, 1)
		rel := make(chan struct{})
		issued = new(atomic.Int32)
		var calls atomic.Int32
		e := periodic.Entry{Name: "drain", Schedule: sched, Issue: func(ctx context.Context, id string, tick time.Time) error {
			if calls.Add(1) > 1 {
				return nil // later ticks: stored at once
			}
			began <- ctx
			<-rel
			return ctx.Err()
		}}
		ctx, cancel := context.WithCancel(context.Background())
		d := make(chan struct{})
		go func() {
			defer close(d)
			periodic.Run(ctx, []periodic.Entry{e}, time.Now(), nil, periodic.Options{Drain: drain,
				Issued: func(string, time.Time, bool) { issued.Add(1) }})
		}()
		select {
		case issueCtx = <-began:
		case <-time.After(time.Minute):
			t.Fatal("no tick issued in a minute")
		}
		return issueCtx, releaser(rel), cancel, d, issued
	}

	t.Run("in flight at stop", func(t *testing.T) {
		ictx, release, cancel, done, issued := run(time.Minute)
		cancel()
		select {
		case <-done:
			t.Fatal("Run returned with an issue in flight")
		default:
		}
		if err := ictx.Err(); err != nil {
			t.Fatalf("the issue in flight was canceled at stop (%v); want it to go on for Drain (1 min)", err)
		}
		release()
		<-done
		if issued.Load() < 1 {
			t.Fatal("the tick in flight at stop is not reported issued")
		}
	})
	t.Run("drain 0", func(t *testing.T) {
		ictx, release, cancel, done, _ := run(0)
		cancel()
		<-ictx.Done() // the test's timeout fails it if never
		release()
		<-done
	})
	t.Run("drain passed", func(t *testing.T) {
		ictx, release, cancel, done, _ := run(10 * time.Millisecond)
		cancel()
		<-ictx.Done()
		release()
		<-done
	})
}

// releaser returns a func that closes ch once.
func releaser(ch chan struct{}) func() {
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			close(ch)
		}
	}
}
