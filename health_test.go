package cmdq_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/multi"
)

// accountStores opens the stores of n Azurite instances (n accounts).
func accountStores(t *testing.T, n int) []storage.Store {
	t.Helper()
	var out []storage.Store
	for _, cs := range azurite.ConnectionStrings(t, n) {
		st, err := azure.Open(context.Background(), azure.Config{ConnectionString: cs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		out = append(out, st)
	}
	return out
}

// unclosed lends a store to a multi store without letting it close it
// (the test closes the accounts itself, after both multi stores).
type unclosed struct{ storage.Store }

func (unclosed) Close() error { return nil }

func spread(t *testing.T, sts []storage.Store, from ...time.Time) *multi.Store {
	t.Helper()
	var ms []multi.Member
	for i, st := range sts {
		m := multi.Member{Name: fmt.Sprintf("account %d", i), Store: unclosed{st}}
		if i < len(from) {
			m.From = from[i]
		}
		ms = append(ms, m)
	}
	s, err := multi.New(ms, multi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dayIDOf is an ID in cmdq's UUIDv8 layout carrying t's day.
func dayIDOf(t time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	binary.BigEndian.PutUint16(b[2:4], uint16(t.UnixMilli()/(24*60*60*1000)))
	b[6] = b[6]&0x0f | 0x80
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// TestAccountAddedWithCommandsInFlight: a deployment on two accounts
// (Azurite instances) issues 30 commands with nobody processing them,
// restarts with a third account that takes commands from tomorrow
// (multi.Member.From), and its processor runs all 30 (their rows and
// messages stayed where they were) and every command issued after, of
// which those carrying tomorrow's date spread over all three accounts,
// the new one included; /readyz's Health names each account.
func TestAccountAddedWithCommandsInFlight(t *testing.T) {
	t.Parallel()
	sts := accountStores(t, 3)
	ctx := ctxT(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "acc" + hex.EncodeToString(b[:])
	cfg := fast()
	cfg.Prefix = prefix
	cfg.Shards = map[string]int{cmdq.DefaultQueue: 2}

	before := spread(t, sts[:2])
	old, err := cmdq.New(before, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var inFlight []string
	for i := range 30 {
		res, err := old.Issue(ctx, shardJob{N: i})
		if err != nil {
			t.Fatal(err)
		}
		inFlight = append(inFlight, res.ID)
	}
	perAccount := map[int]int{}
	for _, id := range inFlight {
		perAccount[before.MemberOf(id)]++
	}
	if perAccount[0] == 0 || perAccount[1] == 0 {
		t.Fatalf("30 commands on two accounts: %v per account, want both used", perAccount)
	}

	tomorrow := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	after := spread(t, sts, time.Time{}, time.Time{}, tomorrow)
	c, err := cmdq.New(after, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	o := newOrder(30 + 30 + 10)
	if err := cmdq.Register(c, o.handler); err != nil {
		t.Fatal(err)
	}
	for _, id := range inFlight {
		if after.MemberOf(id) != before.MemberOf(id) {
			t.Fatalf("command %s moved from account %d to %d when an account was added", id, before.MemberOf(id), after.MemberOf(id))
		}
		st, err := c.Get(ctx, id)
		if err != nil || st.State != cmdq.StatePending {
			t.Fatalf("Get %s after the account was added: %+v, %v", id, st, err)
		}
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	newAccount := 0
	var later []string
	for i := range 30 {
		res, err := c.Issue(ctx, shardJob{N: 100 + i}, cmdq.CommandID(dayIDOf(tomorrow)))
		if err != nil {
			t.Fatal(err)
		}
		later = append(later, res.ID)
		if after.MemberOf(res.ID) == 2 {
			newAccount++
		}
	}
	for i := range 10 {
		res, err := c.Issue(ctx, shardJob{N: 200 + i})
		if err != nil {
			t.Fatal(err)
		}
		if m := after.MemberOf(res.ID); m == 2 {
			t.Fatalf("a command of today went to the account added from tomorrow (%s)", res.ID)
		}
		later = append(later, res.ID)
	}
	if newAccount == 0 {
		t.Fatal("none of 30 commands dated from the new account's day went to it")
	}
	o.wait(t, ctx)
	for _, id := range append(inFlight, later...) {
		st, err := c.Wait(ctx, id)
		if err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("command %s: %+v, %v; want completed", id, st, err)
		}
	}
	h := c.Health()
	if len(h.Accounts) != 3 || !h.Accounts[0].Healthy || !h.Accounts[2].Healthy || h.Accounts[2].Name != "account 2" {
		t.Fatalf("Health().Accounts = %+v, want 3 healthy accounts", h.Accounts)
	}
}

// heldJob is a command of queue "held" (TestFirstAccountDown pauses it).
type heldJob struct {
	N int `json:"n"`
}

func (heldJob) CommandType() string { return "test.heldjob" }

// runCounts counts handler runs by command ID.
type runCounts struct {
	mu     sync.Mutex
	runs   map[string]int
	notify chan struct{}
}

func newRunCounts() *runCounts {
	return &runCounts{runs: map[string]int{}, notify: make(chan struct{}, 1)}
}

func (r *runCounts) ran(id string) {
	r.mu.Lock()
	r.runs[id]++
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *runCounts) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id]
}

// await waits until every one of ids ran (at most until ctx ends).
func (r *runCounts) await(t *testing.T, ctx context.Context, what string, ids []string) {
	t.Helper()
	for {
		left := 0
		for _, id := range ids {
			if r.count(id) == 0 {
				left++
			}
		}
		if left == 0 {
			return
		}
		select {
		case <-r.notify:
		case <-ctx.Done():
			t.Fatalf("%s: %d of %d commands never ran", what, left, len(ids))
		}
	}
}

// idOn returns a new command ID that s places in account i.
func idOn(s *multi.Store, i int) string {
	for {
		if id := cmdq.NewID(); s.MemberOf(id) == i {
			return id
		}
	}
}

// TestFirstAccountDown: a deployment on two accounts, the first (the one
// that held the shared rows before) an Azurite stopped and started again
// with its data. Before the outage, queue "held" is paused and commands
// are issued on both accounts (nobody processes them yet). With the first
// account stopped, a new process (its own Client and store: no knowledge
// of the pause, no day table registered) starts: it issues more commands
// on the second account (its first issue of the day registers the day
// table), runs every command on the second account, lists its own
// heartbeat, starts none of the paused queue's (the pause, read from the
// second account, holds), names the first account failing; resumed during
// the outage (written to the second account only), the paused queue's
// commands run. After the first account returns, its commands complete,
// every command ran exactly once, and a read of the queues repairs the
// first account's control row (it says resumed).
func TestFirstAccountDown(t *testing.T) {
	t.Parallel()
	first := azurite.NewRestartable(t)
	second := azurite.ConnectionStrings(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	open := func(cs string) storage.Store {
		st, err := azure.Open(ctx, azure.Config{ConnectionString: cs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	acct0, acct1 := open(first.ConnectionString), open(second)
	newSpread := func() *multi.Store {
		s, err := multi.New([]multi.Member{{Name: "account 0", Store: unclosed{acct0}}, {Name: "account 1", Store: unclosed{acct1}}},
			multi.Options{ProbeInterval: 200 * time.Millisecond, MaxProbeInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "down" + hex.EncodeToString(b[:])
	runs := newRunCounts()
	register := func(c *cmdq.Client) {
		t.Helper()
		if err := cmdq.Register(c, func(_ context.Context, _ shardJob, run *cmdq.Attempt) error { runs.ran(run.ID()); return nil }); err != nil {
			t.Fatal(err)
		}
		if err := cmdq.RegisterWith(c, func(_ context.Context, _ heldJob, run *cmdq.Attempt) error { runs.ran(run.ID()); return nil },
			cmdq.HandlerOptions{Queue: "held"}); err != nil {
			t.Fatal(err)
		}
	}

	// Before the outage: a process pauses "held" and issues commands on
	// both accounts.
	before := newSpread()
	c1 := newTuned(t, before, prefix, fast(), tuning.Switches{})
	register(c1)
	if _, err := c1.PauseQueue(ctx, "held", "test:before"); err != nil {
		t.Fatal(err)
	}
	issue := func(c *cmdq.Client, cmd cmdq.Command, id string) string {
		t.Helper()
		res, err := c.Issue(ctx, cmd, cmdq.CommandID(id))
		if err != nil {
			t.Fatalf("issue %s: %v", id, err)
		}
		return res.ID
	}
	var onFirst, onSecond, held []string
	for i := range 5 {
		onFirst = append(onFirst, issue(c1, shardJob{N: i}, idOn(before, 0)))
		onSecond = append(onSecond, issue(c1, shardJob{N: 10 + i}, idOn(before, 1)))
	}
	for i := range 3 {
		held = append(held, issue(c1, heldJob{N: i}, idOn(before, 1)))
	}
	if err := c1.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	first.Stop(t)

	// A new process, during the outage.
	during := newSpread()
	obs := newObserved()
	cfg := fast()
	cfg.Observers = []cmdq.Observer{obs}
	c2 := newTuned(t, during, prefix, cfg, tuning.Switches{})
	register(c2)
	for i := range 5 {
		onSecond = append(onSecond, issue(c2, shardJob{N: 20 + i}, idOn(during, 1)))
	}
	if err := c2.Start(ctx); err != nil {
		t.Fatalf("Start with the first account down: %v", err)
	}
	runs.await(t, ctx, "the second account's commands with the first account down", onSecond)
	obs.await(t, "the processor knows queue held as paused", func() bool {
		return obs.count(0, func(o cmdq.Observation) bool { return o.Kind == cmdq.ObservedPaused && o.Queue == "held" }) > 0
	})
	for _, id := range held {
		if n := runs.count(id); n != 0 {
			t.Fatalf("command %s of the paused queue ran %d times with the first account down: the pause did not hold", id, n)
		}
		if st, err := c2.Get(ctx, id); err != nil || st.State != cmdq.StatePending {
			t.Fatalf("command %s of the paused queue: %+v, %v; want pending", id, st, err)
		}
	}
	for _, id := range onFirst {
		if n := runs.count(id); n != 0 {
			t.Fatalf("command %s of the stopped account ran during the outage", id)
		}
	}
	if h := c2.Health(); len(h.Accounts) != 2 || h.Accounts[0].Healthy || !h.Accounts[1].Healthy {
		t.Fatalf("Health().Accounts = %+v, want account 0 failing and account 1 healthy", h.Accounts)
	}
	// The processor writes its first heartbeat once it runs, beside the
	// work (on a loaded machine, after these commands ran): read until it
	// is listed.
	var procs []cmdq.ProcessorInfo
	waitUntil(t, 30*time.Second, "the processor lists its own heartbeat with the first account down", func() bool {
		var err error
		if procs, err = c2.Processors(ctx); err != nil {
			t.Fatalf("Processors with the first account down: %v", err)
		}
		return len(procs) >= 1
	})
	if len(procs) != 1 {
		t.Fatalf("Processors with the first account down: %+v; want this process's one", procs)
	}
	if _, err := c2.ResumeQueue(ctx, "held", "test:during"); err != nil {
		t.Fatalf("resume with the first account down: %v", err)
	}
	runs.await(t, ctx, "the resumed queue's commands with the first account down", held)

	first.Start(t)
	runs.await(t, ctx, "the first account's commands after it returned", onFirst)
	for _, id := range append(append(append([]string(nil), onFirst...), onSecond...), held...) {
		st, err := c2.Wait(ctx, id)
		if err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("command %s: %+v, %v; want completed", id, st, err)
		}
		if n := runs.count(id); n != 1 {
			t.Errorf("command %s ran %d times, want once", id, n)
		}
	}
	// The first account missed the resume: a read of the queues once
	// it answers repairs its row.
	qs, err := c2.ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == "held" && q.Paused {
			t.Fatalf("queue held listed paused after its resume: %+v", q)
		}
	}
	tb, err := acct0.Table(ctx, prefix+"commands")
	if err != nil {
		t.Fatal(err)
	}
	row, err := tb.Get(ctx, "~queues", "held")
	if err != nil {
		t.Fatalf("the first account's control row of held after the repair: %v", err)
	}
	if p, _ := row.Properties["Paused"].(bool); p || row.Properties["By"] != "test:during" {
		t.Fatalf("the first account's control row of held after the repair: %v, want the resume by test:during", row.Properties)
	}
}
