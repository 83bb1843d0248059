package cmdq_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// TestPauseQueueDurable: a pause is stored (it survives the Client: a new
// one on the same storage, after a restart of the embedded store, lists
// the queue as paused, since when and by whom); a resume clears it. A
// queue nobody knows is refused (ErrUnknownQueue), a bad name too
// (ErrInvalidOptions); a queue only the store knows can be paused.
func TestPauseQueueDurable(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newClient(t, s, fast())
		before := time.Now().Add(-time.Second)
		got, err := c.PauseQueue(ctx, cmdq.DefaultQueue, "test:alice")
		if err != nil {
			t.Fatal(err)
		}
		if !got.Paused || got.By != "test:alice" || got.Since.Before(before) {
			t.Fatalf("PauseQueue returned %+v", got)
		}
		if _, err := c.PauseQueue(ctx, "nobody-knows", "test"); !errors.Is(err, cmdq.ErrUnknownQueue) {
			t.Fatalf("pause of an unknown queue: %v, want ErrUnknownQueue", err)
		}
		if _, err := c.ResumeQueue(ctx, "Bad_Name", "test"); !errors.Is(err, cmdq.ErrInvalidOptions) {
			t.Fatalf("resume of a bad queue name: %v, want ErrInvalidOptions", err)
		}
		// A queue the store holds (another process's type routes to it).
		if _, err := c.StorageQueue(ctx, "elsewhere"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PauseQueue(ctx, "elsewhere", "test:bob"); err != nil {
			t.Fatalf("pause of a queue the store holds: %v", err)
		}

		st := s.st
		if s.driver == "embedded" {
			// A restart: the store closed and opened again.
			dir := st.(*embedded.Store).Dir()
			if err := c.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if st, err = embedded.Open(filepath.Clean(dir), nil); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
		}
		again := newClient(t, store{driver: s.driver, st: st, prefix: s.prefix}, fast())
		qs, err := again.ListQueues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]cmdq.QueueInfo{}
		for _, q := range qs {
			byName[q.Name] = q
		}
		if q := byName[cmdq.DefaultQueue]; !q.Paused || q.By != "test:alice" || !q.Since.Equal(got.Since) || q.Depth != 0 {
			t.Fatalf("after a restart %s is %+v, want paused by test:alice since %s, depth 0", cmdq.DefaultQueue, q, got.Since)
		}
		if q := byName["elsewhere"]; !q.Paused || q.By != "test:bob" {
			t.Fatalf("after a restart elsewhere is %+v, want paused by test:bob", q)
		}
		res, err := again.ResumeQueue(ctx, cmdq.DefaultQueue, "test:carol")
		if err != nil || res.Paused {
			t.Fatalf("resume: %+v %v", res, err)
		}
		qs, err = again.ListQueues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Name == cmdq.DefaultQueue && (q.Paused || q.By != "test:carol") {
				t.Fatalf("after the resume %+v", q)
			}
		}
	})
}

// TestPauseTwoProcessors: two processors on one queue, in two "processes"
// (two Clients on their own store handles: two Azure clients on one
// Azurite account). A pause through one reaches it at once and the other
// at its next read of the control rows (driven here by the commands that
// arrive: each delivery reads stale rows before it starts). Once both
// have seen it (their Observers say so), commands issued through both
// Clients are accepted and neither processor starts any of them while
// both keep reading the paused queue's control rows instead of dequeuing
// it; the resume, through the other Client, lets both drain them.
func TestPauseTwoProcessors(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		var mu sync.Mutex
		started := map[string]int{} // command ID → handler starts
		stores := []storage.Store{s.st, otherProcess(t, s)}
		clients := make([]*cmdq.Client, 2)
		obs := []*observed{newObserved(), newObserved()}
		for i := range clients {
			cfg := fast()
			cfg.Worker = []string{"a", "b"}[i]
			cfg.Observers = []cmdq.Observer{obs[i]}
			c := newTuned(t, stores[i], s.prefix, cfg, tuning.Switches{})
			if err := cmdq.Register(c, func(ctx context.Context, g greet, run *cmdq.Attempt) error {
				mu.Lock()
				started[run.ID()]++
				mu.Unlock()
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			clients[i] = c
		}
		a, b := clients[0], clients[1]
		isPaused := func(o cmdq.Observation) bool {
			return o.Kind == cmdq.ObservedPaused && o.Queue == cmdq.DefaultQueue
		}

		// Both work before the pause.
		if _, err := a.Issue(ctx, greet{Name: "warm-up"}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.PauseQueue(ctx, cmdq.DefaultQueue, "test:pauser"); err != nil {
			t.Fatal(err)
		}
		obs[0].await(t, "a learns of the pause", func() bool { return obs[0].count(0, isPaused) > 0 })
		// b learns of it when it has something to start: probes, issued
		// through both (b's own is handed to its processor, a's it
		// dequeues), until b says it saw the pause.
		for obs[1].count(0, isPaused) == 0 {
			for _, c := range clients {
				if _, err := c.Issue(ctx, greet{Name: "probe"}); err != nil {
					t.Fatal(err)
				}
			}
			obs[1].await(t, "b learns of the pause", func() bool { return obs[1].count(0, isPaused) > 0 })
		}

		// Commands issued now: accepted, and started by neither while both
		// keep reading the control rows of the paused queue.
		marks := []int{obs[0].len(), obs[1].len()}
		var ids []string
		for i := range 10 {
			res, err := clients[i%2].Issue(ctx, greet{Name: "paused"})
			if err != nil {
				t.Fatalf("issue into a paused queue: %v", err)
			}
			ids = append(ids, res.ID)
		}
		for i, o := range obs {
			o.await(t, "each processor polls the paused queue's control rows 3 times", func() bool {
				return o.count(marks[i], func(ob cmdq.Observation) bool {
					return ob.Kind == cmdq.ObservedPolled && ob.Paused && ob.Queue == cmdq.DefaultQueue
				}) >= 3
			})
		}
		for i, o := range obs {
			// Once a poller reads the control rows in place of a dequeue,
			// it dequeues no more until the resume.
			o.mu.Lock()
			paused := false
			for _, ob := range o.events[marks[i]:] {
				if ob.Kind != cmdq.ObservedPolled || ob.Queue != cmdq.DefaultQueue {
					continue
				}
				if ob.Paused {
					paused = true
				} else if paused {
					t.Errorf("processor %d dequeued the paused queue after it read its control rows instead", i)
				}
			}
			o.mu.Unlock()
		}
		mu.Lock()
		for _, id := range ids {
			if started[id] > 0 {
				t.Errorf("command %s, issued while the queue was paused, started", id)
			}
		}
		mu.Unlock()
		for _, id := range ids {
			if st, err := a.Get(ctx, id); err != nil || st.State != cmdq.StatePending {
				t.Fatalf("a command issued while paused is %+v %v, want pending", st, err)
			}
		}

		// The resume (through b) lets both drain the queue.
		if _, err := b.ResumeQueue(ctx, cmdq.DefaultQueue, "test:resumer"); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if st, err := a.Wait(ctx, id); err != nil || st.State != cmdq.StateCompleted {
				t.Fatalf("after the resume %s is %+v %v, want completed", id, st, err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if started[id] != 1 {
				t.Errorf("command %s started %d times, want once", id, started[id])
			}
		}
		mu.Unlock()
		// Each processor observes the resume at its next control read;
		// the other may have drained the queue first.
		for i, o := range obs {
			waitUntil(t, 30*time.Second, fmt.Sprintf("processor %d to observe the resume", i), func() bool {
				return o.count(0, func(ob cmdq.Observation) bool {
					return ob.Kind == cmdq.ObservedResumed && ob.By == "test:resumer"
				}) > 0
			})
		}
		mu.Lock()
	})
}

// TestRunForPausedQueue: a RunFor on a paused queue starts none of its
// commands, and returns before its time is up (as on an idle queue); the
// commands wait, pending, for the resume.
func TestRunForPausedQueue(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newTuned(t, s.st, s.prefix, fast(), tuning.Switches{})
		if err := cmdq.Register(c, func(ctx context.Context, g greet, _ *cmdq.Attempt) error { return nil }); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for range 3 {
			res, err := c.Issue(ctx, greet{Name: "paused"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.ID)
		}
		if _, err := c.PauseQueue(ctx, cmdq.DefaultQueue, "test"); err != nil {
			t.Fatal(err)
		}
		const d = 5 * time.Second
		start := time.Now()
		sum, err := c.RunFor(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if sum.Completed != 0 || time.Since(start) >= d {
			t.Fatalf("RunFor on a paused queue: %+v after %s, want nothing completed, back before %s", sum, time.Since(start), d)
		}
		for _, id := range ids {
			if st, err := c.Get(ctx, id); err != nil || st.State != cmdq.StatePending {
				t.Fatalf("%s is %+v %v, want pending", id, st, err)
			}
		}
	})
}

// TestPauseCheckCost: the pause check costs an idle processor nothing (its
// polls read no control row) and a busy one about one query per
// ControlInterval however many commands it starts.
func TestPauseCheckCost(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		st, n := counting(s.st)
		polls := newObserved()
		cfg := fast()
		cfg.Observers = []cmdq.Observer{polls}
		// The doorbell's processors' list (one query a minute while a
		// saturated processor rings its peers) is counted by
		// TestDoorbellReadCost, not here.
		cfg.Doorbell.Off = true
		c := newClient(t, store{driver: s.driver, st: st, prefix: s.prefix}, cfg)
		if err := cmdq.Register(c, func(ctx context.Context, g greet, _ *cmdq.Attempt) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		isPoll := func(o cmdq.Observation) bool { return o.Kind == cmdq.ObservedPolled }
		polls.await(t, "a first poll", func() bool { return polls.count(0, isPoll) > 0 })
		idleFrom, mark := n.queries.Load(), polls.len()
		polls.await(t, "5 idle polls", func() bool { return polls.count(mark, isPoll) >= 5 })
		if q := n.queries.Load() - idleFrom; q != 0 {
			t.Fatalf("5 idle polls made %d table queries, want none", q)
		}

		busyFrom, start := n.queries.Load(), time.Now()
		cmds := make([]cmdq.Command, 300)
		for i := range cmds {
			cmds[i] = greet{Name: fmt.Sprint(i)}
		}
		res, err := c.IssueMany(ctx, cmds...)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if st, err := c.Wait(ctx, r.ID); err != nil || st.State != cmdq.StateCompleted {
				t.Fatalf("%s: %+v %v", r.ID, st, err)
			}
		}
		elapsed := time.Since(start)
		limit := 1 + int64(elapsed/cmdq.ControlInterval)
		if q := n.queries.Load() - busyFrom; q > limit {
			t.Fatalf("300 commands in %s made %d table queries, want at most %d (one control read per %s)", elapsed.Round(time.Millisecond), q, limit, cmdq.ControlInterval)
		} else {
			t.Logf("300 commands in %s: %d control reads", elapsed.Round(time.Millisecond), q)
		}
	})
}

// TestPauseResumeTakesReleasedBack (issue 32, finding 2): deliveries of a
// queue that is paused while they wait for a handler slot (their type's
// three, held by blocking handlers) are released
// unstarted; when the queue is resumed they start at once, as the
// deliveries they were (attempt 1, no lease_lost: no handler ran). Before,
// each stayed invisible for ControlInterval (9 s; 2 min here) and its
// next dequeue was attempt 2, with a lease_lost event for attempt 1.
func TestPauseResumeTakesReleasedBack(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.Concurrency = 8
		c := newTuned(t, s.st, s.prefix, cfg, tuning.Switches{ControlInterval: 2 * time.Minute})
		gate, blocking := make(chan struct{}), make(chan struct{}, 3)
		var gateOnce sync.Once
		t.Cleanup(func() { gateOnce.Do(func() { close(gate) }) })
		if err := cmdq.RegisterWith(c, func(ctx context.Context, g greet, run *cmdq.Attempt) error {
			if g.Name == "block" {
				blocking <- struct{}{}
				<-gate
			}
			return nil
		}, cmdq.HandlerOptions{MaxConcurrency: 3}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var blocks []string
		for range 3 {
			res, err := c.Issue(ctx, greet{Name: "block"})
			if err != nil {
				t.Fatal(err)
			}
			blocks = append(blocks, res.ID)
			waitFor(t, blocking, "a blocking handler to start")
		}
		// Three more wait for the type's slots (3), dequeued (invisible)
		// and parked.
		var ids []string
		for i := range 3 {
			res, err := c.Issue(ctx, greet{Name: "n" + strconv.Itoa(i)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.ID)
		}
		q, err := c.StorageQueue(ctx, cmdq.DefaultQueue)
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 30*time.Second, "the three to be dequeued", func() bool {
			msgs, err := q.Peek(ctx, 32)
			return err == nil && len(msgs) == 0
		})
		if _, err := c.PauseQueue(ctx, cmdq.DefaultQueue, "test:pauser"); err != nil {
			t.Fatal(err)
		}
		released := c.Stats().Released
		gateOnce.Do(func() { close(gate) })
		for _, id := range blocks {
			if st, err := c.Wait(ctx, id); err != nil || st.State != cmdq.StateCompleted {
				t.Fatalf("blocking command: %+v %v", st, err)
			}
		}
		waitUntil(t, 30*time.Second, "the three to be released (paused)", func() bool { return c.Stats().Released >= released+3 })
		for _, id := range ids {
			if st, err := c.Get(ctx, id); err != nil || st.State != cmdq.StatePending {
				t.Fatalf("%s while paused: %+v %v, want pending", id, st, err)
			}
		}
		if _, err := c.ResumeQueue(ctx, cmdq.DefaultQueue, "test:pauser"); err != nil {
			t.Fatal(err)
		}
		// Within a minute: well before the 2 min the released messages
		// stay invisible for.
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for _, id := range ids {
			st, err := c.Wait(wctx, id)
			if err != nil || st.State != cmdq.StateCompleted {
				t.Fatalf("%s after the resume: %+v %v, want completed at once", id, st, err)
			}
			if st.Attempts != 1 {
				t.Errorf("%s completed at attempt %d, want 1 (released unstarted, taken back)", id, st.Attempts)
			}
			evs, err := c.Events(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				if e.Kind == cmdq.EventLeaseLost {
					t.Errorf("%s: lease_lost although no handler ran before: %+v", id, e)
				}
			}
		}
	})
}
