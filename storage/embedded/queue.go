package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/storage"
)

// A message record: fixed header then the text.
const (
	offInserted = 0
	offExpires  = 8  // 0 = never
	offVisible  = 16 // next visible, unix nanos
	offDequeues = 24
	offReceipt  = 32
	headerLen   = 40
)

// queue is one queue. Its writes (enqueue, dequeue, visibility, delete,
// purge) hold mu while they read and apply, so they see each other in
// order; they wait for the log sync after releasing it.
type queue struct {
	s      *Store
	name   string
	prefix []byte // "q" + name + 0x00

	mu sync.Mutex
	// deleted is set (under mu) by DeleteQueue: every call fails.
	deleted atomic.Bool
	// low is a lower bound of the live visibility index: every index key
	// below it is known deleted, so scans start there instead of walking
	// over the tombstones that dequeues and deletes leave at the head of
	// the index until compaction drops them. Guarded by mu; lowView is a
	// copy for readers.
	low     []byte
	lowView atomic.Pointer[[]byte]
	count   atomic.Int64 // messages in the queue; written under mu
	// recs holds the stored record of recently written messages (guarded
	// by mu, which every write of a message holds), so that the delete or
	// lease update that follows a dequeue, and the dequeue that follows an
	// enqueue, need not read it back. At most maxRecs entries.
	recs map[[16]byte][]byte
	gone [][]byte // ids dropped by the write being staged (under mu)
}

// maxRecs bounds queue.recs (about 200 bytes an entry for cmdq's messages).
const maxRecs = 4096

// load returns a copy of the stored record of message id (under mu, or
// on a reader queue without recs).
func (q *queue) load(id []byte) (rec []byte, found bool, err error) {
	if r, ok := q.recs[[16]byte(id)]; ok {
		return append([]byte(nil), r...), true, nil
	}
	return q.s.get(q.msgKey(id))
}

// remember records that rec (not changed afterwards) is now stored for id
// (under mu, after the write is applied).
func (q *queue) remember(id, rec []byte) {
	if len(q.recs) >= maxRecs {
		n := 0
		for k := range q.recs {
			delete(q.recs, k)
			if n++; n >= maxRecs/4 {
				break
			}
		}
	}
	q.recs[[16]byte(id)] = rec
}

// forget records that message id was deleted (under mu, after the write).
func (q *queue) forget(id []byte) { delete(q.recs, [16]byte(id)) }

var _ storage.Queue = (*queue)(nil)

func (q *queue) Name() string { return q.name }

func u64(b []byte) uint64           { return binary.BigEndian.Uint64(b) }
func i64(b []byte) int64            { return int64(binary.BigEndian.Uint64(b)) }
func putI64(b []byte, v int64)      { binary.BigEndian.PutUint64(b, uint64(v)) }
func fromNanos(n int64) time.Time   { return time.Unix(0, n).UTC() }
func receiptString(r uint64) string { return strconv.FormatUint(r, 16) }

func (q *queue) countKey() []byte { return append(q.prefix[:len(q.prefix):len(q.prefix)], 'n') }

func (q *queue) msgKey(id []byte) []byte {
	k := make([]byte, 0, len(q.prefix)+1+16)
	k = append(k, q.prefix...)
	k = append(k, 'm')
	return append(k, id...)
}

func (q *queue) indexKey(visible int64, id []byte) []byte {
	k := make([]byte, len(q.prefix)+1+8+16)
	n := copy(k, q.prefix)
	k[n] = 'v'
	putI64(k[n+1:], visible)
	copy(k[n+9:], id)
	return k
}

// indexStart is the first possible index key; indexEnd is past the last.
func (q *queue) indexStart() []byte { return append(q.prefix[:len(q.prefix):len(q.prefix)], 'v') }
func (q *queue) indexEnd() []byte   { return append(q.prefix[:len(q.prefix):len(q.prefix)], 'w') }

// indexParts splits an index key into visible time and message id.
func (q *queue) indexParts(k []byte) (visible int64, id []byte, ok bool) {
	k = k[len(q.prefix):]
	if len(k) != 1+8+16 || k[0] != 'v' {
		return 0, nil, false
	}
	return i64(k[1:]), k[9:], true
}

func expired(rec []byte, now int64) bool {
	e := i64(rec[offExpires:])
	return e != 0 && e <= now
}

// openQueue loads (creating if needed) a queue's count and registry entry.
func (s *Store) openQueue(name string) (*queue, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.gate.RUnlock()
	q := &queue{s: s, name: name, prefix: []byte("q" + name + "\x00"), recs: map[[16]byte][]byte{}}
	q.setLow(q.indexStart())
	v, found, err := s.get(q.countKey())
	if err != nil {
		return nil, err
	}
	if found {
		if len(v) != 8 {
			return nil, corrupt(s.dir, s.dir, fmt.Errorf("queue %q: count record of %d bytes", name, len(v)))
		}
		q.count.Store(i64(v))
		return q, nil
	}
	b := s.db.NewBatch()
	_ = b.Set([]byte("Q"+name), nil, nil)
	_ = b.Set(q.countKey(), make([]byte, 8), nil)
	if err := s.apply(b); err != nil {
		_ = b.Close()
		return nil, err
	}
	if err := s.syncWait(b); err != nil {
		return nil, err
	}
	return q, nil
}

// setLow moves the scan start (under mu).
func (q *queue) setLow(k []byte) {
	q.low = k
	v := k
	q.lowView.Store(&v)
}

// indexed records that index key k was written (under mu): a key below the
// scan start (a clock that went back) moves the start down to it.
func (q *queue) indexed(k []byte) {
	if bytes.Compare(k, q.low) < 0 {
		q.setLow(k)
	}
}

// writeCount adds the queue's new count to b (under mu).
func (q *queue) writeCount(b *pebble.Batch, n int64) {
	v := make([]byte, 8)
	putI64(v, n)
	_ = b.Set(q.countKey(), v, nil)
}

func (q *queue) Enqueue(ctx context.Context, text string, visibilityDelay, ttl time.Duration) (storage.Message, error) {
	e, err := q.prepareEnqueue(ctx, text, visibilityDelay, ttl)
	if err != nil {
		return storage.Message{}, err
	}
	if err := q.s.enter(); err != nil {
		return storage.Message{}, fmt.Errorf("embedded: enqueue on %q: %w", q.name, err)
	}
	defer q.s.gate.RUnlock()
	b := q.s.db.NewBatch()
	q.mu.Lock()
	if err = q.deletedErr(); err == nil {
		after := e.stage(b)
		err = q.s.apply(b)
		if err == nil {
			after()
		}
	}
	q.mu.Unlock()
	if err == nil {
		err = q.s.syncWait(b)
	} else {
		_ = b.Close()
	}
	if err != nil {
		return storage.Message{}, fmt.Errorf("embedded: enqueue on %q: %w", q.name, err)
	}
	return e.msg, nil
}

// enqueue is a validated enqueue, ready to stage.
type enqueue struct {
	q    *queue
	id   []byte
	rec  []byte
	ikey []byte
	msg  storage.Message
}

// prepareEnqueue validates an enqueue and builds its record.
func (q *queue) prepareEnqueue(ctx context.Context, text string, visibilityDelay, ttl time.Duration) (*enqueue, error) {
	if err := storage.ValidateEnqueue(text, visibilityDelay, ttl); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	u, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("embedded: new message id: %w", err)
	}
	id := u[:]
	now := q.s.now().UnixNano()
	if ttl == 0 {
		ttl = storage.DefaultTTL
	}
	var expires int64
	if ttl > 0 {
		expires = now + int64(ttl)
	}
	visible := now + int64(visibilityDelay)
	receipt := q.s.receipts.Add(1)
	rec := make([]byte, headerLen+len(text))
	putI64(rec[offInserted:], now)
	putI64(rec[offExpires:], expires)
	putI64(rec[offVisible:], visible)
	putI64(rec[offReceipt:], int64(receipt))
	copy(rec[headerLen:], text)
	e := &enqueue{q: q, id: id, rec: rec, ikey: q.indexKey(visible, id)}
	e.msg = storage.Message{
		ID:            u.String(),
		PopReceipt:    receiptString(receipt),
		InsertedAt:    fromNanos(now),
		NextVisibleAt: fromNanos(visible),
	}
	if expires != 0 {
		e.msg.ExpiresAt = fromNanos(expires)
	}
	return e, nil
}

// stage adds the enqueue to b (under q.mu) and returns what to do once b
// is applied.
func (e *enqueue) stage(b *pebble.Batch) (after func()) {
	q := e.q
	_ = b.Set(q.msgKey(e.id), e.rec, nil)
	_ = b.Set(e.ikey, nil, nil)
	n := q.count.Load() + 1
	q.writeCount(b, n)
	return func() {
		q.count.Store(n)
		q.indexed(e.ikey)
		q.remember(e.id, e.rec)
	}
}

// stageMany adds the enqueues es to b (under q.mu), counting them once, and
// returns what to do once b is applied.
func (q *queue) stageMany(b *pebble.Batch, es []*enqueue) (after func()) {
	n := q.count.Load()
	for _, e := range es {
		_ = b.Set(q.msgKey(e.id), e.rec, nil)
		_ = b.Set(e.ikey, nil, nil)
		n++
	}
	q.writeCount(b, n)
	return func() {
		q.count.Store(n)
		for _, e := range es {
			q.indexed(e.ikey)
			q.remember(e.id, e.rec)
		}
	}
}

// scan walks the visibility index from the scan start over messages
// visible at now and calls take for each live one until take returns
// false. Entries that are expired or dangling are passed to stale. It
// returns the key the next scan may start at (everything below it was
// visited). The slices passed to take and stale are copies.
func (q *queue) scan(now int64, take func(id, rec []byte) bool, stale func(k, rec []byte)) (next []byte, err error) {
	low := q.low
	if low == nil {
		low = *q.lowView.Load()
	}
	upper := q.indexKey(now+1, nil)[:len(q.prefix)+9]
	if bytes.Compare(low, upper) >= 0 {
		return low, nil
	}
	it, err := q.s.db.NewIter(&pebble.IterOptions{LowerBound: low, UpperBound: upper})
	if err != nil {
		return nil, q.s.readErr(err)
	}
	// Messages are read through a second iterator, sought forward: index
	// order is mostly id order (time-ordered ids), so the reads walk the
	// message records in order instead of descending the engine's levels
	// once per message.
	var mit *pebble.Iterator
	defer func() {
		if mit != nil {
			if cerr := mit.Close(); cerr != nil && err == nil {
				next, err = nil, q.s.readErr(cerr)
			}
		}
	}()
	read := func(id []byte) ([]byte, bool, error) {
		if r, ok := q.recs[[16]byte(id)]; ok {
			return append([]byte(nil), r...), true, nil
		}
		if mit == nil {
			lo := q.msgKey(nil)
			var err error
			if mit, err = q.s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(append([]byte(nil), lo...))}); err != nil {
				mit = nil
				return nil, false, q.s.readErr(err)
			}
		}
		mk := q.msgKey(id)
		if !mit.SeekGE(mk) || !bytes.Equal(mit.Key(), mk) {
			if err := mit.Error(); err != nil {
				return nil, false, q.s.readErr(err)
			}
			return nil, false, nil
		}
		v, err := mit.ValueAndErr()
		if err != nil {
			return nil, false, q.s.readErr(err)
		}
		return append(make([]byte, 0, len(v)), v...), true, nil
	}
	next = upper
	for ok := it.First(); ok; ok = it.Next() {
		k := append([]byte(nil), it.Key()...)
		visible, id, good := q.indexParts(k)
		if !good {
			stale(k, nil)
			continue
		}
		rec, found, err := read(id)
		if err != nil {
			_ = it.Close()
			return nil, err
		}
		if !found || len(rec) < headerLen || i64(rec[offVisible:]) != visible || expired(rec, now) {
			if !found || len(rec) < headerLen {
				rec = nil
			}
			stale(k, rec)
			continue
		}
		if !take(id, rec) {
			// k is taken (moved) too: the next scan starts after it.
			next = append(k, 0)
			break
		}
	}
	if err := it.Close(); err != nil {
		return nil, q.s.readErr(err)
	}
	return next, nil
}

// dropStale adds the removal of a stale index entry (and of its message,
// if expired) to b and returns the count change.
func (q *queue) dropStale(b *pebble.Batch, k, rec []byte) int64 {
	_ = b.Delete(k, nil)
	if rec == nil {
		return 0 // dangling index entry
	}
	visible, id, _ := q.indexParts(k)
	if i64(rec[offVisible:]) != visible {
		return 0 // an old entry of a live message
	}
	_ = b.Delete(q.msgKey(id), nil)
	q.gone = append(q.gone, append([]byte(nil), id...))
	return -1
}

// settle applies the cache changes of a write once it is applied (under
// mu): the messages dropped by dropStale are forgotten.
func (q *queue) settle(applied bool) {
	if applied {
		for _, id := range q.gone {
			q.forget(id)
		}
	}
	q.gone = q.gone[:0]
}

func (q *queue) Dequeue(ctx context.Context, max int, visibility time.Duration) ([]storage.Message, error) {
	if err := storage.ValidateDequeue(max, visibility); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := q.s.enter(); err != nil {
		return nil, fmt.Errorf("embedded: dequeue from %q: %w", q.name, err)
	}
	defer q.s.gate.RUnlock()
	out := make([]storage.Message, 0, max)
	b := q.s.db.NewBatch()
	q.mu.Lock()
	if err := q.deletedErr(); err != nil {
		q.mu.Unlock()
		_ = b.Close()
		return nil, fmt.Errorf("embedded: dequeue: %w", err)
	}
	now := q.s.now().UnixNano()
	visible := now + int64(visibility)
	var delta int64
	var moved [][]byte
	var taken [][2][]byte
	next, err := q.scan(now, func(id, rec []byte) bool {
		_ = b.Delete(q.indexKey(i64(rec[offVisible:]), id), nil)
		receipt := q.s.receipts.Add(1)
		putI64(rec[offVisible:], visible)
		putI64(rec[offDequeues:], i64(rec[offDequeues:])+1)
		putI64(rec[offReceipt:], int64(receipt))
		_ = b.Set(q.msgKey(id), rec, nil)
		ik := q.indexKey(visible, id)
		_ = b.Set(ik, nil, nil)
		moved = append(moved, ik)
		taken = append(taken, [2][]byte{id, rec})
		out = append(out, toMessage(id, rec, true))
		return len(out) < max
	}, func(k, rec []byte) {
		delta += q.dropStale(b, k, rec)
	})
	if err == nil && !b.Empty() {
		if delta != 0 {
			q.writeCount(b, q.count.Load()+delta)
		}
		err = q.s.apply(b)
	}
	q.settle(err == nil)
	if err == nil {
		q.count.Add(delta)
		q.setLow(next)
		for _, k := range moved {
			q.indexed(k)
		}
		for _, t := range taken {
			q.remember(t[0], t[1])
		}
	}
	q.mu.Unlock()
	if err == nil && !b.Empty() {
		err = q.s.syncWait(b)
	} else {
		_ = b.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("embedded: dequeue from %q: %w", q.name, err)
	}
	return out, nil
}

func toMessage(id, rec []byte, dequeued bool) storage.Message {
	u, _ := uuid.FromBytes(id)
	msg := storage.Message{
		ID:           u.String(),
		Text:         string(rec[headerLen:]),
		DequeueCount: i64(rec[offDequeues:]),
		InsertedAt:   fromNanos(i64(rec[offInserted:])),
	}
	if e := i64(rec[offExpires:]); e != 0 {
		msg.ExpiresAt = fromNanos(e)
	}
	if dequeued {
		msg.PopReceipt = receiptString(u64(rec[offReceipt:]))
		msg.NextVisibleAt = fromNanos(i64(rec[offVisible:]))
	}
	return msg
}

// parseRef checks a message id and pop receipt before any I/O.
func parseRef(id, popReceipt string) (key []byte, receipt uint64, err error) {
	if id == "" {
		return nil, 0, fmt.Errorf("%w: message id is empty; pass the ID from Enqueue or Dequeue", storage.ErrInvalidArgument)
	}
	if popReceipt == "" {
		return nil, 0, fmt.Errorf("%w: pop receipt is empty; pass the PopReceipt from Dequeue or the last UpdateVisibility", storage.ErrInvalidArgument)
	}
	u, perr := uuid.Parse(id)
	if perr != nil {
		return nil, 0, fmt.Errorf("%w: message %q (not an id this queue issues)", storage.ErrNotFound, id)
	}
	r, perr := strconv.ParseUint(popReceipt, 16, 64)
	if perr != nil {
		// Not a receipt this driver issues: it cannot match.
		return u[:], 0, nil
	}
	return u[:], r, nil
}

// owned loads the message and checks the receipt (under q.mu). An expired
// message is removed in b and reported as not found (count delta -1).
func (q *queue) owned(b *pebble.Batch, id []byte, receipt uint64, now int64) (rec []byte, delta int64, err error) {
	if err := q.deletedErr(); err != nil {
		return nil, 0, err
	}
	rec, found, err := q.load(id)
	if err != nil {
		return nil, 0, err
	}
	if !found || len(rec) < headerLen {
		return nil, 0, storage.ErrNotFound
	}
	if expired(rec, now) {
		_ = b.Delete(q.indexKey(i64(rec[offVisible:]), id), nil)
		_ = b.Delete(q.msgKey(id), nil)
		q.gone = append(q.gone, append([]byte(nil), id...))
		return nil, -1, fmt.Errorf("%w: message expired", storage.ErrNotFound)
	}
	if receipt == 0 || u64(rec[offReceipt:]) != receipt {
		return nil, 0, storage.ErrLeaseLost
	}
	return rec, 0, nil
}

func (q *queue) UpdateVisibility(ctx context.Context, id, popReceipt string, visibility time.Duration) (string, time.Time, error) {
	key, receipt, err := parseRef(id, popReceipt)
	if err == nil {
		err = storage.ValidateVisibility(visibility)
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("embedded: update visibility on %q: %w", q.name, err)
	}
	if err := ctx.Err(); err != nil {
		return "", time.Time{}, err
	}
	if err := q.s.enter(); err != nil {
		return "", time.Time{}, fmt.Errorf("embedded: update visibility of message %s on %q: %w", id, q.name, err)
	}
	defer q.s.gate.RUnlock()
	var newReceipt uint64
	var visible int64
	b := q.s.db.NewBatch()
	q.mu.Lock()
	now := q.s.now().UnixNano()
	rec, delta, opErr := q.owned(b, key, receipt, now)
	var ik []byte
	if opErr == nil {
		_ = b.Delete(q.indexKey(i64(rec[offVisible:]), key), nil)
		visible = now + int64(visibility)
		newReceipt = q.s.receipts.Add(1)
		putI64(rec[offVisible:], visible)
		putI64(rec[offReceipt:], int64(newReceipt))
		_ = b.Set(q.msgKey(key), rec, nil)
		ik = q.indexKey(visible, key)
		_ = b.Set(ik, nil, nil)
	}
	if delta != 0 {
		q.writeCount(b, q.count.Load()+delta)
	}
	if !b.Empty() {
		err = q.s.apply(b)
		if err == nil {
			q.count.Add(delta)
			if ik != nil {
				q.indexed(ik)
				q.remember(key, rec)
			}
		}
	}
	q.settle(err == nil && !b.Empty())
	q.mu.Unlock()
	if err == nil && !b.Empty() {
		err = q.s.syncWait(b)
	} else {
		_ = b.Close()
	}
	if err == nil {
		err = opErr
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("embedded: update visibility of message %s on %q: %w", id, q.name, err)
	}
	return receiptString(newReceipt), fromNanos(visible), nil
}

func (q *queue) Delete(ctx context.Context, id, popReceipt string) error {
	d, err := q.prepareDelete(ctx, id, popReceipt)
	if err != nil {
		return err
	}
	if err := q.s.enter(); err != nil {
		return fmt.Errorf("embedded: delete message %s on %q: %w", id, q.name, err)
	}
	defer q.s.gate.RUnlock()
	b := q.s.db.NewBatch()
	q.mu.Lock()
	after, opErr := d.stage(b)
	if !b.Empty() {
		err = q.s.apply(b)
		if err == nil {
			after()
		}
	}
	q.settle(false)
	q.mu.Unlock()
	if err == nil && !b.Empty() {
		err = q.s.syncWait(b)
	} else {
		_ = b.Close()
	}
	if err == nil {
		err = opErr
	}
	if err != nil {
		return fmt.Errorf("embedded: delete message %s on %q: %w", id, q.name, err)
	}
	return nil
}

// deletion is a validated delete, ready to stage.
type deletion struct {
	q       *queue
	key     []byte
	receipt uint64
}

// prepareDelete validates a delete.
func (q *queue) prepareDelete(ctx context.Context, id, popReceipt string) (*deletion, error) {
	key, receipt, err := parseRef(id, popReceipt)
	if err != nil {
		return nil, fmt.Errorf("embedded: delete on %q: %w", q.name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &deletion{q: q, key: key, receipt: receipt}, nil
}

// stage adds the delete to b (under q.mu). A stale receipt or a missing
// message is returned as opErr; an expired message is purged in b. after
// is to run once b is applied.
func (d *deletion) stage(b *pebble.Batch) (after func(), opErr error) {
	q := d.q
	rec, delta, err := q.owned(b, d.key, d.receipt, q.s.now().UnixNano())
	if err == nil {
		_ = b.Delete(q.indexKey(i64(rec[offVisible:]), d.key), nil)
		_ = b.Delete(q.msgKey(d.key), nil)
		q.gone = append(q.gone, d.key)
		delta = -1
	}
	if delta != 0 {
		q.writeCount(b, q.count.Load()+delta)
	}
	return func() { q.count.Add(delta); q.settle(true) }, err
}

// stageDeletes adds the deletes ds (distinct messages of q) to b under
// q.mu, writing the queue's count once. errs[i] is ds[i]'s own failure (a
// stale receipt, a missing message). after is to run once b is applied.
func (q *queue) stageDeletes(b *pebble.Batch, ds []*deletion) (after func(), errs []error) {
	errs = make([]error, len(ds))
	var delta int64
	now := q.s.now().UnixNano()
	for i, d := range ds {
		rec, dd, err := q.owned(b, d.key, d.receipt, now)
		if err == nil {
			_ = b.Delete(q.indexKey(i64(rec[offVisible:]), d.key), nil)
			_ = b.Delete(q.msgKey(d.key), nil)
			q.gone = append(q.gone, d.key)
			dd = -1
		}
		delta += dd
		errs[i] = err
	}
	if delta != 0 {
		q.writeCount(b, q.count.Load()+delta)
	}
	return func() { q.count.Add(delta); q.settle(true) }, errs
}

// purge removes up to limit expired messages that are due for visibility;
// more reports that the limit was reached.
func (q *queue) purge(ctx context.Context, limit int) (n int, more bool, err error) {
	if err := q.s.enter(); err != nil {
		return 0, false, err
	}
	defer q.s.gate.RUnlock()
	b := q.s.db.NewBatch()
	q.mu.Lock()
	if q.deleted.Load() {
		q.mu.Unlock()
		_ = b.Close()
		return 0, false, nil
	}
	var delta int64
	found := 0
	now := q.s.now().UnixNano()
	_, err = q.scan(now, func(_, _ []byte) bool { return true }, func(k, rec []byte) {
		if found < limit {
			found++
			delta += q.dropStale(b, k, rec)
		}
	})
	if err == nil && !b.Empty() {
		if delta != 0 {
			q.writeCount(b, q.count.Load()+delta)
		}
		err = q.s.apply(b)
		if err == nil {
			q.count.Add(delta)
		}
	}
	q.settle(err == nil)
	q.mu.Unlock()
	if err == nil && !b.Empty() {
		err = q.s.syncWait(b)
	} else {
		_ = b.Close()
	}
	if err != nil {
		return 0, false, fmt.Errorf("embedded: purge %q: %w", q.name, err)
	}
	return int(-delta), found == limit, ctx.Err()
}

func (q *queue) Peek(ctx context.Context, max int) ([]storage.Message, error) {
	if err := storage.ValidateDequeue(max, 0); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := q.s.enter(); err != nil {
		return nil, fmt.Errorf("embedded: peek on %q: %w", q.name, err)
	}
	defer q.s.gate.RUnlock()
	if err := q.deletedErr(); err != nil {
		return nil, fmt.Errorf("embedded: peek: %w", err)
	}
	out := []storage.Message{}
	// A reader: it starts at the published scan start, not under mu.
	r := &queue{s: q.s, name: q.name, prefix: q.prefix}
	r.lowView.Store(q.lowView.Load())
	_, err := r.scan(q.s.now().UnixNano(), func(id, rec []byte) bool {
		out = append(out, toMessage(id, rec, false))
		return len(out) < max
	}, func(_, _ []byte) {})
	if err != nil {
		return nil, fmt.Errorf("embedded: peek on %q: %w", q.name, err)
	}
	return out, nil
}

func (q *queue) ApproximateCount(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if q.s.closed.Load() {
		return 0, fmt.Errorf("embedded: count on %q: %w", q.name, storage.ErrClosed)
	}
	if err := q.deletedErr(); err != nil {
		return 0, fmt.Errorf("embedded: count: %w", err)
	}
	return int(q.count.Load()), nil
}
