package cmdq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// TestRunFor: a time-boxed run through the client returns in time with what
// it did.
func TestRunFor(t *testing.T) {
	t.Parallel()
	s := openStore(t, "embedded")
	ctx := ctxT(t)
	c := newClient(t, s, fast())
	if _, err := c.RunFor(ctx, time.Second); !errors.Is(err, cmdq.ErrNoHandlers) {
		t.Fatalf("RunFor without handlers: %v", err)
	}
	if err := cmdq.Register(c, func(context.Context, greet, *cmdq.Attempt) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.Issue(ctx, greet{Name: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	sum, err := c.RunFor(ctx, 2*time.Second)
	if err != nil || sum.Completed != 3 || time.Since(start) > 2*time.Second {
		t.Fatalf("RunFor: %+v %v after %s", sum, err, time.Since(start))
	}
	if st := c.Stats(); st.Completed != 3 || st.Running {
		t.Fatalf("stats after RunFor %+v", st)
	}
}

// TestDeleteStorage: the prefix's queues and tables go, another prefix's
// stay, and the client works again afterwards.
func TestDeleteStorage(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		c := newClient(t, s, cmdq.Config{})
		res, err := c.Issue(ctx, resize{URL: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Issue(ctx, greet{Name: "y"}); err != nil {
			t.Fatal(err)
		}
		other, err := cmdq.New(s.st, cmdq.Config{Prefix: s.prefix + "x"}) // shares the "<prefix>" start
		if err != nil {
			t.Fatal(err)
		}
		kept, err := other.Issue(ctx, greet{Name: "z"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteStorage(ctx); err != nil {
			t.Fatal(err)
		}
		if qs, err := s.st.Queues(ctx, s.prefix+"-"); err != nil || len(qs) != 0 {
			t.Fatalf("queues left %q %v", qs, err)
		}
		ts, err := s.st.Tables(ctx, s.prefix)
		dayTable := s.prefix + "xcommands" + time.Now().UTC().Format("20060102") // the other prefix's day table
		if err != nil || !slices.Equal(ts, []string{s.prefix + "xcommands", dayTable, s.prefix + "xpoison"}) {
			t.Fatalf("tables left %q %v; want only the other prefix's", ts, err)
		}
		if _, err := other.Get(ctx, kept.ID); err != nil {
			t.Fatalf("the other prefix's command: %v", err)
		}
		if s.driver == "azure" {
			return // Azure refuses the deleted names for about 30 s
		}
		if _, err := c.Get(ctx, res.ID); !errors.Is(err, cmdq.ErrNotFound) {
			t.Fatalf("Get after DeleteStorage: %v", err)
		}
		if _, err := c.Issue(ctx, greet{Name: "again"}); err != nil {
			t.Fatalf("Issue after DeleteStorage: %v", err)
		}
	})
}

// TestScheduledHop: a command due later than the queue's longest
// visibility delay hops: with the horizon shortened to 3 s (the 7 days
// of a real queue), a command due in 8 s (about 19 days) shows up at 3 s,
// is put back (it is due in more than the 2 s a message is held for) and
// shows up again at 6 s or later, due in at most 2 s: one hop
// (Stats.Hops), then held until its time, and starts at or after its
// runAt as attempt 1, from what its issue's message carries (no read: the
// fast path), writing no event for the hop. Every delivery but the last
// is a hop. On a loaded machine the first delivery can come so late
// (Azurite seconds behind) that holding it is right: then it must have
// come within 3 s of its time (the 2 s hold and 1 s for the decision),
// and another command is issued, up to three in all, one of which must
// hop.
func TestScheduledHop(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		var mu sync.Mutex
		var deliveries []time.Time // polls that returned the message
		cfg := fast()
		cfg.Observers = []cmdq.Observer{cmdq.ObserverFunc(func(o cmdq.Observation) {
			if o.Kind == cmdq.ObservedPolled && o.Received > 0 {
				mu.Lock()
				deliveries = append(deliveries, o.Time)
				mu.Unlock()
			}
		})}
		c := newTuned(t, s.st, s.prefix, cfg, tuning.Switches{HopHorizon: 3 * time.Second})
		starts := recordStarts(t, c)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for try := 1; ; try++ {
			mu.Lock()
			deliveries = nil
			mu.Unlock()
			before := c.Stats()
			res, err := c.Issue(ctx, greet{Name: fmt.Sprintf("nineteen days %d", try)}, cmdq.After(8*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			done, err := c.Wait(ctx, res.ID)
			if err != nil || done.State != cmdq.StateCompleted || done.Attempts != 1 {
				t.Fatalf("wait: %+v %v, want completed in attempt 1", done, err)
			}
			if got := starts.of(res.ID); len(got) != 1 || got[0].Before(done.RunAt) {
				t.Fatalf("the handler began at %v, want once, at or after %s", got, done.RunAt)
			}
			stats := c.Stats()
			if fast := stats.FastPath - before.FastPath; fast != 1 {
				t.Fatalf("fast path %d, want 1 (the hop keeps what the issue's message carries)", fast)
			}
			evs, err := c.Events(ctx, res.ID)
			if err != nil {
				t.Fatal(err)
			}
			if k := kinds(evs); len(k) != 3 || k[1] != cmdq.EventStarted || k[2] != cmdq.EventCompleted {
				t.Fatalf("events %v, want created, started, completed (a hop writes nothing)", k)
			}
			mu.Lock()
			ds := slices.Clone(deliveries)
			mu.Unlock()
			hops := stats.Hops - before.Hops
			if len(ds) == 0 || hops != int64(len(ds)-1) || hops > 1 {
				t.Fatalf("%d hops for %d deliveries (at %v; due %s): want one hop, then the delivery that starts it", hops, len(ds), ds, done.RunAt)
			}
			if hops == 1 {
				break
			}
			if early := done.RunAt.Add(-3 * time.Second); ds[0].Before(early) {
				t.Fatalf("delivered at %s, more than 3 s before its time (%s), and held: want it put back", ds[0], done.RunAt)
			}
			if try == 3 {
				t.Fatalf("3 commands due in 8 s were each first delivered within 3 s of their time: none hopped")
			}
			t.Logf("delivered first at %s, %s before its time, on a loaded machine: held, rightly; again", ds[0], done.RunAt.Sub(ds[0]))
		}
	})
}

// TestSelfWake: a processor that polls at most every minute (its poll
// interval starts at 30 s) still starts a retry when its delay ends and a
// scheduled command issued by its own Client when it is due: it wakes
// itself then, instead of waiting for its next poll.
func TestSelfWake(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.MinPollInterval, cfg.MaxPollInterval = 30*time.Second, time.Minute
		c := newTuned(t, s.st, s.prefix, cfg, tuning.Switches{})
		var calls atomic.Int64
		if err := cmdq.RegisterWith(c, func(ctx context.Context, g greet, run *cmdq.Attempt) error {
			if g.Name == "fail once" && run.Number() == 1 {
				calls.Add(1)
				return errors.New("once")
			}
			return nil
		}, cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: time.Second, Jitter: cmdq.NoJitter}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		// The processor's first poll found nothing: its next is 30 s away.
		waitUntil(t, time.Minute, "the first poll", func() bool { return c.Health().State == cmdq.ProcessorIdle })
		res, err := c.Issue(ctx, greet{Name: "fail once"})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if st, err := c.Wait(wctx, res.ID); err != nil || st.State != cmdq.StateCompleted || st.Attempts != 2 {
			t.Fatalf("the retried command: %+v %v, want completed in attempt 2 well before the next poll", st, err)
		}
		sched, err := c.Issue(ctx, greet{Name: "in 2 s"}, cmdq.After(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.Wait(wctx, sched.ID); err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("the scheduled command: %+v %v, want completed well before the next poll", st, err)
		}
	})
}

// slowJob declares a cap of 2 handlers at once in a process.
type slowJob struct {
	N int `json:"n"`
}

func (slowJob) CommandType() string { return "jobs.slow" }
func (slowJob) CommandOptions() cmdq.CommandOptions {
	return cmdq.CommandOptions{MaxConcurrency: 2}
}

// TestMaxConcurrency: a type capped at 2 (declared by the type) with 10
// handlers blocked never has more than 2 running, while another type on
// the same queue keeps completing in the remaining handler slots (the
// waiting messages of the capped type hold none); released, every one
// completes, still 2 at a time at most. A cap set at Register overrides
// the declared one; a negative one is refused.
// cappedJob is capped at one handler at once, with a ceiling of 2.
type cappedJob struct {
	N int `json:"n"`
}

func (cappedJob) CommandType() string { return "jobs.capped" }

// TestMaxConcurrencyBacklog: a backlog of a capped type waits for its
// slot holding its messages (their leases renewed), so each command runs
// once, as attempt 1, however long it waits. Its messages used to be put
// back when a wait reached half the lease, and each put back counted a
// dequeue toward the poison ceiling: with a ceiling of 2, most of the
// backlog was poisoned without running (20 of 30 at the default ceiling).
func TestMaxConcurrencyBacklog(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.Concurrency = 4
		c := newClient(t, s, cfg)
		gauge := newPeakGauge(1)
		// A 10 s lease: renewals of the waiting messages have 4.5 s to be
		// answered (with 1 s, a loaded Azurite missed one and a command
		// ran as attempt 2); the old put back came after 5 s of waiting.
		if err := cmdq.RegisterWith(c, func(ctx context.Context, j cappedJob, _ *cmdq.Attempt) error {
			gauge.enter()
			defer gauge.leave()
			select { // the work: ten of them take longer than half the lease
			case <-time.After(700 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, cmdq.HandlerOptions{MaxConcurrency: 1, PoisonCeiling: 2, Lease: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := range 10 {
			res, err := c.Issue(ctx, cappedJob{N: i})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.ID)
		}
		for _, id := range ids {
			if st, err := c.Wait(ctx, id); err != nil || st.State != cmdq.StateCompleted || st.Attempts != 1 {
				t.Fatalf("command %s: %+v %v, want completed at attempt 1", id, st, err)
			}
		}
		if _, peak := gauge.get(); peak != 1 {
			t.Fatalf("%d capped handlers ran at once, want 1", peak)
		}
	})
}

func TestMaxConcurrency(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.Concurrency = 4 // without the cap, 4 slow handlers would take every slot
		c := newClient(t, s, cfg)
		var mu sync.Mutex
		running, peak := 0, 0
		startedSlow := make(chan struct{}, 10)
		release := make(chan struct{})
		if err := cmdq.Register(c, func(ctx context.Context, j slowJob, _ *cmdq.Attempt) error {
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			defer func() {
				mu.Lock()
				running--
				mu.Unlock()
			}()
			startedSlow <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}); err != nil {
			t.Fatal(err)
		}
		if err := cmdq.Register(c, func(ctx context.Context, g greet, _ *cmdq.Attempt) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if info, ok := c.Lookup("jobs.slow"); !ok || info.Options.MaxConcurrency != 2 {
			t.Fatalf("Lookup: %+v", info)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var slow []string
		for i := range 10 {
			res, err := c.Issue(ctx, slowJob{N: i})
			if err != nil {
				t.Fatal(err)
			}
			slow = append(slow, res.ID)
		}
		waitFor(t, startedSlow, "a slow handler starts")
		waitFor(t, startedSlow, "a second slow handler starts")

		// The other type completes meanwhile, 20 of it.
		for i := range 20 {
			res, err := c.Issue(ctx, greet{Name: "fast"})
			if err != nil {
				t.Fatal(err)
			}
			if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StateCompleted {
				t.Fatalf("fast command %d: %+v %v", i, st, err)
			}
		}
		mu.Lock()
		r, p := running, peak
		mu.Unlock()
		if r != 2 || p != 2 {
			t.Fatalf("slow handlers running %d (peak %d) while 10 were issued, want 2 (the cap)", r, p)
		}

		close(release)
		for _, id := range slow {
			if st, err := c.Wait(ctx, id); err != nil || st.State != cmdq.StateCompleted {
				t.Fatalf("slow command: %+v %v", st, err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if peak != 2 {
			t.Fatalf("peak slow handlers %d, want 2", peak)
		}
	})
}

// TestMaxConcurrencyOptions: HandlerOptions.MaxConcurrency overrides the
// declared cap; a negative cap is refused with ErrInvalidOptions.
func TestMaxConcurrencyOptions(t *testing.T) {
	s := openStore(t, "embedded")
	c := newClient(t, s, fast())
	noop := func(ctx context.Context, j slowJob, _ *cmdq.Attempt) error { return nil }
	if err := cmdq.RegisterWith(c, noop, cmdq.HandlerOptions{MaxConcurrency: -1}); !errors.Is(err, cmdq.ErrInvalidOptions) {
		t.Fatalf("MaxConcurrency -1: %v, want ErrInvalidOptions", err)
	}
	if err := cmdq.RegisterWith(c, noop, cmdq.HandlerOptions{MaxConcurrency: 5}); err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Lookup("jobs.slow"); info.Options.MaxConcurrency != 5 {
		t.Fatalf("MaxConcurrency %d, want 5 (the registered over the declared 2)", info.Options.MaxConcurrency)
	}
}

// TestShardsFairDrain: a queue of 4 shards, one of them flooded (200
// commands issued by a process that does not shard, so all on shard 0, the
// queue's unsharded name), the 12 commands a sharded issuer spreads round
// robin (3 per shard): the processor drains the shards in turn, so the 9
// on the quiet shards run among the first 60 commands instead of after
// the flood.
func TestShardsFairDrain(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		// 3 minutes: 212 issues and deliveries on a loaded Azurite.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		flood := newClient(t, s, fast())
		for i := range 200 {
			if _, err := flood.Issue(ctx, shardJob{N: i}); err != nil {
				t.Fatal(err)
			}
		}
		cfg := fast()
		cfg.Shards = map[string]int{cmdq.DefaultQueue: 4}
		cfg.Concurrency, cfg.BatchSize = 4, 8
		c := newClient(t, s, cfg)
		o := newOrder(212)
		if err := cmdq.Register(c, o.handler); err != nil {
			t.Fatal(err)
		}
		for i := range 12 {
			if _, err := c.Issue(ctx, shardJob{N: i, Quiet: true}); err != nil {
				t.Fatal(err)
			}
		}
		// The issuer spread them: 3 on each shard, the flood on shard 0.
		for i, want := range []int{203, 3, 3, 3} {
			name := s.prefix + "-commands"
			if i > 0 {
				name += fmt.Sprintf("-s%d", i)
			}
			q, err := s.st.Queue(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := q.ApproximateCount(ctx); err != nil || n != want {
				t.Fatalf("shard %d (%s) holds %d messages (err %v), want %d", i, name, n, err, want)
			}
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		runs := o.wait(t, ctx)
		early := 0
		for _, j := range runs[:60] {
			if j.Quiet {
				early++
			}
		}
		if early < 9 {
			pos := []int{}
			for i, j := range runs {
				if j.Quiet {
					pos = append(pos, i)
				}
			}
			t.Fatalf("only %d of the 12 quiet commands ran among the first 60 (positions %v); the 9 on the quiet shards must not wait for the flooded one", early, pos)
		}
	})
}

// TestShardsIdlePollsOneShardPerWait: an idle queue of 4 shards costs one
// dequeue per poll wait (every poll is followed by a wait: none goes on to
// the next shard at once), and the rotation reaches every shard: commands
// another process put on each shard (no wake-up here) all run.
func TestShardsIdlePollsOneShardPerWait(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		polls := make(chan cmdq.Observation, 1000)
		cfg := fast()
		cfg.Shards = map[string]int{cmdq.DefaultQueue: 4}
		cfg.MinPollInterval, cfg.MaxPollInterval = 20*time.Millisecond, 40*time.Millisecond
		cfg.Observers = []cmdq.Observer{cmdq.ObserverFunc(func(o cmdq.Observation) {
			if o.Kind == cmdq.ObservedPolled {
				select {
				case polls <- o:
				default:
				}
			}
		})}
		c := newClient(t, s, cfg)
		o := newOrder(8)
		if err := cmdq.Register(c, o.handler); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 16 {
			p := <-polls
			if p.Err != nil || p.Received != 0 {
				t.Fatalf("idle poll %d: %+v", i, p)
			}
			if p.Wait <= 0 {
				t.Fatalf("idle poll %d went on to the next shard at once (wait %s): an idle sharded queue must cost one dequeue per wait", i, p.Wait)
			}
		}
		other := cfg
		other.Observers = nil
		issuer := newClient(t, s, other) // another process's issuer: no wake-up
		for i := range 8 {
			if _, err := issuer.Issue(ctx, shardJob{N: i}); err != nil {
				t.Fatal(err)
			}
		}
		o.wait(t, ctx)
	})
}

// TestShardsWakeUp: a processor whose idle poll comes only every 10
// minutes runs the commands its own Client issues on a sharded queue at
// once: the enqueue path's wake-up names the shard it used (the hand-off
// off, so that every command goes through the queue).
func TestShardsWakeUp(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cfg := fast()
		cfg.Prefix = s.prefix
		cfg.Shards = map[string]int{cmdq.DefaultQueue: 3}
		cfg.MinPollInterval, cfg.MaxPollInterval = 10*time.Minute, 10*time.Minute
		c := newTuned(t, s.st, s.prefix, cfg, tuning.Switches{NoHandOff: true})
		o := newOrder(6)
		if err := cmdq.Register(c, o.handler); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			if _, err := c.Issue(ctx, shardJob{N: i}); err != nil {
				t.Fatal(err)
			}
		}
		o.wait(t, ctx) // a missed wake-up would wait for the 10-minute poll
	})
}

// retryNow is a command whose handler fails its first attempt.
type retryNow struct{}

func (retryNow) CommandType() string { return "retry.now" }

// TestRetryDueNowIsNotHidden: a failed attempt whose retry is due at once
// makes its message visible before its delivery has let go of the
// command; the processor's poller dequeues it in that moment (here forced:
// the retry's UpdateVisibility returns only once the message was
// dequeued again). That delivery must run the retry (attempt 2), not take
// it for a second message of a command in hand and leave it hidden for a
// whole lease (it then ran as attempt 3, a lease later: seen in
// TestMiddleware under load). Both stores.
func TestRetryDueNowIsNotHidden(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		st := &redeliveryStore{Store: s.st}
		c := newClient(t, store{driver: s.driver, st: st, prefix: s.prefix}, fast())
		var runs sync.Map // attempt → true
		if err := cmdq.RegisterWith(c, func(ctx context.Context, _ retryNow, run *cmdq.Attempt) error {
			runs.Store(run.Number(), true)
			if run.Number() == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		}, cmdq.HandlerOptions{Lease: time.Minute, Retry: cmdq.RetryPolicy{Base: 1, Max: 1, Jitter: cmdq.NoJitter}}); err != nil {
			t.Fatal(err)
		}
		res, err := c.Issue(ctx, retryNow{})
		if err != nil {
			t.Fatal(err)
		}
		st.watch(res.ID)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		stx, err := c.Wait(ctx, res.ID)
		if err != nil || stx.State != cmdq.StateCompleted || stx.Attempts != 2 {
			evs, _ := c.Events(ctx, res.ID)
			t.Fatalf("%+v %v, want completed on attempt 2 (the retry's first delivery); events %+v", stx, err, evs)
		}
		if !st.raced.Load() {
			t.Fatal("the retry's message was not dequeued while its UpdateVisibility was in flight: the case was not exercised")
		}
		if _, ok := runs.Load(3); ok {
			t.Fatal("the handler ran a third attempt")
		}
	})
}

// redeliveryStore holds a short UpdateVisibility (a retry due now) of the
// watched command's message until a Dequeue has returned that message
// again (or 30 s passed).
type redeliveryStore struct {
	storage.Store
	mu      sync.Mutex
	cmdID   string
	waiting map[string]chan struct{} // message ID → closed when dequeued
	raced   atomic.Bool
}

func (r *redeliveryStore) watch(id string) {
	r.mu.Lock()
	r.cmdID = id
	r.mu.Unlock()
}

func (r *redeliveryStore) Queue(ctx context.Context, name string) (storage.Queue, error) {
	q, err := r.Store.Queue(ctx, name)
	if err != nil {
		return nil, err
	}
	return &redeliveryQueue{Queue: q, r: r}, nil
}

type redeliveryQueue struct {
	storage.Queue
	r *redeliveryStore
}

func (q *redeliveryQueue) Dequeue(ctx context.Context, max int, vis time.Duration) ([]storage.Message, error) {
	ms, err := q.Queue.Dequeue(ctx, max, vis)
	q.r.mu.Lock()
	for _, m := range ms {
		if ch, ok := q.r.waiting[m.ID]; ok {
			delete(q.r.waiting, m.ID)
			q.r.raced.Store(true)
			close(ch)
		}
	}
	q.r.mu.Unlock()
	return ms, err
}

func (q *redeliveryQueue) UpdateVisibility(ctx context.Context, id, receipt string, vis time.Duration) (string, time.Time, error) {
	q.r.mu.Lock()
	var ch chan struct{}
	if vis < time.Second && q.r.cmdID != "" && !q.r.raced.Load() {
		ch = make(chan struct{})
		if q.r.waiting == nil {
			q.r.waiting = map[string]chan struct{}{}
		}
		q.r.waiting[id] = ch
	}
	q.r.mu.Unlock()
	pr, next, err := q.Queue.UpdateVisibility(ctx, id, receipt, vis)
	if ch != nil && err == nil {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
		}
	}
	return pr, next, err
}

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
