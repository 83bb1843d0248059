package enqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/storage"
)

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
	if !found || err != nil || i < 1 || i >= layout.MaxShards {
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
func OpenQueue(ctx context.Context, st storage.Store, names layout.Names, q string) (storage.Queue, error) {
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
