package processor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// countCalls wraps st and counts every queue and table call.
func countCalls(st storage.Store, n *atomic.Int64) storage.Store {
	return instrument.Wrap(st, instrument.Hooks{Before: func(instrument.Op) error { n.Add(1); return nil }})
}

// TestCheckStorageCost: the readiness check makes no storage call while one
// of the processor's own calls succeeded within ProbeInterval, then one
// ApproximateCount, whose answer serves every check for ProbeInterval.
func TestCheckStorageCost(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, e *env) {
		reg := registry.NewRegistry()
		register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, registry.Options{})
		var calls atomic.Int64
		cfg := e.cfg()
		cfg.MaxPollInterval = time.Minute // idle: one poll a minute
		cfg.MinPollInterval = time.Minute
		cfg.ProbeInterval = 300 * time.Millisecond
		// The heartbeat's first write, from its own goroutine, could land
		// after the first poll and count among the checks' calls.
		cfg.HeartbeatInterval = model.NoHeartbeat
		var polled atomic.Bool // a poll answered (counting its call when it starts is too early)
		cfg.Observer = onPoll(func(ev model.Observation) {
			if ev.Err == nil {
				polled.Store(true)
			}
		})
		p := newProc(t, countCalls(e.store, &calls), reg, cfg)
		start(t, p)
		eventually(t, 10*time.Second, "the first poll", polled.Load)
		ctx := context.Background()
		before := calls.Load()
		if err := p.CheckStorage(ctx); err != nil || calls.Load() != before || p.ProbeCalls() != 0 {
			t.Fatalf("check right after a successful poll: %v, %d calls", err, calls.Load()-before)
		}
		eventually(t, 5*time.Second, "the last success to age past ProbeInterval", func() bool {
			if err := p.CheckStorage(ctx); err != nil {
				t.Fatal(err)
			}
			return p.ProbeCalls() == 1
		})
		for range 20 {
			if err := p.CheckStorage(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if p.ProbeCalls() != 1 || calls.Load()-before != 1 {
			t.Fatalf("21 checks within ProbeInterval made %d probes (%d calls), want 1", p.ProbeCalls(), calls.Load()-before)
		}
	})
}

// TestCheckStorageBounded: with storage black-holed (connections accepted,
// nothing answered) the check answers model.ErrStorageUnavailable within its
// timeout, not after the driver's long retries; and nil once storage is
// back.
func TestCheckStorageBounded(t *testing.T) {
	t.Parallel()
	nw := faultproxy.NewNet(t, azurite.ConnectionString(t))
	st, err := azure.Open(context.Background(), azure.Config{ConnectionString: nw.ConnectionString,
		Retry: policy.RetryOptions{TryTimeout: time.Minute}}) // the driver's default budget: 4 tries of a minute
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := newEnv(t, "azure", st, func() storage.Store { return st })
	reg := registry.NewRegistry()
	register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error { return nil }, registry.Options{})
	cfg := e.cfg()
	cfg.MinPollInterval, cfg.MaxPollInterval = time.Minute, time.Minute
	cfg.ProbeInterval, cfg.ProbeTimeout = 200*time.Millisecond, 500*time.Millisecond
	p := newProc(t, st, reg, cfg)
	start(t, p)
	eventually(t, 10*time.Second, "a healthy check", func() bool { return p.CheckStorage(context.Background()) == nil })
	nw.BlackHole(t)
	var err2 error
	eventually(t, 10*time.Second, "the check to fail", func() bool {
		err2 = p.CheckStorage(context.Background())
		return err2 != nil
	})
	if !errors.Is(err2, model.ErrStorageUnavailable) {
		t.Fatalf("check: %v, want model.ErrStorageUnavailable", err2)
	}
	nw.Restore(t)
	eventually(t, 10*time.Second, "a healthy check after the black hole", func() bool { return p.CheckStorage(context.Background()) == nil })
}
