package embedded

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"
)

// Keys inside a queue's bucket.
var (
	keyMessages = []byte("m") // id (16 bytes) → record
	keyVisIndex = []byte("v") // nextVisibleAt (8 bytes BE) + id → empty
	keyCount    = []byte("n") // message count, 8 bytes BE
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

func initQueue(b *bolt.Bucket) error {
	if _, err := b.CreateBucket(keyMessages); err != nil {
		return err
	}
	if _, err := b.CreateBucket(keyVisIndex); err != nil {
		return err
	}
	return b.Put(keyCount, make([]byte, 8))
}

type queue struct {
	s      *Store
	name   string
	bucket []byte
}

var _ storage.Queue = (*queue)(nil)

func (q *queue) Name() string { return q.name }

func u64(b []byte) uint64           { return binary.BigEndian.Uint64(b) }
func i64(b []byte) int64            { return int64(binary.BigEndian.Uint64(b)) }
func putI64(b []byte, v int64)      { binary.BigEndian.PutUint64(b, uint64(v)) }
func fromNanos(n int64) time.Time   { return time.Unix(0, n).UTC() }
func receiptString(r uint64) string { return strconv.FormatUint(r, 16) }

func indexKey(visible int64, id []byte) []byte {
	k := make([]byte, 8+16)
	putI64(k, visible)
	copy(k[8:], id)
	return k
}

func expired(rec []byte, now int64) bool {
	e := i64(rec[offExpires:])
	return e != 0 && e <= now
}

// buckets returns the queue's message and index buckets.
func (q *queue) buckets(tx *bolt.Tx) (qb, m, v *bolt.Bucket, err error) {
	qb = tx.Bucket(q.bucket)
	if qb == nil {
		return nil, nil, nil, fmt.Errorf("%w: queue %q", storage.ErrNotFound, q.name)
	}
	m, v = qb.Bucket(keyMessages), qb.Bucket(keyVisIndex)
	if m != nil && v != nil {
		// Messages and index entries are appended in key order (time-ordered
		// IDs, visibility times): fill pages instead of splitting at half.
		m.FillPercent, v.FillPercent = queueFill, queueFill
	}
	return qb, m, v, nil
}

func addCount(qb *bolt.Bucket, delta int64) error {
	b := make([]byte, 8)
	if cur := qb.Get(keyCount); cur != nil {
		putI64(b, i64(cur)+delta)
	} else {
		putI64(b, delta)
	}
	if err := qb.Put(keyCount, b); err != nil {
		return fatal(err)
	}
	return nil
}

// removeMessage deletes a message and its index entry.
func removeMessage(qb, m, v *bolt.Bucket, id, rec []byte) error {
	if err := v.Delete(indexKey(i64(rec[offVisible:]), id)); err != nil {
		return fatal(err)
	}
	if err := m.Delete(id); err != nil {
		return fatal(err)
	}
	return addCount(qb, -1)
}

func (q *queue) Enqueue(ctx context.Context, text string, visibilityDelay, ttl time.Duration) (storage.Message, error) {
	run, msg, err := q.prepareEnqueue(ctx, text, visibilityDelay, ttl)
	if err != nil {
		return storage.Message{}, err
	}
	if err := q.s.write(ctx, run); err != nil {
		return storage.Message{}, fmt.Errorf("embedded: enqueue on %q: %w", q.name, err)
	}
	return msg, nil
}

// prepareEnqueue validates an enqueue and returns the write that applies it
// and the message it creates.
func (q *queue) prepareEnqueue(ctx context.Context, text string, visibilityDelay, ttl time.Duration) (func(*bolt.Tx) error, storage.Message, error) {
	if err := storage.ValidateEnqueue(text, visibilityDelay, ttl); err != nil {
		return nil, storage.Message{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, storage.Message{}, err
	}
	u, err := uuid.NewV7()
	if err != nil {
		return nil, storage.Message{}, fmt.Errorf("embedded: new message id: %w", err)
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
	ikey := indexKey(visible, id)
	run := func(tx *bolt.Tx) error {
		qb, m, v, err := q.buckets(tx)
		if err != nil {
			return err
		}
		if err := m.Put(id, rec); err != nil {
			return fatal(err)
		}
		if err := v.Put(ikey, nil); err != nil {
			return fatal(err)
		}
		return addCount(qb, 1)
	}
	msg := storage.Message{
		ID:            u.String(),
		PopReceipt:    receiptString(receipt),
		InsertedAt:    fromNanos(now),
		NextVisibleAt: fromNanos(visible),
	}
	if expires != 0 {
		msg.ExpiresAt = fromNanos(expires)
	}
	return run, msg, nil
}

// scanVisible walks the visibility index from the start over messages
// visible at now. It calls take for each live message until take returns
// false, and collects expired or dangling entries in stale (index keys,
// copied). The slices passed to take are only valid until the transaction
// changes; take must copy what it keeps.
func scanVisible(m, v *bolt.Bucket, now int64, take func(id, rec []byte) bool) (stale [][]byte) {
	c := v.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) != 24 || i64(k) > now {
			break
		}
		rec := m.Get(k[8:])
		if rec == nil || i64(rec[offVisible:]) != i64(k) || expired(rec, now) {
			stale = append(stale, append([]byte(nil), k...))
			continue
		}
		if !take(k[8:], rec) {
			break
		}
	}
	return stale
}

// dropStale deletes stale index entries and the expired messages behind
// them. It re-checks each entry, so keys found in an earlier transaction
// are safe to pass.
func dropStale(qb, m, v *bolt.Bucket, stale [][]byte, now int64) (int, error) {
	n := 0
	for _, k := range stale {
		id := k[8:]
		rec := m.Get(id)
		switch {
		case rec != nil && i64(rec[offVisible:]) == i64(k):
			if !expired(rec, now) {
				continue // live: leave it
			}
			if err := removeMessage(qb, m, v, id, rec); err != nil {
				return n, err
			}
			n++
		default: // dangling index entry
			if err := v.Delete(k); err != nil {
				return n, fatal(err)
			}
		}
	}
	return n, nil
}

// findStale lists up to limit expired or dangling index entries due for
// visibility, in a read-only transaction.
func findStale(qb *bolt.Bucket, now int64, limit int) [][]byte {
	m, v := qb.Bucket(keyMessages), qb.Bucket(keyVisIndex)
	if m == nil || v == nil {
		return nil
	}
	var stale [][]byte
	stale = scanVisible(m, v, now, func(_, _ []byte) bool { return true })
	if len(stale) > limit {
		stale = stale[:limit]
	}
	return stale
}

func (q *queue) Dequeue(ctx context.Context, max int, visibility time.Duration) ([]storage.Message, error) {
	if err := storage.ValidateDequeue(max, visibility); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []storage.Message
	err := q.s.write(ctx, func(tx *bolt.Tx) error {
		out = out[:0]
		qb, m, v, err := q.buckets(tx)
		if err != nil {
			return err
		}
		now := q.s.now().UnixNano()
		type hit struct{ id, rec []byte }
		hits := make([]hit, 0, max)
		stale := scanVisible(m, v, now, func(id, rec []byte) bool {
			hits = append(hits, hit{append([]byte(nil), id...), append([]byte(nil), rec...)})
			return len(hits) < max
		})
		if _, err := dropStale(qb, m, v, stale, now); err != nil {
			return err
		}
		visible := now + int64(visibility)
		for _, h := range hits {
			if err := v.Delete(indexKey(i64(h.rec[offVisible:]), h.id)); err != nil {
				return fatal(err)
			}
			receipt := q.s.receipts.Add(1)
			dq := i64(h.rec[offDequeues:]) + 1
			putI64(h.rec[offVisible:], visible)
			putI64(h.rec[offDequeues:], dq)
			putI64(h.rec[offReceipt:], int64(receipt))
			if err := m.Put(h.id, h.rec); err != nil {
				return fatal(err)
			}
			if err := v.Put(indexKey(visible, h.id), nil); err != nil {
				return fatal(err)
			}
			out = append(out, toMessage(h.id, h.rec, true))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: dequeue from %q: %w", q.name, err)
	}
	if out == nil {
		out = []storage.Message{}
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

// owned loads the message and checks the receipt. It purges the message if
// it has expired.
func (q *queue) owned(qb, m, v *bolt.Bucket, key []byte, receipt uint64, now int64) ([]byte, error) {
	rec := m.Get(key)
	if rec == nil {
		return nil, storage.ErrNotFound
	}
	if expired(rec, now) {
		if err := removeMessage(qb, m, v, key, rec); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: message expired", storage.ErrNotFound)
	}
	if receipt == 0 || u64(rec[offReceipt:]) != receipt {
		return nil, storage.ErrLeaseLost
	}
	return append([]byte(nil), rec...), nil
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
	var newReceipt uint64
	var visible int64
	err = q.s.write(ctx, func(tx *bolt.Tx) error {
		qb, m, v, err := q.buckets(tx)
		if err != nil {
			return err
		}
		now := q.s.now().UnixNano()
		rec, err := q.owned(qb, m, v, key, receipt, now)
		if err != nil {
			return err
		}
		if err := v.Delete(indexKey(i64(rec[offVisible:]), key)); err != nil {
			return fatal(err)
		}
		visible = now + int64(visibility)
		newReceipt = q.s.receipts.Add(1)
		putI64(rec[offVisible:], visible)
		putI64(rec[offReceipt:], int64(newReceipt))
		if err := m.Put(key, rec); err != nil {
			return fatal(err)
		}
		if err := v.Put(indexKey(visible, key), nil); err != nil {
			return fatal(err)
		}
		return nil
	})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("embedded: update visibility of message %s on %q: %w", id, q.name, err)
	}
	return receiptString(newReceipt), fromNanos(visible), nil
}

func (q *queue) Delete(ctx context.Context, id, popReceipt string) error {
	run, err := q.prepareDelete(ctx, id, popReceipt)
	if err != nil {
		return err
	}
	if err := q.s.write(ctx, run); err != nil {
		return fmt.Errorf("embedded: delete message %s on %q: %w", id, q.name, err)
	}
	return nil
}

// prepareDelete validates a delete and returns the write that applies it.
// The write leaves the transaction untouched when the receipt is stale or
// the message gone (non-fatal errors).
func (q *queue) prepareDelete(ctx context.Context, id, popReceipt string) (func(*bolt.Tx) error, error) {
	key, receipt, err := parseRef(id, popReceipt)
	if err != nil {
		return nil, fmt.Errorf("embedded: delete on %q: %w", q.name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return func(tx *bolt.Tx) error {
		qb, m, v, err := q.buckets(tx)
		if err != nil {
			return err
		}
		rec, err := q.owned(qb, m, v, key, receipt, q.s.now().UnixNano())
		if err != nil {
			return err
		}
		return removeMessage(qb, m, v, key, rec)
	}, nil
}

func (q *queue) Peek(ctx context.Context, max int) ([]storage.Message, error) {
	if err := storage.ValidateDequeue(max, 0); err != nil {
		return nil, err
	}
	out := []storage.Message{}
	err := q.s.view(ctx, func(tx *bolt.Tx) error {
		_, m, v, err := q.buckets(tx)
		if err != nil {
			return err
		}
		scanVisible(m, v, q.s.now().UnixNano(), func(id, rec []byte) bool {
			out = append(out, toMessage(id, rec, false))
			return len(out) < max
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: peek on %q: %w", q.name, err)
	}
	return out, nil
}

func (q *queue) ApproximateCount(ctx context.Context) (int, error) {
	var n int64
	err := q.s.view(ctx, func(tx *bolt.Tx) error {
		qb, _, _, err := q.buckets(tx)
		if err != nil {
			return err
		}
		if c := qb.Get(keyCount); c != nil {
			n = i64(c)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("embedded: count on %q: %w", q.name, err)
	}
	return int(n), nil
}
