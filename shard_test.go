package cmdq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
)

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
