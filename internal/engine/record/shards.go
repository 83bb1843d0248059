package record

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// Sharded queues (docs/scaling.md): a logical queue with N shards
// (Names.Shards) is N storage queues, "<prefix>-<queue>" (shard 0, the
// queue's name when it is not sharded) and "<prefix>-<queue>-s1" …
// "<prefix>-<queue>-s<N-1>". The message IDs of shard i ≥ 1 read
// "s<i>:<the storage queue's ID>", so that a delete or a lease renewal
// finds its shard; shard 0's are the storage queue's own, as without
// shards.

// MaxShards is the most shards a logical queue may have (64).
const MaxShards = 64

// ShardCount returns the number of shards of logical queue q (1 when
// Shards does not name it).
func (n Names) ShardCount(q string) int {
	if s := n.Shards[q]; s > 1 {
		return s
	}
	return 1
}

// ShardQueue returns the storage queue name of shard i of logical queue
// q: Queue(q) for shard 0, Queue(q)+"-s<i>" for the others.
func (n Names) ShardQueue(q string, i int) string {
	if i == 0 {
		return n.Queue(q)
	}
	return n.Queue(q) + "-s" + strconv.Itoa(i)
}

// ShardOf returns the shard of a message ID of a sharded queue (0 for an
// ID without a shard prefix).
func ShardOf(id string) int {
	i, _, _ := splitShard(id)
	return i
}

func splitShard(id string) (shard int, rest string, ok bool) {
	if len(id) < 3 || id[0] != 's' {
		return 0, id, true
	}
	k, rest, found := strings.Cut(id[1:], ":")
	i, err := strconv.Atoi(k)
	if !found || err != nil || i < 1 || i >= MaxShards {
		return 0, id, true
	}
	return i, rest, true
}

func shardID(i int, id string) string {
	if i == 0 {
		return id
	}
	return "s" + strconv.Itoa(i) + ":" + id
}

// validateShards checks Shards against the queues: counts 1..MaxShards,
// shard names valid storage queue names, and no logical queue named like
// another's shard.
func (n Names) validateShards(queues []string) []error {
	var errs []error
	for q, c := range n.Shards {
		if c < 0 || c > MaxShards {
			errs = append(errs, fmt.Errorf("%w: queue %q: %d shards; give 1..%d (0 or 1: not sharded)", storage.ErrInvalidName, q, c, MaxShards))
			continue
		}
		if c > 1 {
			if err := storage.ValidateQueueName(n.ShardQueue(q, c-1)); err != nil {
				errs = append(errs, fmt.Errorf("logical queue %q with %d shards: %w (a shard's name adds \"-s<i>\")", q, c, err))
			}
		}
	}
	for _, q := range queues {
		for other, c := range n.Shards {
			for i := 1; i < c; i++ {
				if n.Queue(q) == n.ShardQueue(other, i) {
					errs = append(errs, fmt.Errorf("%w: logical queue %q has the name of shard %d of queue %q; rename it", storage.ErrInvalidName, q, i, other))
				}
			}
		}
	}
	return errs
}

// ShardedQueue is a logical queue's N shards as one storage.Queue: Enqueue
// spreads messages round robin, Dequeue and Peek take from the shards in
// turn, ApproximateCount adds them up, UpdateVisibility and Delete find the
// shard from the message ID. DequeueShard dequeues one shard (the
// processor's poller, which chooses the shard). Safe for concurrent use.
type ShardedQueue struct {
	shards []storage.Queue
	rr     atomic.Uint64
}

// OpenQueue opens logical queue q on st: its one storage queue when it has
// one shard, else a *ShardedQueue over its shards.
func OpenQueue(ctx context.Context, st storage.Store, names Names, q string) (storage.Queue, error) {
	n := names.ShardCount(q)
	if n == 1 {
		return st.Queue(ctx, names.Queue(q))
	}
	sq := &ShardedQueue{shards: make([]storage.Queue, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sq.shards[i], errs[i] = st.Queue(ctx, names.ShardQueue(q, i))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return sq, nil
}

// Shards returns the number of shards.
func (s *ShardedQueue) Shards() int { return len(s.shards) }

// NextShard returns the shard the next Enqueue would use, and moves on
// (round robin).
func (s *ShardedQueue) NextShard() int { return int((s.rr.Add(1) - 1) % uint64(len(s.shards))) }

// Name returns shard 0's name (the logical queue's storage name).
func (s *ShardedQueue) Name() string { return s.shards[0].Name() }

// Enqueue puts text on the next shard (round robin).
func (s *ShardedQueue) Enqueue(ctx context.Context, text string, visibilityDelay, ttl time.Duration) (storage.Message, error) {
	return s.EnqueueShard(ctx, s.NextShard(), text, visibilityDelay, ttl)
}

// EnqueueShard puts text on shard i.
func (s *ShardedQueue) EnqueueShard(ctx context.Context, i int, text string, visibilityDelay, ttl time.Duration) (storage.Message, error) {
	m, err := s.shards[i].Enqueue(ctx, text, visibilityDelay, ttl)
	m.ID = shardID(i, m.ID)
	return m, err
}

// DequeueShard dequeues up to max messages of shard i.
func (s *ShardedQueue) DequeueShard(ctx context.Context, i, max int, visibility time.Duration) ([]storage.Message, error) {
	ms, err := s.shards[i].Dequeue(ctx, max, visibility)
	for k := range ms {
		ms[k].ID = shardID(i, ms[k].ID)
	}
	return ms, err
}

// take collects up to max messages from the shards in turn, starting at a
// rotating shard.
func (s *ShardedQueue) take(ctx context.Context, max int, f func(i, n int) ([]storage.Message, error)) ([]storage.Message, error) {
	n := len(s.shards)
	start := int(s.rr.Load() % uint64(n))
	out := []storage.Message{}
	for k := 0; k < n && len(out) < max; k++ {
		i := (start + k) % n
		ms, err := f(i, max-len(out))
		if err != nil {
			return out, err
		}
		for _, m := range ms {
			m.ID = shardID(i, m.ID)
			out = append(out, m)
		}
	}
	return out, nil
}

// Dequeue takes up to max messages from the shards in turn.
func (s *ShardedQueue) Dequeue(ctx context.Context, max int, visibility time.Duration) ([]storage.Message, error) {
	if err := storage.ValidateDequeue(max, visibility); err != nil {
		return nil, err
	}
	return s.take(ctx, max, func(i, n int) ([]storage.Message, error) { return s.shards[i].Dequeue(ctx, n, visibility) })
}

// Peek returns up to max visible messages of the shards.
func (s *ShardedQueue) Peek(ctx context.Context, max int) ([]storage.Message, error) {
	if err := storage.ValidateDequeue(max, 0); err != nil {
		return nil, err
	}
	return s.take(ctx, max, func(i, n int) ([]storage.Message, error) { return s.shards[i].Peek(ctx, n) })
}

// UpdateVisibility changes the visibility of a message of its shard.
func (s *ShardedQueue) UpdateVisibility(ctx context.Context, id, popReceipt string, visibility time.Duration) (string, time.Time, error) {
	i, rest, _ := splitShard(id)
	if i >= len(s.shards) {
		return "", time.Time{}, fmt.Errorf("%w: message %s of shard %d (the queue has %d shards)", storage.ErrNotFound, id, i, len(s.shards))
	}
	return s.shards[i].UpdateVisibility(ctx, rest, popReceipt, visibility)
}

// Delete deletes a message of its shard.
func (s *ShardedQueue) Delete(ctx context.Context, id, popReceipt string) error {
	i, rest, _ := splitShard(id)
	if i >= len(s.shards) {
		return fmt.Errorf("%w: message %s of shard %d (the queue has %d shards)", storage.ErrNotFound, id, i, len(s.shards))
	}
	return s.shards[i].Delete(ctx, rest, popReceipt)
}

// ApproximateCount adds up the shards' counts (one call each).
func (s *ShardedQueue) ApproximateCount(ctx context.Context) (int, error) {
	total := 0
	for _, q := range s.shards {
		c, err := q.ApproximateCount(ctx)
		if err != nil {
			return 0, err
		}
		total += c
	}
	return total, nil
}
