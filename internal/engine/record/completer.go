package record

import (
	"context"
	"fmt"
	"sync"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// Completer writes the final batches and message deletes of concurrent
// completions together: the completions that become ready while a group
// is being written go into the next group, one
// storage.GroupCombiner.BatchDeleteMany call (on the embedded store, one
// engine batch and one log sync for the whole group), as River's batch
// completer completes many jobs in one statement. A completion that finds
// no group being written is written at once, alone (no timer: a trickle
// waits for nothing).
//
// "Completed" still means durable: AppendAndDelete returns, and the
// Store's Options.Changed hook (which wakes the watchers of cmdq.Client.Wait
// and the status API's long polls) runs, only after the group's write
// (and so its log sync) returned. Each item is decided on its own, as one
// Store.AppendAndDelete: a conflict or a failure of one command's batch
// does not touch the others.
//
// A Completer is safe for concurrent use.
type Completer struct {
	s  *Store
	gc storage.GroupCombiner

	mu      sync.Mutex
	pending []*completion
	leaders int // goroutines writing a group now (at most maxLeaders)
}

// maxLeaders is the most groups written at once: while one waits for its
// log sync, the next is applied and shares that sync or the next one (the
// embedded store's log groups them), so the handlers that completed
// meanwhile do not wait for a whole sync before theirs begins.
const maxLeaders = 2

// NewCompleter returns a Completer writing s's completions through gc.
func NewCompleter(s *Store, gc storage.GroupCombiner) *Completer {
	return &Completer{s: s, gc: gc}
}

// maxGroup is the most completions one group writes (a processor holds at
// most Concurrency of them; more wait for the next group).
const maxGroup = 256

// completion is one AppendAndDelete waiting for its group.
type completion struct {
	item storage.DeleteItem
	// wake receives true when this completion's goroutine is to write
	// group (its own completion first in it), false once its group was
	// written (res set).
	wake  chan bool
	group []*completion
	res   storage.DeleteResult
}

// AppendAndDelete is Store.AppendAndDelete through the group: the events
// and projection of rec and the delete of the message id (popReceipt) on
// the storage queue named queue, written with the other completions ready
// at the same moment in one durable write. Results and errors are
// Store.AppendAndDelete's, and rec is updated in place the same way.
func (c *Completer) AppendAndDelete(ctx context.Context, rec *Record, queue, id, popReceipt string, events ...model.Event) (deleteErr, err error) {
	ops, res, err := c.s.appendOps(rec, events)
	if err != nil {
		return nil, err
	}
	tb, err := c.s.tableOf(ctx, rec)
	if err != nil {
		return nil, fmt.Errorf("cmdq: append to command %s: %w", rec.ID, err)
	}
	x := &completion{
		item: storage.DeleteItem{Table: tb.Name(), PartitionKey: rec.ID, Ops: ops, Queue: queue, ID: id, PopReceipt: popReceipt},
		wake: make(chan bool, 1),
	}
	c.mu.Lock()
	c.pending = append(c.pending, x)
	lead := c.leaders < maxLeaders
	if lead {
		c.leaders++
		x.group = c.take(x)
	}
	c.mu.Unlock()
	if !lead {
		lead = <-x.wake
	}
	if lead {
		c.lead(ctx, x)
	}
	return x.res.DeleteErr, c.s.appended(ctx, rec, res, x.res.ETags, x.res.Err)
}

// lead writes x's group, then hands the lead on with the next group of
// the completions still pending, or gives it up.
func (c *Completer) lead(ctx context.Context, x *completion) {
	group := x.group
	c.write(ctx, group)
	c.mu.Lock()
	var next *completion
	if len(c.pending) > 0 {
		next = c.pending[0]
		next.group = c.take(next)
	} else {
		c.leaders--
	}
	c.mu.Unlock()
	for _, g := range group {
		if g != x {
			g.wake <- false
		}
	}
	if next != nil {
		next.wake <- true
	}
}

// take removes the group that first leads from pending (under mu): first
// and up to maxGroup-1 more completions, at most one per command partition
// (a second one waits for a later group: a group's items name distinct
// partitions).
func (c *Completer) take(first *completion) []*completion {
	group := make([]*completion, 1, min(len(c.pending), maxGroup))
	group[0] = first
	var rest []*completion
	var seen map[string]bool
	if len(c.pending) > 1 {
		seen = make(map[string]bool, min(len(c.pending), maxGroup))
		seen[first.item.Table+"\x00"+first.item.PartitionKey] = true
	}
	for _, x := range c.pending {
		if x == first {
			continue
		}
		k := x.item.Table + "\x00" + x.item.PartitionKey
		if len(group) >= maxGroup || seen[k] {
			rest = append(rest, x)
			continue
		}
		seen[k] = true
		group = append(group, x)
	}
	c.pending = rest
	return group
}

// write writes group in one call and sets each completion's result.
func (c *Completer) write(ctx context.Context, group []*completion) {
	items := make([]storage.DeleteItem, len(group))
	for i, g := range group {
		items[i] = g.item
	}
	res, err := c.gc.BatchDeleteMany(ctx, items)
	for i, g := range group {
		if err != nil {
			g.res = storage.DeleteResult{Err: err}
			continue
		}
		g.res = res[i]
	}
}
