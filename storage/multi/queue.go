package multi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// queue is one queue name in every member. Message IDs are "<member>:<the
// member's message ID>".
type queue struct {
	s    *Store
	name string

	mu   sync.Mutex
	subs []storage.Queue // nil: not opened in that member yet (it was down)
}

func (q *queue) Name() string { return q.name }

// sub runs f on member i's queue, opening it first if needed.
func (q *queue) sub(ctx context.Context, i int, f func(storage.Queue) error) error {
	return q.s.wrap(i, q.s.do(i, func(st storage.Store) error {
		q.mu.Lock()
		sq := q.subs[i]
		q.mu.Unlock()
		if sq == nil {
			var err error
			if sq, err = st.Queue(ctx, q.name); err != nil {
				return err
			}
			q.mu.Lock()
			q.subs[i] = sq
			q.mu.Unlock()
		}
		return f(sq)
	}))
}

func msgID(i int, id string) string { return strconv.Itoa(i) + ":" + id }

// parseID splits a message ID into its member and the member's ID.
func (q *queue) parseID(id string) (int, string, error) {
	k, rest, ok := strings.Cut(id, ":")
	i, err := strconv.Atoi(k)
	if !ok || err != nil || i < 0 || i >= len(q.s.members) {
		return 0, "", fmt.Errorf("%w: message %q is not one of this store's (they look like <member>:<id>)", storage.ErrNotFound, id)
	}
	return i, rest, nil
}

func (q *queue) Enqueue(ctx context.Context, text string, visibilityDelay, ttl time.Duration) (storage.Message, error) {
	if err := storage.ValidateEnqueue(text, visibilityDelay, ttl); err != nil {
		return storage.Message{}, err
	}
	var i int
	if key, ok := storage.RoutingKeyFrom(ctx); ok {
		i = q.s.MemberOf(key)
	} else {
		i = int(q.s.rr.Add(1) % uint64(len(q.s.members)))
	}
	var m storage.Message
	err := q.sub(ctx, i, func(sq storage.Queue) (err error) {
		m, err = sq.Enqueue(ctx, text, visibilityDelay, ttl)
		return err
	})
	if err != nil {
		return storage.Message{}, err
	}
	m.ID = msgID(i, m.ID)
	return m, nil
}

// take collects up to max messages from the members in turn, starting at
// a rotating member; unhealthy members are skipped: their error is
// returned only when no member answered, so that a lost member does not
// make the others' pollers back off as from a fault (Store.Members reports
// it).
func (q *queue) take(ctx context.Context, max int, f func(sq storage.Queue, n int) ([]storage.Message, error)) ([]storage.Message, error) {
	n := len(q.s.members)
	start := int(q.s.rr.Add(1) % uint64(n))
	out := []storage.Message{}
	var errs []error
	for k := 0; k < n && len(out) < max; k++ {
		i := (start + k) % n
		var got []storage.Message
		err := q.sub(ctx, i, func(sq storage.Queue) (err error) {
			got, err = f(sq, max-len(out))
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			errs = append(errs, err)
			continue
		}
		for _, m := range got {
			m.ID = msgID(i, m.ID)
			out = append(out, m)
		}
	}
	if len(errs) == n {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func (q *queue) Dequeue(ctx context.Context, max int, visibility time.Duration) ([]storage.Message, error) {
	if err := storage.ValidateDequeue(max, visibility); err != nil {
		return nil, err
	}
	return q.take(ctx, max, func(sq storage.Queue, n int) ([]storage.Message, error) { return sq.Dequeue(ctx, n, visibility) })
}

func (q *queue) Peek(ctx context.Context, max int) ([]storage.Message, error) {
	if err := storage.ValidateDequeue(max, 0); err != nil {
		return nil, err
	}
	return q.take(ctx, max, func(sq storage.Queue, n int) ([]storage.Message, error) { return sq.Peek(ctx, n) })
}

func (q *queue) UpdateVisibility(ctx context.Context, id, popReceipt string, visibility time.Duration) (string, time.Time, error) {
	if err := storage.ValidateVisibility(visibility); err != nil {
		return "", time.Time{}, err
	}
	i, inner, err := q.parseID(id)
	if err != nil {
		return "", time.Time{}, err
	}
	var r string
	var next time.Time
	err = q.sub(ctx, i, func(sq storage.Queue) (err error) {
		r, next, err = sq.UpdateVisibility(ctx, inner, popReceipt, visibility)
		return err
	})
	return r, next, err
}

func (q *queue) Delete(ctx context.Context, id, popReceipt string) error {
	i, inner, err := q.parseID(id)
	if err != nil {
		return err
	}
	return q.sub(ctx, i, func(sq storage.Queue) error { return sq.Delete(ctx, inner, popReceipt) })
}

// ApproximateCount adds up the members' counts (one call each); it fails
// when a member cannot be counted.
func (q *queue) ApproximateCount(ctx context.Context) (int, error) {
	counts := make([]int, len(q.s.members))
	errs := make([]error, len(q.s.members))
	var wg sync.WaitGroup
	for i := range q.s.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = q.sub(ctx, i, func(sq storage.Queue) (err error) {
				counts[i], err = sq.ApproximateCount(ctx)
				return err
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	return total, nil
}
