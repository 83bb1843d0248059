package status

import (
	"context"
	"fmt"
)

// QueueDepth returns the approximate number of messages on logical queue name
// ("" means DefaultQueue), visible or not: one storage call. Operators' pages
// show it; it is not exact (see storage.Queue.ApproximateCount).
func (r *Reader) QueueDepth(ctx context.Context, name string) (int, error) {
	q, err := r.st.Queue(ctx, r.names.Queue(name))
	if err != nil {
		return 0, fmt.Errorf("status: queue %q: %w", name, err)
	}
	n, err := q.ApproximateCount(ctx)
	if err != nil {
		return 0, fmt.Errorf("status: depth of queue %q: %w", name, err)
	}
	return n, nil
}
