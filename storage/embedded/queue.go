package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/storage"
)

// A message is two records. Its record (msgKey: "m" + id) is a fixed header
// then the text, written once by its enqueue and never changed. Its lease
// state (dequeue count, pop receipt, expiry) is the value of its entry in
// the visibility index ("v" + next visible + id), which each dequeue,
// visibility update and delete moves or removes anyway: so a dequeue
// writes the index entry, not the text (format 4). An index entry with an
// empty value was written by format 3 or before, which kept the lease
// state in the record's header and rewrote the record on every move; such
// an entry takes its state from the header until the message's first move
// writes it into the new entry.
const (
	offInserted = 0
	offExpires  = 8  // 0 = never
	offVisible  = 16 // format 3: next visible, unix nanos; format 4: as enqueued
	offDequeues = 24
	offReceipt  = 32
	headerLen   = 40
)

// The value of a visibility index entry (format 4).
const (
	ivDequeues = 0
	ivReceipt  = 8
	ivExpires  = 16 // 0 = never
	ivLen      = 24
)

// lease is a message's lease state.
type lease struct {
	visible  int64 // next visible, unix nanos
	dequeues int64
	receipt  uint64
	expires  int64 // unix nanos, 0 = never
}

func (l lease) expired(now int64) bool { return l.expires != 0 && l.expires <= now }

// value is the index entry's value for l.
func (l lease) value() (v [ivLen]byte) {
	putI64(v[ivDequeues:], l.dequeues)
	putI64(v[ivReceipt:], int64(l.receipt))
	putI64(v[ivExpires:], l.expires)
	return v
}

// leaseOf returns the lease state that index entry (visible, v) gives the
// message whose record is rec. ok is false for an entry that is not the
// message's: a format-3 entry (empty value) whose record says another
// visible time, or a malformed value.
func leaseOf(visible int64, v, rec []byte) (l lease, ok bool) {
	switch {
	case len(v) == ivLen:
		return lease{visible: visible, dequeues: i64(v[ivDequeues:]), receipt: u64(v[ivReceipt:]), expires: i64(v[ivExpires:])}, true
	case len(v) == 0 && len(rec) >= headerLen && i64(rec[offVisible:]) == visible:
		return lease{visible: visible, dequeues: i64(rec[offDequeues:]), receipt: u64(rec[offReceipt:]), expires: i64(rec[offExpires:])}, true
	}
	return lease{}, false
}

// cached is what queue.recs holds of a recently written message: its
// record (never changed once written) and its current lease state.
type cached struct {
	rec []byte
	l   lease
}

// maxRecs bounds queue.recs (about 300 bytes an entry for cmdq's messages).
const maxRecs = 4096

// recCache holds up to maxRecs messages' cached state in a ring of slots,
// the oldest written replaced first; the map only indexes the ring, so
// the churn of a message's insert and delete per command moves 4-byte
// values instead of whole entries.
type recCache struct {
	idx   map[[16]byte]uint32 // id → slot
	slots []recSlot
	next  uint32 // the slot the next new id takes
}

// recSlot is one slot of the ring; free while c.rec is nil (a cached
// message always has its record).
type recSlot struct {
	id [16]byte
	c  cached
}

func newRecCache() *recCache {
	return &recCache{idx: make(map[[16]byte]uint32, maxRecs), slots: make([]recSlot, maxRecs)}
}

// get returns message id's cached state (none on a nil cache).
func (r *recCache) get(id []byte) (cached, bool) {
	if r == nil {
		return cached{}, false
	}
	i, ok := r.idx[[16]byte(id)]
	if !ok {
		return cached{}, false
	}
	return r.slots[i].c, true
}

// put records message id's state, replacing the oldest written entry
// when the cache is full.
func (r *recCache) put(id []byte, c cached) {
	k := [16]byte(id)
	if i, ok := r.idx[k]; ok {
		r.slots[i].c = c
		return
	}
	sl := &r.slots[r.next]
	if sl.c.rec != nil {
		delete(r.idx, sl.id)
	}
	*sl = recSlot{id: k, c: c}
	r.idx[k] = r.next
	r.next = (r.next + 1) % uint32(len(r.slots))
}

// del drops message id's entry.
func (r *recCache) del(id []byte) {
	k := [16]byte(id)
	if i, ok := r.idx[k]; ok {
		delete(r.idx, k)
		r.slots[i] = recSlot{}
	}
}

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
	// recs holds the record and lease state of recently written messages
	// (guarded by mu, which every write of a message holds), so that the
	// delete or lease update that follows a dequeue, and the dequeue that
	// follows an enqueue, need not read them back. Nil on a reader.
	recs *recCache
	gone [][]byte // ids dropped by the write being staged (under mu)
	// key is scratch for the keys a write deletes (under mu): a batch
	// copies each key it is given.
	key []byte
}

// remember records that message id's record is rec (not changed
// afterwards) and its lease state l (under mu, after the write is applied).
func (q *queue) remember(id, rec []byte, l lease) { q.recs.put(id, cached{rec: rec, l: l}) }

// forget records that message id was deleted (under mu, after the write).
func (q *queue) forget(id []byte) { q.recs.del(id) }

var _ storage.Queue = (*queue)(nil)

func (q *queue) Name() string { return q.name }

func u64(b []byte) uint64         { return binary.BigEndian.Uint64(b) }
func i64(b []byte) int64          { return int64(binary.BigEndian.Uint64(b)) }
func putI64(b []byte, v int64)    { binary.BigEndian.PutUint64(b, uint64(v)) }
func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// receiptString is the pop receipt of lease l: its next visible time and
// receipt number in hex, "<visible>.<receipt>", so that a delete or update
// finds the message's index entry without reading its record.
func receiptString(l lease) string {
	b := make([]byte, 0, 33)
	b = strconv.AppendUint(b, uint64(l.visible), 16)
	b = append(b, '.')
	b = strconv.AppendUint(b, l.receipt, 16)
	return string(b)
}

// The keys of a queue: its count ("n"), a message's record ("m" + id)
// and its visibility index entry ("v" + next visible + id), each appended
// to dst by one function; countKey, msgKey and indexKey return new ones,
// and a write under mu builds the keys it hands a batch in q.key.
func (q *queue) appendCountKey(dst []byte) []byte { return append(append(dst, q.prefix...), 'n') }

func (q *queue) appendMsgKey(dst, id []byte) []byte {
	return append(append(append(dst, q.prefix...), 'm'), id...)
}

func (q *queue) appendIndexKey(dst []byte, visible int64, id []byte) []byte {
	dst = append(append(dst, q.prefix...), 'v')
	dst = binary.BigEndian.AppendUint64(dst, uint64(visible))
	return append(dst, id...)
}

func (q *queue) countKey() []byte { return q.appendCountKey(nil) }

func (q *queue) msgKey(id []byte) []byte {
	return q.appendMsgKey(make([]byte, 0, len(q.prefix)+1+16), id)
}

func (q *queue) indexKey(visible int64, id []byte) []byte {
	return q.appendIndexKey(make([]byte, 0, len(q.prefix)+1+8+16), visible, id)
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
	q := &queue{s: s, name: name, prefix: []byte("q" + name + "\x00"), recs: newRecCache()}
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
	var v [8]byte
	putI64(v[:], n)
	q.key = q.appendCountKey(q.key[:0])
	_ = b.Set(q.key, v[:], nil)
}

// deleteIndex adds the removal of message id's index entry at visible to
// b (under mu).
func (q *queue) deleteIndex(b *pebble.Batch, visible int64, id []byte) {
	q.key = q.appendIndexKey(q.key[:0], visible, id)
	_ = b.Delete(q.key, nil)
}

// deleteMessage adds the removal of message id's index entry at visible
// and of its record to b (under mu).
func (q *queue) deleteMessage(b *pebble.Batch, visible int64, id []byte) {
	q.deleteIndex(b, visible, id)
	_ = b.Delete(q.scratchMsgKey(id), nil)
}

// scratchMsgKey is msgKey(id) in q.key (under mu), for a batch's Set or
// Delete.
func (q *queue) scratchMsgKey(id []byte) []byte {
	q.key = q.appendMsgKey(q.key[:0], id)
	return q.key
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
	l    lease
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
	l := lease{visible: visible, receipt: receipt, expires: expires}
	e := &enqueue{q: q, id: id, rec: rec, l: l, ikey: q.indexKey(visible, id)}
	e.msg = storage.Message{
		ID:            u.String(),
		PopReceipt:    receiptString(l),
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
	_ = b.Set(q.scratchMsgKey(e.id), e.rec, nil)
	v := e.l.value()
	_ = b.Set(e.ikey, v[:], nil)
	n := q.count.Load() + 1
	q.writeCount(b, n)
	return func() {
		q.count.Store(n)
		q.indexed(e.ikey)
		q.remember(e.id, e.rec, e.l)
	}
}

// stageMany adds the enqueues es to b (under q.mu), counting them once, and
// returns what to do once b is applied.
func (q *queue) stageMany(b *pebble.Batch, es []*enqueue) (after func()) {
	n := q.count.Load()
	for _, e := range es {
		_ = b.Set(q.scratchMsgKey(e.id), e.rec, nil)
		v := e.l.value()
		_ = b.Set(e.ikey, v[:], nil)
		n++
	}
	q.writeCount(b, n)
	return func() {
		q.count.Store(n)
		for _, e := range es {
			q.indexed(e.ikey)
			q.remember(e.id, e.rec, e.l)
		}
	}
}

// scan walks the visibility index from the scan start over messages
// visible at now and calls take for each live one, with its record and
// lease state, until take returns false. Entries that are not a live
// message's are passed to stale: dangling ones and format-3 entries the
// record disowns (expired false), and those of expired messages (expired
// true: the message goes too). It returns the key the next scan may start
// at (everything below it was visited). The slices passed to take and
// stale are not changed afterwards and may be kept.
func (q *queue) scan(now int64, take func(id, rec []byte, l lease) bool, stale func(k, id []byte, expired bool)) (next []byte, err error) {
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
		if c, ok := q.recs.get(id); ok {
			return c.rec, true, nil
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
			stale(k, nil, false)
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, q.s.readErr(err)
		}
		rec, found, err := read(id)
		if err != nil {
			_ = it.Close()
			return nil, err
		}
		if !found || len(rec) < headerLen {
			stale(k, id, false) // dangling
			continue
		}
		l, live := leaseOf(visible, v, rec)
		if !live || l.expired(now) {
			stale(k, id, live)
			continue
		}
		if !take(id, rec, l) {
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

// dropStale adds the removal of a stale index entry k (and of its message
// id's record, if expired) to b and returns the count change.
func (q *queue) dropStale(b *pebble.Batch, k, id []byte, expired bool) int64 {
	_ = b.Delete(k, nil)
	if !expired {
		return 0 // dangling, or an old entry of a live message
	}
	_ = b.Delete(q.scratchMsgKey(id), nil)
	q.gone = append(q.gone, id)
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
	var took []taken
	next, err := q.scan(now, func(id, rec []byte, l lease) bool {
		q.deleteIndex(b, l.visible, id)
		l.visible = visible
		l.dequeues++
		l.receipt = q.s.receipts.Add(1)
		ik := q.indexKey(visible, id)
		v := l.value()
		_ = b.Set(ik, v[:], nil)
		moved = append(moved, ik)
		took = append(took, taken{id, rec, l})
		out = append(out, toMessage(id, rec, l, true))
		return len(out) < max
	}, func(k, id []byte, expired bool) {
		delta += q.dropStale(b, k, id, expired)
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
		for _, t := range took {
			q.remember(t.id, t.rec, t.l)
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

// taken is a message a dequeue moves: its id, record and new lease state.
type taken struct {
	id, rec []byte
	l       lease
}

// toMessage is the message of record rec in lease state l; its receipt
// and next visible time only when dequeued.
func toMessage(id, rec []byte, l lease, dequeued bool) storage.Message {
	u, _ := uuid.FromBytes(id)
	msg := storage.Message{
		ID:           u.String(),
		Text:         string(rec[headerLen:]),
		DequeueCount: l.dequeues,
		InsertedAt:   fromNanos(i64(rec[offInserted:])),
	}
	if l.expires != 0 {
		msg.ExpiresAt = fromNanos(l.expires)
	}
	if dequeued {
		msg.PopReceipt = receiptString(l)
		msg.NextVisibleAt = fromNanos(l.visible)
	}
	return msg
}

// ref is a message id and pop receipt, checked before any I/O.
type ref struct {
	id      []byte
	visible int64  // the next visible time the receipt names
	receipt uint64 // 0: not a receipt this driver issues (it cannot match)
}

// parseRef checks a message id and pop receipt before any I/O.
func parseRef(id, popReceipt string) (ref, error) {
	if id == "" {
		return ref{}, fmt.Errorf("%w: message id is empty; pass the ID from Enqueue or Dequeue", storage.ErrInvalidArgument)
	}
	if popReceipt == "" {
		return ref{}, fmt.Errorf("%w: pop receipt is empty; pass the PopReceipt from Dequeue or the last UpdateVisibility", storage.ErrInvalidArgument)
	}
	u, perr := uuid.Parse(id)
	if perr != nil {
		return ref{}, fmt.Errorf("%w: message %q (not an id this queue issues)", storage.ErrNotFound, id)
	}
	r := ref{id: u[:]}
	vis, num, ok := strings.Cut(popReceipt, ".")
	if !ok {
		return r, nil
	}
	v, verr := strconv.ParseUint(vis, 16, 64)
	n, nerr := strconv.ParseUint(num, 16, 64)
	if verr != nil || nerr != nil {
		return r, nil
	}
	r.visible, r.receipt = int64(v), n
	return r, nil
}

// owned returns the record (nil when not cached) and lease state of the
// message r names and checks its receipt (under q.mu). An expired message
// is removed in b and reported as not found (count delta -1).
func (q *queue) owned(b *pebble.Batch, r ref, now int64) (rec []byte, l lease, delta int64, err error) {
	if err := q.deletedErr(); err != nil {
		return nil, lease{}, 0, err
	}
	if c, ok := q.recs.get(r.id); ok {
		rec, l = c.rec, c.l
	} else {
		var found bool
		if r.receipt != 0 {
			l, found, err = q.leaseAt(r)
			if err != nil {
				return nil, lease{}, 0, err
			}
		}
		if !found {
			// Not at the time the receipt names: moved, deleted or
			// expired since.
			rec, found, err := q.s.get(q.msgKey(r.id))
			switch {
			case err != nil:
				return nil, lease{}, 0, err
			case !found || len(rec) < headerLen:
				return nil, lease{}, 0, storage.ErrNotFound
			case expired(rec, now):
				return nil, lease{}, 0, fmt.Errorf("%w: message expired", storage.ErrNotFound)
			}
			return nil, lease{}, 0, storage.ErrLeaseLost
		}
	}
	if l.expired(now) {
		q.deleteMessage(b, l.visible, r.id)
		q.gone = append(q.gone, r.id)
		return nil, lease{}, -1, fmt.Errorf("%w: message expired", storage.ErrNotFound)
	}
	if r.receipt == 0 || l.receipt != r.receipt || l.visible != r.visible {
		return nil, lease{}, 0, storage.ErrLeaseLost
	}
	return rec, l, 0, nil
}

// leaseAt reads the lease state of the message r names from its index
// entry at the time r's receipt names; found is false when there is none.
func (q *queue) leaseAt(r ref) (l lease, found bool, err error) {
	v, found, err := q.s.get(q.indexKey(r.visible, r.id))
	if err != nil || !found {
		return lease{}, false, err
	}
	if len(v) == 0 {
		// A format-3 entry: the state is in the record's header.
		rec, found, err := q.s.get(q.msgKey(r.id))
		if err != nil || !found {
			return lease{}, false, err
		}
		l, found = leaseOf(r.visible, v, rec)
		return l, found, nil
	}
	l, found = leaseOf(r.visible, v, nil)
	return l, found, nil
}

func (q *queue) UpdateVisibility(ctx context.Context, id, popReceipt string, visibility time.Duration) (string, time.Time, error) {
	r, err := parseRef(id, popReceipt)
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
	b := q.s.db.NewBatch()
	q.mu.Lock()
	now := q.s.now().UnixNano()
	rec, l, delta, opErr := q.owned(b, r, now)
	var ik []byte
	if opErr == nil {
		q.deleteIndex(b, l.visible, r.id)
		l.visible = now + int64(visibility)
		l.receipt = q.s.receipts.Add(1)
		ik = q.indexKey(l.visible, r.id)
		v := l.value()
		_ = b.Set(ik, v[:], nil)
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
				if rec != nil {
					q.remember(r.id, rec, l)
				}
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
	return receiptString(l), fromNanos(l.visible), nil
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
	q *queue
	r ref
}

// prepareDelete validates a delete.
func (q *queue) prepareDelete(ctx context.Context, id, popReceipt string) (*deletion, error) {
	r, err := parseRef(id, popReceipt)
	if err != nil {
		return nil, fmt.Errorf("embedded: delete on %q: %w", q.name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &deletion{q: q, r: r}, nil
}

// stage adds the delete to b (under q.mu). A stale receipt or a missing
// message is returned as opErr; an expired message is purged in b. after
// is to run once b is applied.
func (d *deletion) stage(b *pebble.Batch) (after func(), opErr error) {
	q := d.q
	_, l, delta, err := q.owned(b, d.r, q.s.now().UnixNano())
	if err == nil {
		q.deleteMessage(b, l.visible, d.r.id)
		q.gone = append(q.gone, d.r.id)
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
		_, l, dd, err := q.owned(b, d.r, now)
		if err == nil {
			q.deleteMessage(b, l.visible, d.r.id)
			q.gone = append(q.gone, d.r.id)
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
	_, err = q.scan(now, func(_, _ []byte, _ lease) bool { return true }, func(k, id []byte, expired bool) {
		if found < limit {
			found++
			delta += q.dropStale(b, k, id, expired)
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
	_, err := r.scan(q.s.now().UnixNano(), func(id, rec []byte, l lease) bool {
		out = append(out, toMessage(id, rec, l, false))
		return len(out) < max
	}, func(_, _ []byte, _ bool) {})
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
