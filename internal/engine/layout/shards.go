package layout

import (
	"fmt"
	"strconv"

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
