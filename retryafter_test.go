package cmdq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// deferJob is the command of the RetryAfter tests.
type deferJob struct{}

func (deferJob) CommandType() string { return "test.defer" }

// errBusy is what a downstream answered (wrapped by RetryAfter).
var errBusy = errors.New("downstream busy (429)")

// deferDelay is the tests' RetryAfter delay.
const deferDelay = 50 * time.Millisecond

// countKinds counts evs by kind.
func countKinds(evs []cmdq.Event) map[cmdq.EventKind]int {
	n := map[cmdq.EventKind]int{}
	for _, e := range evs {
		n[e.Kind]++
	}
	return n
}

// checkDeferredTiming checks that every deferred event records its retry
// time (RunAt = its Time + deferDelay) and that the next attempt's started
// event is not earlier than that (the times are the processor's clock, in
// milliseconds: no tolerance is needed for "not before").
func checkDeferredTiming(t *testing.T, evs []cmdq.Event) {
	t.Helper()
	for i, e := range evs {
		if e.Kind != cmdq.EventDeferred {
			continue
		}
		if want := e.Time.Add(deferDelay); !e.RunAt.Equal(want) {
			t.Errorf("deferred event %d: RunAt %v, want its time + %s = %v", e.Seq, e.RunAt, deferDelay, want)
		}
		for _, next := range evs[i+1:] {
			if next.Kind == cmdq.EventStarted {
				if next.Time.Before(e.Time.Add(deferDelay)) {
					t.Errorf("attempt %d started at %v, before deferred event %d's time + %s (%v)", next.Attempt, next.Time, e.Seq, deferDelay, e.Time.Add(deferDelay))
				}
				break
			}
		}
	}
}

// TestRetryAfterDoesNotSpendAttempts: a handler that defers (RetryAfter)
// more times than the poison ceiling allows attempts, then succeeds,
// completes: each deferral is a deferred event (not failed), retried
// after its delay (never before), and none counts toward the ceiling.
// The deferral's observation carries the handler's error, seen through
// the wrapper (errors.Is, IsRetryAfter). Both stores.
func TestRetryAfterDoesNotSpendAttempts(t *testing.T) {
	t.Parallel()
	const ceiling, defers = 3, 6
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		obs := newObserved()
		cfg := fast()
		cfg.Observers = []cmdq.Observer{obs}
		c := newClient(t, s, cfg)
		var calls atomic.Int64
		if err := cmdq.RegisterWith(c, func(ctx context.Context, _ deferJob, a *cmdq.Attempt) error {
			if calls.Add(1) <= defers {
				return cmdq.RetryAfter(deferDelay, fmt.Errorf("call downstream: %w", errBusy))
			}
			return nil
		}, cmdq.HandlerOptions{PoisonCeiling: ceiling}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, deferJob{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Wait(ctx, res.ID)
		evs, eerr := c.Events(ctx, res.ID)
		if eerr != nil {
			t.Fatal(eerr)
		}
		if err != nil || st.State != cmdq.StateCompleted || st.Attempts != defers+1 || st.Deferrals != defers {
			t.Fatalf("status %+v (%v), want completed on attempt %d with %d deferrals; events %v", st, err, defers+1, defers, kinds(evs))
		}
		n := countKinds(evs)
		if n[cmdq.EventDeferred] != defers || n[cmdq.EventStarted] != defers+1 || n[cmdq.EventFailed] != 0 ||
			n[cmdq.EventCompleted] != 1 || n[cmdq.EventPoisoned] != 0 || len(evs) != 1+2*defers+2 {
			t.Fatalf("events %v, want created, %d × (started, deferred), started, completed", kinds(evs), defers)
		}
		for _, e := range evs {
			if e.Kind != cmdq.EventDeferred {
				continue
			}
			if e.Error != "retry after 50ms: call downstream: downstream busy (429)" || !strings.Contains(e.Detail, "not counted toward the poison ceiling of 3") {
				t.Fatalf("deferred event %+v: want the error and why it does not count", e)
			}
		}
		checkDeferredTiming(t, evs)
		deferred := 0
		obs.mu.Lock()
		for _, o := range obs.events {
			switch o.Kind {
			case cmdq.ObservedDeferred:
				deferred++
				d, ok := cmdq.IsRetryAfter(o.Err)
				if !errors.Is(o.Err, errBusy) || !ok || d != deferDelay {
					t.Errorf("deferral observed with %v: errors.Is(errBusy) %v, IsRetryAfter %v %v", o.Err, errors.Is(o.Err, errBusy), d, ok)
				}
			case cmdq.ObservedFailed:
				t.Errorf("a deferral was observed as a failure: %+v", o)
			}
		}
		obs.mu.Unlock()
		if deferred != defers {
			t.Fatalf("%d deferrals observed, want %d", deferred, defers)
		}
	})
}

// TestRetryAfterPastMaxDeferrals: a handler that always defers, with two
// deferrals allowed (Config.MaxDeferrals overrides the type's 5) and a
// poison ceiling of 3, ends poisoned after exactly 2 deferrals and then 3
// counted attempts: deliveries 3 and 4 are failed events that say the
// deferrals are spent (retried after the deferral's delay, not before),
// and delivery 5 is the last the ceiling allows. Both stores.
func TestRetryAfterPastMaxDeferrals(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.MaxDeferrals = 2
		c := newClient(t, s, cfg)
		if err := cmdq.RegisterWith(c, func(ctx context.Context, _ deferJob, a *cmdq.Attempt) error {
			return cmdq.RetryAfter(deferDelay, errBusy)
		}, cmdq.HandlerOptions{PoisonCeiling: 3, MaxDeferrals: 5}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, deferJob{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Wait(ctx, res.ID)
		evs, eerr := c.Events(ctx, res.ID)
		if eerr != nil {
			t.Fatal(eerr)
		}
		if err != nil || st.State != cmdq.StatePoisoned || st.Attempts != 5 || st.Deferrals != 2 {
			t.Fatalf("status %+v (%v), want poisoned after 5 attempts, 2 of them deferrals; events %v", st, err, kinds(evs))
		}
		// The processor's counts tell deferrals from failed attempts
		// (the poisoning attempt is counted as poisoned).
		waitUntil(t, 30*time.Second, "Stats count 2 deferrals and 2 failed attempts", func() bool {
			s := c.Stats()
			return s.Deferred == 2 && s.Failed == 2 && s.Poisoned == 1
		})
		want := []cmdq.EventKind{cmdq.EventCreated,
			cmdq.EventStarted, cmdq.EventDeferred, cmdq.EventStarted, cmdq.EventDeferred,
			cmdq.EventStarted, cmdq.EventFailed, cmdq.EventStarted, cmdq.EventFailed, cmdq.EventStarted, cmdq.EventFailed,
			cmdq.EventPoisoned}
		if got := kinds(evs); len(got) != len(want) || strings.Join(strs(got), " ") != strings.Join(strs(want), " ") {
			t.Fatalf("events %v, want %v", got, want)
		}
		for i, e := range evs {
			if e.Kind != cmdq.EventFailed {
				continue
			}
			poisoning := i+1 < len(evs) && evs[i+1].Kind == cmdq.EventPoisoned
			if !strings.Contains(e.Detail, "the 2 deferrals MaxDeferrals allows are spent") || !poisoning && !e.RunAt.Equal(e.Time.Add(deferDelay)) {
				t.Fatalf("failed event %+v: want it to say the deferrals are spent, due after the deferral's delay", e)
			}
			if poisoning && !e.RunAt.IsZero() {
				t.Fatalf("the poisoning attempt's failed event %+v names a retry (none comes)", e)
			}
		}
		last := evs[len(evs)-1]
		if last.Reason != cmdq.ReasonAttemptsSpent || !strings.Contains(last.Error, "attempt 3 of at most 3 failed (delivery 5; 2 deferrals did not count)") {
			t.Fatalf("poisoned event %+v", last)
		}
		checkDeferredTiming(t, evs)
		for i, e := range evs { // the counted attempts wait for the deferral's delay too
			if e.Kind == cmdq.EventFailed && i+1 < len(evs) && evs[i+1].Kind == cmdq.EventStarted && evs[i+1].Time.Before(e.RunAt) {
				t.Fatalf("attempt %d started at %v, before its due time %v", evs[i+1].Attempt, evs[i+1].Time, e.RunAt)
			}
		}
	})
}

// TestRetryAfterWaiting: while a deferred command waits, its status is
// retrying, due at the deferred event's RunAt, and says why (Waiting
// reason "deferred"); a delay over MaxDelay is cut to it. Both stores.
func TestRetryAfterWaiting(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newClient(t, s, fast())
		if err := cmdq.Register(c, func(ctx context.Context, _ deferJob, a *cmdq.Attempt) error {
			return cmdq.RetryAfter(30*24*time.Hour, errBusy)
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, deferJob{})
		if err != nil {
			t.Fatal(err)
		}
		var st cmdq.Status
		waitUntil(t, time.Minute, "the command is deferred", func() bool {
			st, err = c.Get(ctx, res.ID)
			if err != nil {
				t.Fatal(err)
			}
			return st.Deferrals == 1
		})
		evs, err := c.Events(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		d := evs[len(evs)-1]
		if d.Kind != cmdq.EventDeferred || !d.RunAt.Equal(d.Time.Add(cmdq.MaxDelay)) {
			t.Fatalf("last event %+v, want deferred for MaxDelay", d)
		}
		if st.State != cmdq.StateRetrying || !st.RunAt.Equal(d.RunAt) || st.Attempts != 1 ||
			st.Waiting == nil || st.Waiting.Reason != cmdq.WaitDeferred || !st.Waiting.Until.Equal(d.RunAt) {
			t.Fatalf("status %+v (waiting %+v), want retrying, deferred until %v", st, st.Waiting, d.RunAt)
		}
	})
}

func strs(ks []cmdq.EventKind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

// TestRetryAfterError: RetryAfter's error wraps its cause (errors.Is and
// errors.As see through it, and through a wrapper around it), says its
// delay, and IsRetryAfter tells it from other errors.
func TestRetryAfterError(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("charge card: %w", cmdq.RetryAfter(30*time.Second, errBusy))
	if d, ok := cmdq.IsRetryAfter(err); !ok || d != 30*time.Second || !errors.Is(err, errBusy) {
		t.Fatalf("IsRetryAfter(%v) = %v %v, errors.Is %v", err, d, ok, errors.Is(err, errBusy))
	}
	if err.Error() != "charge card: retry after 30s: downstream busy (429)" {
		t.Fatalf("text %q", err)
	}
	var target *deferCause
	if !errors.As(cmdq.RetryAfter(time.Second, &deferCause{"x"}), &target) || target.s != "x" {
		t.Fatal("errors.As does not see through RetryAfter")
	}
	noCause := cmdq.RetryAfter(time.Minute, nil)
	if d, ok := cmdq.IsRetryAfter(noCause); noCause == nil || !ok || d != time.Minute || noCause.Error() != "retry after 1m0s" || errors.Unwrap(noCause) != nil {
		t.Fatalf("RetryAfter(1m, nil) = %v", noCause)
	}
	for _, other := range []error{nil, errBusy, cmdq.Permanent(errBusy)} {
		if _, ok := cmdq.IsRetryAfter(other); ok {
			t.Fatalf("IsRetryAfter(%v) is true", other)
		}
	}
}

type deferCause struct{ s string }

func (e *deferCause) Error() string { return e.s }

// TestRetryAfterCostsWhatAFailureCosts: a command deferred once, then
// completed, makes the same outcome writes as one that failed once, then
// completed — 3 batches (the issue, the attempt's outcome with its
// started event, the completion), 1 UpdateVisibility (the delay), 1
// enqueue and 1 delete — so the deferral count costs no storage call of
// its own. Both stores (counted by testenv; the started event's own
// write is put off past the handlers, so it rides with the outcome).
func TestRetryAfterCostsWhatAFailureCosts(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		counts := map[string]map[string]int{}
		for _, how := range []string{"failed", "deferred"} {
			ctx := ctxT(t)
			cfg := fast()
			cfg.Prefix = env.Prefix + how[:1]
			cfg.StartedWriteDelay = time.Minute
			c, err := cmdq.New(env.Store, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			if err := cmdq.RegisterWith(c, func(ctx context.Context, _ deferJob, a *cmdq.Attempt) error {
				switch {
				case calls.Add(1) > 1:
					return nil
				case how == "deferred":
					return cmdq.RetryAfter(deferDelay, errBusy)
				}
				return errBusy
			}, cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: deferDelay, Max: deferDelay, Jitter: cmdq.NoJitter}}); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			env.Store.Reset()
			res, err := c.Issue(ctx, deferJob{})
			if err != nil {
				t.Fatal(err)
			}
			st, err := c.Wait(ctx, res.ID)
			if err != nil || st.State != cmdq.StateCompleted || st.Attempts != 2 {
				t.Fatalf("%s once: %+v %v, want completed on attempt 2", how, st, err)
			}
			if err := c.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			counts[how] = env.Store.Counts()
			evs, err := c.Events(ctx, res.ID)
			if err != nil {
				t.Fatal(err)
			}
			if n := countKinds(evs); n[cmdq.EventKind(how)] != 1 {
				t.Fatalf("%s once: events %v", how, kinds(evs))
			}
		}
		for _, op := range []string{"Batch", "UpdateVisibility", "Enqueue", "DeleteMessage"} {
			want := map[string]int{"Batch": 3, "UpdateVisibility": 1, "Enqueue": 1, "DeleteMessage": 1}[op]
			if f, d := counts["failed"][op], counts["deferred"][op]; f != want || d != want {
				t.Errorf("%s: %d after a failure, %d after a deferral; want %d each (all counts: failed %v, deferred %v)", op, f, d, want, counts["failed"], counts["deferred"])
			}
		}
		t.Logf("storage calls, fail once then complete: %v; defer once then complete: %v", counts["failed"], counts["deferred"])
	})
}
