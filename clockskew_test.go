package cmdq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/storage"
)

// skewedStore is an Azure store as a process whose clock is off by "by"
// (ahead; negative: behind) sees it: its measured offset from the
// service's clock (the Date headers) is by less.
type skewedStore struct {
	storage.Store
	by time.Duration
}

func (s skewedStore) ClockOffset() (offset, uncertainty time.Duration, ok bool) {
	o, u, ok := storage.ClockOffset(s.Store)
	return o - s.by, u, ok
}

// TestClockSkew: processors whose clocks are 5 minutes ahead or behind,
// on an Azure queue, run on the storage service's time: a command
// scheduled 6 s ahead by an issuer with a good clock starts no earlier
// than its run-at time and within seconds of it (a processor 5 min behind
// would hold it for 5 min more: the control shows it does without the
// service's clock), and their health reports the offset as skewed.
func TestClockSkew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		by       time.Duration
		noServer bool // the control: the skewed clock alone
	}{{"ahead", 5 * time.Minute, false}, {"behind", -5 * time.Minute, false}, {"behind-uncorrected", -5 * time.Minute, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t, "azure")
			ctx := ctxT(t)
			issuer := newClient(t, s, fast())
			if err := cmdq.Declare[greet](issuer); err != nil {
				t.Fatal(err)
			}
			worker := skewedWorker(t, s, tc.by, tc.noServer)
			var mu sync.Mutex
			var started time.Time
			if err := cmdq.Register(worker, func(context.Context, greet, *cmdq.Attempt) error {
				mu.Lock()
				defer mu.Unlock()
				if started.IsZero() {
					started = time.Now()
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := worker.Start(ctx); err != nil {
				t.Fatal(err)
			}
			runAt := time.Now().Add(6 * time.Second)
			res, err := issuer.Issue(ctx, greet{Name: "on time"}, cmdq.At(runAt))
			if err != nil {
				t.Fatal(err)
			}
			wait := 90 * time.Second
			if tc.noServer {
				wait = 16 * time.Second // 10 s past its run-at time
			}
			wctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			st2, err := worker.Wait(wctx, res.ID)
			if tc.noServer {
				if err == nil {
					t.Fatalf("the control (a clock %s off, no service clock) ran the command within 10 s of its run-at time (%+v): the test cannot tell", tc.by, st2)
				}
				return
			}
			if err != nil || st2.State != cmdq.StateCompleted {
				t.Fatalf("a command due in 6 s on a processor %s by %s: %+v %v", tc.name, tc.by, st2, err)
			}
			mu.Lock()
			early := runAt.Sub(started)
			mu.Unlock()
			// The run-at time is whole milliseconds: 1 ms early is its rounding.
			if early > time.Millisecond {
				t.Fatalf("started %s before its run-at time on a processor %s by %s", early, tc.name, tc.by)
			}
			if late := -early; late > 30*time.Second {
				t.Fatalf("started %s after its run-at time on a processor %s by %s", late, tc.name, tc.by)
			}
			if h := worker.Health(); !h.ClockSkewed || (h.ClockOffset+tc.by).Abs() > 3*time.Second {
				t.Fatalf("health says offset %s, skewed %v; want about %s, skewed", h.ClockOffset, h.ClockSkewed, -tc.by)
			}
		})
	}
}

// TestClockSkewPermits: a processor 5 minutes behind holds a permit of a
// type limited to 1 across processes; a processor with a good clock does
// not take it over while it is held (a permit stamped by the slow clock
// alone looks expired 4.5 minutes ago: the control shows the second
// handler then runs beside the first).
func TestClockSkewPermits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		noServer bool
	}{{"corrected", false}, {"uncorrected", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t, "azure")
			ctx := ctxT(t)
			gauge := newPeakGauge(2)
			hold := make(chan struct{})
			handler := func(ctx context.Context, _ charge, _ *cmdq.Attempt) error {
				gauge.enter()
				defer gauge.leave()
				select {
				case <-hold:
					return nil
				case <-gauge.reached:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			slow := skewedWorker(t, s, -5*time.Minute, tc.noServer)
			good := newClient(t, store{driver: s.driver, st: otherProcess(t, s), prefix: s.prefix}, fast())
			for _, c := range []*cmdq.Client{slow, good} {
				if err := cmdq.RegisterWith(c, handler, cmdq.HandlerOptions{GlobalConcurrency: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if err := slow.Start(ctx); err != nil {
				t.Fatal(err)
			}
			first, err := slow.Issue(ctx, charge{N: 1})
			if err != nil {
				t.Fatal(err)
			}
			waitUntil(t, time.Minute, "the slow processor runs the first command", func() bool { r, _ := gauge.get(); return r == 1 })
			if err := good.Start(ctx); err != nil {
				t.Fatal(err)
			}
			second, err := good.Issue(ctx, charge{N: 2})
			if err != nil {
				t.Fatal(err)
			}
			// The good processor has the second command; give it 5 s to
			// (wrongly) take the permit over.
			overlap := false
			select {
			case <-gauge.reached:
				overlap = true
			case <-time.After(5 * time.Second):
			}
			if tc.noServer {
				if !overlap {
					t.Fatal("the control (permits stamped by a clock 5 min behind) kept the limit: the test cannot tell")
				}
				return
			}
			if overlap {
				t.Fatal("two handlers of a type limited to 1 ran at once: a permit stamped by a clock 5 min behind was taken over while held")
			}
			close(hold)
			for _, id := range []string{first.ID, second.ID} {
				if st, err := good.Wait(ctx, id); err != nil || st.State != cmdq.StateCompleted {
					t.Fatalf("command %s: %+v %v", id, st, err)
				}
			}
		})
	}
}

// skewedWorker is a Client on s whose machine clock is off by "by": on
// the service's time (its offset measured by that clock), or with
// noServer, on the skewed clock alone.
func skewedWorker(t *testing.T, s store, by time.Duration, noServer bool) *cmdq.Client {
	t.Helper()
	cfg := fast()
	st := storage.Store(skewedStore{Store: otherProcess(t, s), by: by})
	if noServer {
		st = otherProcess(t, s)
		cfg.Clock = offsetClock(by)
	}
	return newTuned(t, st, s.prefix, cfg, tuning.Switches{LocalClockOffset: by})
}

// offsetClock is the system clock moved by d.
type offsetClock time.Duration

func (o offsetClock) Now() time.Time { return time.Now().Add(time.Duration(o)) }
func (o offsetClock) NewTimer(d time.Duration) cmdq.Timer {
	return stdTimer{time.NewTimer(d)}
}
func (o offsetClock) AfterFunc(d time.Duration, f func()) cmdq.Timer {
	return stdTimer{time.AfterFunc(d, f)}
}

type stdTimer struct{ t *time.Timer }

func (t stdTimer) C() <-chan time.Time        { return t.t.C }
func (t stdTimer) Stop() bool                 { return t.t.Stop() }
func (t stdTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
