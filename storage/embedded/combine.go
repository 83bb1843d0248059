package embedded

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cmdq-dev/cmdq/storage"
)

var _ storage.Combiner = (*Store)(nil)

// BatchEnqueue applies a table batch and an enqueue in one engine batch
// (one log record, sharing its fsync with other writers): all or nothing.
// The Issuer uses it to store a command and queue its message at the cost of
// one durable write.
func (s *Store) BatchEnqueue(ctx context.Context, tableName, partitionKey string, ops []storage.BatchOp, queueName, text string, visibilityDelay, ttl time.Duration) ([]string, storage.Message, error) {
	st, err := s.Table(ctx, tableName)
	if err != nil {
		return nil, storage.Message{}, err
	}
	sq, err := s.Queue(ctx, queueName)
	if err != nil {
		return nil, storage.Message{}, err
	}
	t, q := st.(*table), sq.(*queue)
	if err := storage.ValidateBatch(partitionKey, ops); err != nil {
		return nil, storage.Message{}, err
	}
	tb, err := t.prepare(ctx, partitionKey, ops)
	if err != nil {
		return nil, storage.Message{}, err
	}
	e, err := q.prepareEnqueue(ctx, text, visibilityDelay, ttl)
	if err != nil {
		return nil, storage.Message{}, err
	}
	if err := s.commitBatch(tb, q, e.stage); err != nil {
		return nil, storage.Message{}, err
	}
	return tb.etags, e.msg, nil
}

// maxManyItems bounds the items of one BatchEnqueueMany engine batch; more
// are written in further batches (one commit each).
const maxManyItems = 1000

// BatchEnqueueMany applies many table batches, each on its own partition,
// and enqueues one message for each, in one engine batch (one log record,
// one fsync shared with other writers): a batch issue of many commands at
// the cost of one durable write. An item whose batch fails gets its error
// and is left out; the others are applied. More than 1000 items take one
// commit per 1000.
func (s *Store) BatchEnqueueMany(ctx context.Context, tableName, queueName string, items []storage.CombinedItem, visibilityDelay, ttl time.Duration) ([]storage.CombinedResult, error) {
	st, err := s.Table(ctx, tableName)
	if err != nil {
		return nil, err
	}
	sq, err := s.Queue(ctx, queueName)
	if err != nil {
		return nil, err
	}
	t, q := st.(*table), sq.(*queue)
	res := make([]storage.CombinedResult, len(items))
	type prepared struct {
		i  int
		tb *tableBatch
		e  *enqueue
	}
	var ps []prepared
	seen := make(map[string]bool, len(items))
	for i, it := range items {
		if seen[it.PartitionKey] {
			res[i].Err = fmt.Errorf("%w: partition %q is named by an earlier item of the same call", storage.ErrInvalidArgument, it.PartitionKey)
			continue
		}
		seen[it.PartitionKey] = true
		if err := storage.ValidateBatch(it.PartitionKey, it.Ops); err != nil {
			res[i].Err = err
			continue
		}
		tb, err := t.prepare(ctx, it.PartitionKey, it.Ops)
		if err != nil {
			res[i].Err = err
			continue
		}
		text := it.Text
		if it.TextFunc != nil {
			text = it.TextFunc(slices.Clone(tb.etags)) // known once prepared
		}
		e, err := q.prepareEnqueue(ctx, text, visibilityDelay, ttl)
		if err != nil {
			res[i].Err = err
			continue
		}
		ps = append(ps, prepared{i, tb, e})
	}
	for len(ps) > 0 {
		chunk := ps[:min(len(ps), maxManyItems)]
		ps = ps[len(chunk):]
		tbs := make([]*tableBatch, len(chunk))
		for k, p := range chunk {
			tbs[k] = p.tb
		}
		staged, err := s.commitMany(t, tbs, q, func(b *pebble.Batch, ok []int) func() {
			es := make([]*enqueue, len(ok))
			for k, j := range ok {
				es[k] = chunk[j].e
			}
			return q.stageMany(b, es)
		})
		if err != nil {
			return nil, fmt.Errorf("embedded: batch enqueue on %q: %w", queueName, err)
		}
		for k, p := range chunk {
			if staged[k] != nil {
				res[p.i].Err = staged[k]
				continue
			}
			res[p.i].ETags, res[p.i].Message = p.tb.etags, p.e.msg
		}
	}
	return res, nil
}

// commitMany stages the table batches tbs (each on its own partition of t)
// and, for those that staged, the queue part, then applies and syncs them
// as one engine batch. It returns each table batch's own error (nil when it
// was applied); err fails them all (nothing applied).
func (s *Store) commitMany(t *table, tbs []*tableBatch, q *queue, stageQ func(b *pebble.Batch, ok []int) (after func())) (itemErrs []error, err error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.gate.RUnlock()
	// Take the partitions' locks in slot order (no two callers wait on
	// each other).
	slots := make([]int, 0, len(tbs))
	for _, tb := range tbs {
		slots = append(slots, s.partitionSlot(t.lower, tb.pk))
	}
	slices.Sort(slots)
	slots = slices.Compact(slots)
	for _, i := range slots {
		s.parts[i].Lock()
	}
	locked := true
	unlock := func() {
		if locked {
			for _, i := range slots {
				s.parts[i].Unlock()
			}
			locked = false
		}
	}
	defer unlock()
	if err := t.deletedErr(); err != nil {
		return nil, err
	}
	b := s.db.NewBatch()
	itemErrs = make([]error, len(tbs))
	var ok []int
	for k, tb := range tbs {
		if err := tb.stage(b); err != nil {
			if errors.Is(err, ErrCorrupt) {
				_ = b.Close()
				return nil, err
			}
			itemErrs[k] = err
			continue
		}
		ok = append(ok, k)
	}
	if len(ok) == 0 {
		_ = b.Close()
		return itemErrs, nil
	}
	q.mu.Lock()
	if err := q.deletedErr(); err != nil {
		q.mu.Unlock()
		_ = b.Close()
		return nil, err
	}
	after := stageQ(b, ok)
	err = s.apply(b)
	if err == nil {
		after()
	}
	q.settle(false)
	q.mu.Unlock()
	unlock() // writers never wait for another's fsync
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	if err := s.syncWait(b); err != nil {
		return nil, err
	}
	for _, k := range ok {
		s.names.settle(tbs[k].fresh)
	}
	return itemErrs, nil
}

// BatchDelete applies a table batch and deletes a dequeued message in one
// engine batch. The batch decides: when it fails nothing is deleted; when it
// succeeds it is applied even if the delete fails, and the delete's error
// (ErrLeaseLost, ErrNotFound) comes back as deleteErr. The processor uses it
// to write a command's final batch and delete its message in one commit.
func (s *Store) BatchDelete(ctx context.Context, tableName, partitionKey string, ops []storage.BatchOp, queueName, id, popReceipt string) (etags []string, deleteErr, err error) {
	st, err := s.Table(ctx, tableName)
	if err != nil {
		return nil, nil, err
	}
	sq, err := s.Queue(ctx, queueName)
	if err != nil {
		return nil, nil, err
	}
	t, q := st.(*table), sq.(*queue)
	if err := storage.ValidateBatch(partitionKey, ops); err != nil {
		return nil, nil, err
	}
	tb, err := t.prepare(ctx, partitionKey, ops)
	if err != nil {
		return nil, nil, err
	}
	d, derr := q.prepareDelete(ctx, id, popReceipt)
	if derr != nil {
		// The batch still applies; the delete's error is reported.
		if err := s.commitBatch(tb, nil, nil); err != nil {
			return nil, nil, err
		}
		return tb.etags, derr, nil
	}
	err = s.commitBatch(tb, q, func(b *pebble.Batch) func() {
		after, opErr := d.stage(b)
		if opErr != nil {
			deleteErr = fmt.Errorf("embedded: delete message %s on %q: %w", id, queueName, opErr)
		}
		return after
	})
	if err != nil {
		return nil, nil, err
	}
	return tb.etags, deleteErr, nil
}

var _ storage.GroupCombiner = (*Store)(nil)

// maxGroupItems bounds the items of one BatchDeleteMany engine batch; more
// are written in further batches.
const maxGroupItems = 1000

// BatchDeleteMany applies the table batches and message deletes of many
// completions in one engine batch: one log record, one fsync shared with
// the other writers. Each item is decided as one BatchDelete. The
// processor's completer writes the completions that are ready together
// with it.
func (s *Store) BatchDeleteMany(ctx context.Context, items []storage.DeleteItem) ([]storage.DeleteResult, error) {
	res := make([]storage.DeleteResult, len(items))
	var ps []*groupItem
	type part struct{ table, pk string }
	seenPart := make(map[part]bool, len(items))
	seenMsg := make(map[string]bool, len(items))
	for i, it := range items {
		st, err := s.Table(ctx, it.Table)
		if err != nil {
			if errors.Is(err, storage.ErrClosed) {
				return nil, err
			}
			res[i].Err = err
			continue
		}
		sq, err := s.Queue(ctx, it.Queue)
		if err != nil {
			if errors.Is(err, storage.ErrClosed) {
				return nil, err
			}
			res[i].Err = err
			continue
		}
		t, q := st.(*table), sq.(*queue)
		p, m := part{t.lower, it.PartitionKey}, it.Queue+"\x00"+it.ID
		if seenPart[p] || seenMsg[m] {
			res[i].Err = fmt.Errorf("%w: partition %q or message %s is named by an earlier item of the same call", storage.ErrInvalidArgument, it.PartitionKey, it.ID)
			continue
		}
		seenPart[p], seenMsg[m] = true, true
		if err := storage.ValidateBatch(it.PartitionKey, it.Ops); err != nil {
			res[i].Err = err
			continue
		}
		tb, err := t.prepare(ctx, it.PartitionKey, it.Ops)
		if err != nil {
			res[i].Err = err
			continue
		}
		d, derr := q.prepareDelete(ctx, it.ID, it.PopReceipt)
		ps = append(ps, &groupItem{i: i, tb: tb, q: q, d: d, deleteErr: derr})
	}
	for len(ps) > 0 {
		chunk := ps[:min(len(ps), maxGroupItems)]
		ps = ps[len(chunk):]
		if err := s.commitGroup(chunk); err != nil {
			return nil, fmt.Errorf("embedded: grouped completion: %w", err)
		}
		for _, g := range chunk {
			if g.err != nil {
				res[g.i].Err = g.err
				continue
			}
			res[g.i].ETags, res[g.i].DeleteErr = g.tb.etags, g.deleteErr
		}
	}
	return res, nil
}

// groupItem is one prepared item of BatchDeleteMany.
type groupItem struct {
	i         int
	tb        *tableBatch
	q         *queue
	d         *deletion // nil when the delete was refused before any read
	deleteErr error
	err       error // the batch's own failure
}

// commitGroup stages every item's table batch under its partition's lock
// (partitions taken in slot order) and, for the items whose batch staged,
// the deletes under their queues' locks (taken in name order), then
// applies and syncs them as one engine batch. An error fails them all:
// nothing is applied.
func (s *Store) commitGroup(items []*groupItem) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.RUnlock()
	slots := make([]int, 0, len(items))
	for _, g := range items {
		slots = append(slots, s.partitionSlot(g.tb.t.lower, g.tb.pk))
	}
	slices.Sort(slots)
	slots = slices.Compact(slots)
	for _, i := range slots {
		s.parts[i].Lock()
	}
	locked := true
	unlock := func() {
		if locked {
			for _, i := range slots {
				s.parts[i].Unlock()
			}
			locked = false
		}
	}
	defer unlock()
	b := s.db.NewBatch()
	var byQueue map[*queue][]*groupItem
	for _, g := range items {
		err := g.tb.t.deletedErr()
		if err == nil {
			err = g.tb.stage(b)
		}
		if errors.Is(err, ErrCorrupt) {
			_ = b.Close()
			return err
		}
		if g.err = err; err != nil || g.d == nil {
			continue
		}
		if byQueue == nil {
			byQueue = make(map[*queue][]*groupItem, 1)
		}
		byQueue[g.q] = append(byQueue[g.q], g)
	}
	qs := make([]*queue, 0, len(byQueue))
	for q := range byQueue {
		qs = append(qs, q)
	}
	slices.SortFunc(qs, func(a, b *queue) int { return strings.Compare(a.name, b.name) })
	afters := make([]func(), 0, len(qs))
	for _, q := range qs {
		q.mu.Lock()
		gs := byQueue[q]
		if err := q.deletedErr(); err != nil {
			for _, g := range gs {
				g.deleteErr = fmt.Errorf("embedded: delete message on %q: %w", q.name, err)
			}
			continue
		}
		ds := make([]*deletion, len(gs))
		for k, g := range gs {
			ds[k] = g.d
		}
		after, errs := q.stageDeletes(b, ds)
		afters = append(afters, after)
		for k, g := range gs {
			if errs[k] != nil {
				g.deleteErr = fmt.Errorf("embedded: delete message on %q: %w", q.name, errs[k])
			}
		}
	}
	// The group counts as as many waiting writes as it has items, so a
	// crowded log holds its next sync for it as for as many separate
	// writes (open.go, holdNext).
	weight := int64(0)
	for _, g := range items {
		if g.err == nil {
			weight++
		}
	}
	weight = max(weight, 1)
	var err error
	if !b.Empty() {
		err = s.applyN(b, weight)
	}
	if err == nil {
		for _, after := range afters {
			after()
		}
	}
	for _, q := range qs {
		q.settle(false)
		q.mu.Unlock()
	}
	unlock() // writers never wait for another's fsync
	if err != nil || b.Empty() {
		_ = b.Close()
		return err
	}
	if err := s.syncWaitN(b, weight); err != nil {
		return err
	}
	for _, g := range items {
		if g.err == nil {
			s.names.settle(g.tb.fresh)
		}
	}
	return nil
}
