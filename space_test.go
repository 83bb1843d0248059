package cmdq_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

type spaceJob struct {
	N     int  `json:"n"`
	Block bool `json:"block"`
}

func (spaceJob) CommandType() string { return "test.space" }

// fakeDisk is an embedded store's free-space probe (Options.FreeSpace)
// that a test sets.
type fakeDisk struct{ free atomic.Uint64 }

func (d *fakeDisk) probe(string) (uint64, error) { return d.free.Load(), nil }

const (
	testReserve = 256 << 20
	plenty      = 100 << 30
)

// TestStorageFull runs a Client on an embedded store whose free space the
// test sets (the only store with a local disk: Azure never refuses, so
// this test has no Azure variant). Above the reserve plus the issue
// headroom everything flows; in the headroom, new commands are refused
// (Issue, IssueRaw, IssueMany, CheckStorage: ErrStorageFull) while
// accepted work still completes; below the reserve the processor takes no
// work and says why in Health, other writes (Cancel) are refused too and
// reads go on; once space returns, commands are accepted again without a
// restart and every accepted command completes.
func TestStorageFull(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	disk := &fakeDisk{}
	disk.free.Store(plenty)
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), &embedded.Options{Reserve: testReserve, FreeSpace: disk.probe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	c := newClient(t, store{driver: "embedded", st: st}, fast())
	gate := make(chan struct{})
	var ran atomic.Int64
	if err := cmdq.Register(c, func(ctx context.Context, j spaceJob, _ *cmdq.Attempt) error {
		if j.Block {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		ran.Add(1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { stop(); <-done }()

	var accepted []string
	issue := func(j spaceJob, opts ...cmdq.IssueOption) {
		t.Helper()
		res, err := c.Issue(ctx, j, opts...)
		if err != nil {
			t.Fatalf("issue %d: %v", j.N, err)
		}
		accepted = append(accepted, res.ID)
	}
	// Plenty of space: two commands that block in their handler (taken
	// before the disk fills), and three scheduled a few seconds ahead.
	issue(spaceJob{N: 1, Block: true})
	issue(spaceJob{N: 2, Block: true})
	waitUntil(t, time.Minute, "the blocking commands run", func() bool { return c.Health().InFlight == 2 })
	const ahead = 4 * time.Second
	due := time.Now().Add(ahead)
	for n := 3; n <= 5; n++ {
		issue(spaceJob{N: n}, cmdq.After(ahead))
	}
	scheduled := append([]string(nil), accepted[2:]...)

	// In the issue headroom: new commands are refused, nothing stored.
	disk.free.Store(testReserve + uint64(cmdq.DefaultIssueHeadroom) - 1)
	waitUntil(t, time.Minute, "Issue is refused", func() bool {
		// Until the store probes its disk again (within a second), the
		// issue is accepted: such commands count as accepted.
		res, err := c.Issue(ctx, spaceJob{N: 99})
		if err != nil && !errors.Is(err, cmdq.ErrStorageFull) {
			t.Fatalf("Issue in the headroom: %v, want ErrStorageFull", err)
		}
		if err == nil {
			accepted = append(accepted, res.ID)
		}
		return err != nil
	})
	_, err = c.Issue(ctx, spaceJob{N: 99})
	if !strings.Contains(fmt.Sprint(err), "free") || !strings.Contains(fmt.Sprint(err), st.Dir()) {
		t.Errorf("refusal %v does not name the data directory and its free space", err)
	}
	if _, err := c.IssueRaw(ctx, cmdq.Raw{Type: "test.space"}); !errors.Is(err, cmdq.ErrStorageFull) {
		t.Errorf("IssueRaw in the headroom: %v, want ErrStorageFull", err)
	}
	res, err := c.IssueMany(ctx, spaceJob{N: 97}, spaceJob{N: 98})
	if !errors.Is(err, cmdq.ErrStorageFull) || len(res) != 2 || res[0].ID != "" || res[1].ID != "" {
		t.Errorf("IssueMany in the headroom: %v %+v, want ErrStorageFull and no IDs", err, res)
	}
	if err := c.CheckStorage(ctx); !errors.Is(err, cmdq.ErrStorageFull) {
		t.Errorf("CheckStorage in the headroom: %v, want ErrStorageFull", err)
	}
	// The work taken before completes: its records fit in the headroom.
	close(gate)
	for _, id := range accepted[:2] {
		if st, err := c.Wait(ctx, id); err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("accepted command %s in the headroom: %v %v", id, st.State, err)
		}
	}
	if h := c.Health(); h.StorageFull != "" {
		t.Errorf("Health().StorageFull = %q above the reserve", h.StorageFull)
	}

	// Below the reserve: the processor takes no work and says why; every
	// write is refused; reads go on.
	disk.free.Store(testReserve - 1)
	waitUntil(t, time.Minute, "Health says the storage is full", func() bool { return c.Health().StorageFull != "" })
	if h := c.Health(); !strings.Contains(h.StorageFull, st.Dir()) || h.State == cmdq.ProcessorUnhealthy {
		t.Errorf("Health() below the reserve = %+v; want healthy, StorageFull naming the directory", h)
	}
	if _, err := c.Cancel(ctx, scheduled[0], "test"); !errors.Is(err, cmdq.ErrStorageFull) {
		t.Errorf("Cancel below the reserve: %v, want ErrStorageFull", err)
	}
	for _, id := range accepted {
		if _, err := c.Get(ctx, id); err != nil {
			t.Fatalf("Get %s below the reserve: %v", id, err)
		}
	}
	if time.Now().Before(due) {
		// The scheduled commands fall due while the disk is full: none
		// is taken.
		for time.Now().Before(due.Add(time.Second)) {
			time.Sleep(50 * time.Millisecond)
		}
		for _, id := range scheduled {
			if s, _ := c.Get(ctx, id); s.State != cmdq.StatePending && s.State != cmdq.StateScheduled {
				t.Errorf("command %s is %s while the disk is full; want it left pending", id, s.State)
			}
		}
	} else {
		t.Logf("the disk filled only after the scheduled commands were due (a loaded machine): not checking that they wait")
	}

	// Space returns: new commands are accepted within seconds, and every
	// accepted command completes.
	disk.free.Store(plenty)
	waitUntil(t, time.Minute, "Issue is accepted again", func() bool {
		res, err := c.Issue(ctx, spaceJob{N: 6})
		if err != nil && !errors.Is(err, cmdq.ErrStorageFull) {
			t.Fatalf("Issue after space returned: %v", err)
		}
		if err == nil {
			accepted = append(accepted, res.ID)
		}
		return err == nil
	})
	if res, err := c.IssueMany(ctx, spaceJob{N: 7}, spaceJob{N: 8}); err != nil {
		t.Fatalf("IssueMany after space returned: %v", err)
	} else {
		accepted = append(accepted, res[0].ID, res[1].ID)
	}
	for _, id := range accepted {
		if s, err := c.Wait(ctx, id); err != nil || s.State != cmdq.StateCompleted {
			t.Fatalf("accepted command %s: %v %v", id, s.State, err)
		}
	}
	if n := ran.Load(); n != int64(len(accepted)) {
		t.Errorf("handlers ran %d times for %d accepted commands", n, len(accepted))
	}
	if h := c.Health(); h.StorageFull != "" {
		t.Errorf("Health().StorageFull = %q after space returned", h.StorageFull)
	}
	if err := c.CheckStorage(ctx); err != nil {
		t.Errorf("CheckStorage after space returned: %v", err)
	}
}
