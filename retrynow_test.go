package cmdq_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage"
)

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
