package issuer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
)

// Background retries of failed enqueues (see IssuerOptions.EnqueueRetry).
const (
	// DefaultEnqueueRetry is the first delay of the Issuer's background
	// retry of a failed enqueue (1 s).
	DefaultEnqueueRetry = time.Second
	// MaxEnqueueRetry caps the delay between background retries (1 minute).
	MaxEnqueueRetry = time.Minute
	// MaxEnqueueRetries is the most commands the background retrier holds
	// (10,000); beyond that, new failures are left to the reconciler (if
	// marked) and to the client's re-issue.
	MaxEnqueueRetries = 10000
	// enqueueRetryTimeout bounds one background retry (enqueue, marker).
	enqueueRetryTimeout = 30 * time.Second
)

// retryItem is one stored command whose enqueue failed.
type retryItem struct {
	id, cmdType, queue string
	marked             bool // an ~unqueued marker exists
	delay              time.Duration
	next               time.Time
}

// retrier re-enqueues, in one background goroutine that lives while it has
// work, the commands whose enqueue failed.
type retrier struct {
	i      *Issuer
	mu     sync.Mutex
	items  map[string]*retryItem
	active bool // the goroutine runs
	closed bool
	kick   chan struct{}
	stop   chan struct{}
	ctx    context.Context // ends at close
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func (r *retrier) init(i *Issuer) {
	r.i = i
	r.items = map[string]*retryItem{}
	r.kick = make(chan struct{}, 1)
	r.stop = make(chan struct{})
	r.ctx, r.cancel = context.WithCancel(context.Background())
}

// add schedules command id for a background retry.
func (r *retrier) add(id, cmdType, queue string, marked bool) {
	first := r.i.opts.EnqueueRetry
	if first < 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if it, ok := r.items[id]; ok {
		it.marked = it.marked || marked
		return
	}
	if len(r.items) >= MaxEnqueueRetries {
		return
	}
	r.items[id] = &retryItem{id: id, cmdType: cmdType, queue: queue, marked: marked, delay: first, next: time.Now().Add(first)}
	if !r.active {
		r.active = true
		r.done.Add(1)
		go r.loop()
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// forget drops command id (a re-issue enqueues it itself).
func (r *retrier) forget(id string) {
	r.mu.Lock()
	delete(r.items, id)
	r.mu.Unlock()
}

// pending returns the number of commands waiting for a retry.
func (r *retrier) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.items)
}

func (r *retrier) close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.stop)
		r.cancel()
	}
	r.mu.Unlock()
	r.done.Wait()
}

// loop retries due commands until none is left or close.
func (r *retrier) loop() {
	defer r.done.Done()
	for {
		r.mu.Lock()
		if len(r.items) == 0 || r.closed {
			r.active = false
			r.mu.Unlock()
			return
		}
		now := time.Now()
		var due []retryItem
		wait := MaxEnqueueRetry
		for _, it := range r.items {
			if !it.next.After(now) {
				due = append(due, *it)
			} else {
				wait = min(wait, it.next.Sub(now))
			}
		}
		r.mu.Unlock()
		if len(due) == 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-r.kick:
			case <-r.stop:
			}
			t.Stop()
			continue
		}
		for _, it := range due {
			select {
			case <-r.stop:
				continue
			default:
			}
			r.try(it)
		}
	}
}

// try makes one retry of it and records the outcome.
func (r *retrier) try(it retryItem) {
	ctx, cancel := context.WithTimeout(r.ctx, enqueueRetryTimeout)
	defer cancel()
	st, enq, err := r.i.log(ctx)
	var rec *record.Record
	if err == nil {
		rec, err = st.Load(ctx, it.id)
	}
	if err == nil && (rec.State != model.StatePending || rec.Attempts != 0) {
		// Started or finished: a message exists (or existed) for it after
		// all (the failed enqueue had landed), so there is nothing to do.
		r.forget(it.id)
		if it.marked {
			_ = st.ClearUnqueued(ctx, it.id)
		}
		return
	}
	if err == nil {
		// A recovery: the first enqueue may have landed after all.
		_, _, err = enq.Recover(ctx, rec, By, "enqueue failed at issue: enqueued again by the issuer's background retry", true)
	}
	if errors.Is(err, model.ErrNotFound) {
		r.forget(it.id) // never stored (or removed): nothing to enqueue
		return
	}
	if err == nil {
		r.forget(it.id)
		if it.marked {
			// The reconciler need not look at it again. A failure here
			// only costs the reconciler a load and a delete later.
			_ = st.ClearUnqueued(ctx, it.id)
		}
		return
	}
	marked := it.marked
	if !marked && st != nil && st.MarkUnqueued(ctx, it.id, it.queue) == nil {
		marked = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.items[it.id]
	if !ok {
		return
	}
	cur.marked = cur.marked || marked
	cur.delay = min(2*cur.delay, MaxEnqueueRetry)
	cur.next = time.Now().Add(cur.delay)
}
