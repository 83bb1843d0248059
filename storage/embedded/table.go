package embedded

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cmdq-dev/cmdq/storage"
)

const (
	// defaultTop is the page size of a Query with Top 0.
	defaultTop = 1000
	// maxScan bounds the entities one Query page examines when it filters
	// (RowKeyPrefix across partitions); past it the page ends early with a
	// continuation token.
	maxScan = 10000
)

type table struct {
	s      *Store
	name   string
	lower  string // name lower-cased: the stored name
	prefix []byte // "t" + lower + 0x00
	// deleted is set by DeleteTable (with every partition lock held):
	// every call fails.
	deleted atomic.Bool
}

var _ storage.Table = (*table)(nil)

func (t *table) Name() string { return t.name }

// key is the engine key of an entity.
func (t *table) key(pk, rk string) []byte {
	return t.appendKey(make([]byte, 0, t.keyLen(pk, rk)), pk, rk)
}

// keyLen is the length of the engine key of an entity.
func (t *table) keyLen(pk, rk string) int { return len(t.prefix) + len(pk) + 1 + len(rk) }

// appendKey appends the engine key of an entity to b.
func (t *table) appendKey(b []byte, pk, rk string) []byte {
	b = append(b, t.prefix...)
	b = append(b, pk...)
	b = append(b, 0)
	return append(b, rk...)
}

// entityKey orders entities by (PartitionKey, RowKey): keys never contain
// U+0000, so a zero byte separates them.
func entityKey(pk, rk string) []byte {
	k := make([]byte, 0, len(pk)+1+len(rk))
	k = append(k, pk...)
	k = append(k, 0)
	return append(k, rk...)
}

func splitKey(k []byte) (pk, rk string) {
	i := bytes.IndexByte(k, 0)
	if i < 0 {
		return string(k), ""
	}
	return string(k[:i]), string(k[i+1:])
}

// matches reports whether ifMatch allows a write over record rec (its
// ETag compared without building a string).
func matches(ifMatch string, rec []byte) bool {
	if ifMatch == "" || ifMatch == storage.IfMatchAny {
		return true
	}
	var buf [etagLen]byte
	return string(appendETag(buf[:0], recordTimestamp(rec))) == ifMatch
}

// change is one planned write: the new record (nil for a delete), and
// the dictionary names a re-encoded format-1 record needs (names.merge).
type change struct {
	key   []byte
	val   []byte
	fresh []string
	// merge: write val as a merge operand (entityMerger), not a record.
	merge bool
}

// plan works out one operation against the stored state without writing.
// pre is the operation's entity encoded with ts (used unless it merges).
// cur is the stored record under key, nil when there is none.
func (t *table) plan(op storage.BatchOp, key []byte, ts time.Time, pre, cur []byte) (change, error) {
	switch op.Kind {
	case storage.OpInsert:
		if cur != nil {
			return change{}, fmt.Errorf("%w: (%q, %q)", storage.ErrExists, op.Entity.PartitionKey, op.Entity.RowKey)
		}
		return change{key: key, val: pre}, nil
	case storage.OpDelete:
		if cur == nil {
			return change{}, fmt.Errorf("%w: entity (%q, %q)", storage.ErrNotFound, op.Entity.PartitionKey, op.Entity.RowKey)
		}
		if !matches(op.IfMatch, cur) {
			return change{}, fmt.Errorf("%w: entity (%q, %q) has ETag %s, not %s", storage.ErrConflict, op.Entity.PartitionKey, op.Entity.RowKey, etagOf(recordTimestamp(cur)), op.IfMatch)
		}
		return change{key: key}, nil
	case storage.OpUpdate, storage.OpUpsert:
		if cur == nil {
			if op.Kind == storage.OpUpsert {
				return change{key: key, val: pre}, nil
			}
			return change{}, fmt.Errorf("%w: entity (%q, %q)", storage.ErrNotFound, op.Entity.PartitionKey, op.Entity.RowKey)
		}
		if op.Kind == storage.OpUpdate && !matches(op.IfMatch, cur) {
			return change{}, fmt.Errorf("%w: entity (%q, %q) has ETag %s, not %s", storage.ErrConflict, op.Entity.PartitionKey, op.Entity.RowKey, etagOf(recordTimestamp(cur)), op.IfMatch)
		}
		if op.Mode == storage.Replace {
			return change{key: key, val: pre}, nil
		}
		// Merge the encoded records without decoding them: unchanged
		// values (a command's parameters) are not even copied.
		keySize := 4 + 2*utf16LenBytes([]byte(op.Entity.PartitionKey)) + 2*utf16LenBytes([]byte(op.Entity.RowKey))
		var c change
		var err error
		if isV2(cur) {
			// The patch alone, as an engine merge operand: the engine
			// folds it over cur as names.merge would (entityMerger).
			c, err = change{key: key, val: pre, merge: true}, t.s.names.checkMerge(cur, pre, keySize)
		} else {
			c.key = key
			c.val, c.fresh, err = t.s.names.merge(cur, pre, ts, keySize)
		}
		if err != nil {
			if errors.Is(err, errCorrupt) {
				return change{}, corrupt(t.s.dir, t.s.dir, fmt.Errorf("table %q entity (%q, %q): %w", t.name, op.Entity.PartitionKey, op.Entity.RowKey, err))
			}
			return change{}, fmt.Errorf("entity (%q, %q): %w", op.Entity.PartitionKey, op.Entity.RowKey, err)
		}
		return c, nil
	}
	return change{}, fmt.Errorf("%w: unknown batch operation kind %d", storage.ErrInvalidArgument, op.Kind)
}

// one runs a single-entity operation.
func (t *table) one(ctx context.Context, op storage.BatchOp) (string, error) {
	tb, err := t.prepare(ctx, op.Entity.PartitionKey, []storage.BatchOp{op})
	if err != nil {
		return "", err
	}
	if err := t.s.commitBatch(tb, nil, nil); err != nil {
		var be *storage.BatchError
		if errors.As(err, &be) {
			err = be.Err
		}
		return "", fmt.Errorf("embedded: %s in table %q: %w", op.Kind, t.name, err)
	}
	return tb.etags[0], nil
}

func validMode(m storage.UpdateMode) error {
	if m != storage.Merge && m != storage.Replace {
		return fmt.Errorf("%w: unknown update mode %d; use storage.Merge or storage.Replace", storage.ErrInvalidArgument, m)
	}
	return nil
}

func (t *table) Insert(ctx context.Context, e storage.Entity) (string, error) {
	if err := storage.ValidateEntity(e); err != nil {
		return "", err
	}
	return t.one(ctx, storage.BatchOp{Kind: storage.OpInsert, Entity: e})
}

func (t *table) Update(ctx context.Context, e storage.Entity, mode storage.UpdateMode, ifMatch string) (string, error) {
	if err := storage.ValidateEntity(e); err != nil {
		return "", err
	}
	if err := validMode(mode); err != nil {
		return "", err
	}
	return t.one(ctx, storage.BatchOp{Kind: storage.OpUpdate, Entity: e, Mode: mode, IfMatch: ifMatch})
}

func (t *table) Upsert(ctx context.Context, e storage.Entity, mode storage.UpdateMode) (string, error) {
	if err := storage.ValidateEntity(e); err != nil {
		return "", err
	}
	if err := validMode(mode); err != nil {
		return "", err
	}
	return t.one(ctx, storage.BatchOp{Kind: storage.OpUpsert, Entity: e, Mode: mode})
}

func (t *table) Delete(ctx context.Context, partitionKey, rowKey, ifMatch string) error {
	if err := storage.ValidateKey("PartitionKey", partitionKey); err != nil {
		return err
	}
	if err := storage.ValidateKey("RowKey", rowKey); err != nil {
		return err
	}
	_, err := t.one(ctx, storage.BatchOp{Kind: storage.OpDelete, Entity: storage.Entity{PartitionKey: partitionKey, RowKey: rowKey}, IfMatch: ifMatch})
	return err
}

func (t *table) toEntity(k, rec []byte) (storage.Entity, error) {
	ts, props, err := t.s.names.decode(rec)
	if err != nil {
		return storage.Entity{}, err
	}
	pk, rk := splitKey(k)
	return storage.Entity{PartitionKey: pk, RowKey: rk, ETag: etagOf(ts.UnixNano()), Timestamp: ts, Properties: props}, nil
}

func (t *table) Get(ctx context.Context, partitionKey, rowKey string) (storage.Entity, error) {
	if err := storage.ValidateKey("PartitionKey", partitionKey); err != nil {
		return storage.Entity{}, err
	}
	if err := storage.ValidateKey("RowKey", rowKey); err != nil {
		return storage.Entity{}, err
	}
	if err := ctx.Err(); err != nil {
		return storage.Entity{}, err
	}
	if err := t.s.enter(); err != nil {
		return storage.Entity{}, fmt.Errorf("embedded: get from table %q: %w", t.name, err)
	}
	defer t.s.gate.RUnlock()
	if err := t.deletedErr(); err != nil {
		return storage.Entity{}, fmt.Errorf("embedded: get: %w", err)
	}
	key := t.key(partitionKey, rowKey)
	v, closer, err := t.s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return storage.Entity{}, fmt.Errorf("embedded: get from table %q: %w: entity (%q, %q)", t.name, storage.ErrNotFound, partitionKey, rowKey)
	}
	if err != nil {
		return storage.Entity{}, fmt.Errorf("embedded: get from table %q: %w", t.name, t.s.readErr(err))
	}
	e, err := t.toEntity(key[len(t.prefix):], v)
	_ = closer.Close()
	if err != nil {
		return storage.Entity{}, fmt.Errorf("embedded: get from table %q: %w", t.name, t.corruptRecord(err))
	}
	return e, nil
}

// corruptRecord wraps a record that does not decode as ErrCorrupt.
func (t *table) corruptRecord(err error) error {
	return corrupt(t.s.dir, t.s.dir, fmt.Errorf("table %q: %w", t.name, err))
}

func (t *table) Query(ctx context.Context, q storage.Query) (storage.Page, error) {
	if q.Top < 0 || q.Top > 1000 {
		return storage.Page{}, fmt.Errorf("%w: query Top %d is outside 0..1000 (0 = the default, 1000)", storage.ErrInvalidArgument, q.Top)
	}
	if err := storage.ValidateKey("PartitionKey", q.PartitionKey); err != nil {
		return storage.Page{}, err
	}
	if err := storage.ValidateKey("RowKeyPrefix", q.RowKeyPrefix); err != nil {
		return storage.Page{}, err
	}
	if err := ctx.Err(); err != nil {
		return storage.Page{}, err
	}
	top := q.Top
	if top == 0 {
		top = defaultTop
	}
	// Keys below are relative to the table's prefix.
	var prefix []byte
	if q.PartitionKey != "" {
		prefix = entityKey(q.PartitionKey, q.RowKeyPrefix)
	}
	start := prefix
	if q.Continuation != "" {
		c, err := base64.RawURLEncoding.DecodeString(q.Continuation)
		if err != nil || len(c) == 0 {
			return storage.Page{}, fmt.Errorf("%w: continuation token %q is not one this driver issued; pass Page.Continuation unchanged", storage.ErrInvalidArgument, q.Continuation)
		}
		if bytes.Compare(c, start) > 0 {
			start = c
		}
	}
	if err := t.s.enter(); err != nil {
		return storage.Page{}, fmt.Errorf("embedded: query table %q: %w", t.name, err)
	}
	defer t.s.gate.RUnlock()
	if err := t.deletedErr(); err != nil {
		return storage.Page{}, fmt.Errorf("embedded: query: %w", err)
	}
	lower := append(append([]byte(nil), t.prefix...), start...)
	upper := append(append([]byte(nil), t.prefix...), prefix...)
	upper = prefixEnd(upper)
	it, err := t.s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return storage.Page{}, fmt.Errorf("embedded: query table %q: %w", t.name, t.s.readErr(err))
	}
	page := storage.Page{Entities: []storage.Entity{}}
	scanned := 0
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()[len(t.prefix):]
		if len(page.Entities) == top || scanned == maxScan {
			page.Continuation = base64.RawURLEncoding.EncodeToString(k)
			break
		}
		scanned++
		if q.PartitionKey == "" && q.RowKeyPrefix != "" {
			if _, rk := splitKey(k); !strings.HasPrefix(rk, q.RowKeyPrefix) {
				continue
			}
		}
		v, verr := it.ValueAndErr()
		if verr != nil {
			_ = it.Close()
			return storage.Page{}, fmt.Errorf("embedded: query table %q: %w", t.name, t.s.readErr(verr))
		}
		e, derr := t.toEntity(k, v)
		if derr != nil {
			_ = it.Close()
			return storage.Page{}, fmt.Errorf("embedded: query table %q: %w", t.name, t.corruptRecord(derr))
		}
		page.Entities = append(page.Entities, e)
	}
	if err := it.Close(); err != nil {
		return storage.Page{}, fmt.Errorf("embedded: query table %q: %w", t.name, t.s.readErr(err))
	}
	return page, nil
}

// prefixEnd returns the smallest key greater than every key with prefix p
// (p is modified). Keys of the store are never all 0xff.
func prefixEnd(p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] < 0xff {
			p[i]++
			return p[:i+1]
		}
	}
	return nil
}

func (t *table) Batch(ctx context.Context, partitionKey string, ops []storage.BatchOp) ([]string, error) {
	if err := storage.ValidateBatch(partitionKey, ops); err != nil {
		return nil, err
	}
	tb, err := t.prepare(ctx, partitionKey, ops)
	if err != nil {
		return nil, err
	}
	if err := t.s.commitBatch(tb, nil, nil); err != nil {
		return nil, err
	}
	return tb.etags, nil
}

// tableBatch is a validated table batch (or single operation), ready to
// stage.
type tableBatch struct {
	t     *table
	pk    string
	ops   []storage.BatchOp
	ts    []time.Time
	pre   [][]byte
	etags []string
	// fresh: dictionary names the batch's records use whose entries are
	// not known durable yet; staged with it, settled once it is synced.
	fresh []string
	// The slices' storage for a batch of at most inlineOps operations
	// (an issue's, a completion's): one allocation instead of five. The
	// ETags have their own: the caller keeps them, and they must not keep
	// the batch.
	tsBuf  [inlineOps]time.Time
	preBuf [inlineOps][]byte
	curBuf [inlineOps][]byte
	keyBuf [inlineOps][]byte
}

// inlineOps is the largest batch whose slices live in its tableBatch.
const inlineOps = 2

// prepare checks the update modes and encodes the batch's entities. The
// caller has validated ops.
func (t *table) prepare(ctx context.Context, partitionKey string, ops []storage.BatchOp) (*tableBatch, error) {
	for i, op := range ops {
		if op.Kind == storage.OpUpdate || op.Kind == storage.OpUpsert {
			if err := validMode(op.Mode); err != nil {
				return nil, &storage.BatchError{Index: i, Err: err}
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tb := &tableBatch{t: t, pk: partitionKey, ops: ops}
	tb.etags = make([]string, len(ops))
	if n := len(ops); n <= inlineOps {
		tb.ts, tb.pre = tb.tsBuf[:n], tb.preBuf[:n]
	} else {
		tb.ts, tb.pre = make([]time.Time, n), make([][]byte, n)
	}
	for i, op := range ops {
		tb.ts[i] = t.s.timestamp()
		if op.Kind != storage.OpDelete {
			var fresh []string
			tb.pre[i], fresh = t.s.names.encodeEntity(tb.ts[i], op.Entity)
			tb.fresh = append(tb.fresh, fresh...)
			tb.etags[i] = etagOf(tb.ts[i].UnixNano())
		}
	}
	return tb, nil
}

// stage plans every operation against the stored entities and, when all
// succeed, adds them to b (under the partition's lock). A failing
// operation gives a *storage.BatchError and leaves b untouched.
func (tb *tableBatch) stage(b *pebble.Batch) error {
	t := tb.t
	curs, keys, err := tb.read()
	if err != nil {
		return err
	}
	changes := make([]change, len(tb.ops))
	for i, op := range tb.ops {
		c, err := t.plan(op, keys[i], tb.ts[i], tb.pre[i], curs[i])
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				return err
			}
			return &storage.BatchError{Index: i, Err: err}
		}
		changes[i] = c
	}
	for _, c := range changes {
		tb.fresh = append(tb.fresh, c.fresh...)
	}
	t.s.names.stage(b, tb.fresh)
	for _, c := range changes {
		switch {
		case c.val == nil:
			_ = b.Delete(c.key, nil)
		case c.merge:
			_ = b.Merge(c.key, c.val, nil)
		default:
			_ = b.Set(c.key, c.val, nil)
		}
	}
	return nil
}

// maxPointReads is the largest batch whose entities read loads with point
// reads: a point read skips, by its bloom filter, every data file that
// does not hold the key, and the rows a small batch creates (an issue's,
// an attempt's events) are in none; an iterator must open every file
// that overlaps the partition.
const maxPointReads = 4

// read loads the stored record of each operation's entity (nil when
// absent): a point read each for a small batch (maxPointReads), else one
// iterator over the partition, sought in row key order (one pass through
// the engine's levels instead of one per operation).
//
// An insert the batch's condition guards (storage.BatchOp.AssumeAbsent,
// with a conditional update or delete of another row in the batch) is not
// read: the condition's row is read and checked, and the batch fails as a
// whole when its ETag moved.
func (tb *tableBatch) read() (curs, keys [][]byte, err error) {
	t := tb.t
	if n := len(tb.ops); n <= inlineOps {
		curs, keys = tb.curBuf[:n], tb.keyBuf[:n]
		clear(curs)
	} else {
		curs, keys = make([][]byte, n), make([][]byte, n)
	}
	// The keys share one buffer.
	size := 0
	for _, op := range tb.ops {
		size += t.keyLen(op.Entity.PartitionKey, op.Entity.RowKey)
	}
	buf := make([]byte, 0, size)
	for i, op := range tb.ops {
		start := len(buf)
		buf = t.appendKey(buf, op.Entity.PartitionKey, op.Entity.RowKey)
		keys[i] = buf[start:len(buf):len(buf)]
	}
	guarded := tb.guarded()
	reads := len(tb.ops)
	if guarded {
		for _, op := range tb.ops {
			if op.Kind == storage.OpInsert && op.AssumeAbsent {
				reads--
			}
		}
	}
	skip := func(i int) bool {
		return guarded && tb.ops[i].Kind == storage.OpInsert && tb.ops[i].AssumeAbsent
	}
	if reads <= maxPointReads {
		for i, key := range keys {
			if skip(i) {
				continue
			}
			v, found, err := t.s.get(key)
			if err != nil {
				return nil, nil, err
			}
			if found && v == nil {
				v = []byte{}
			}
			curs[i] = v
		}
		return curs, keys, nil
	}
	order := make([]int, len(tb.ops))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return bytes.Compare(keys[order[a]], keys[order[b]]) < 0 })
	lower := t.key(tb.pk, "")
	it, err := t.s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(append([]byte(nil), lower...))})
	if err != nil {
		return nil, nil, t.s.readErr(err)
	}
	for _, i := range order {
		if skip(i) {
			continue
		}
		if it.SeekGE(keys[i]) && bytes.Equal(it.Key(), keys[i]) {
			v, verr := it.ValueAndErr()
			if verr != nil {
				_ = it.Close()
				return nil, nil, t.s.readErr(verr)
			}
			curs[i] = append(make([]byte, 0, len(v)), v...)
		}
	}
	if err := it.Close(); err != nil {
		return nil, nil, t.s.readErr(err)
	}
	return curs, keys, nil
}

// guarded reports whether the batch holds a condition that proves its
// AssumeAbsent inserts absent: an update or delete with a specific ETag.
func (tb *tableBatch) guarded() bool {
	for _, op := range tb.ops {
		if (op.Kind == storage.OpUpdate || op.Kind == storage.OpDelete) &&
			op.IfMatch != "" && op.IfMatch != storage.IfMatchAny {
			return true
		}
	}
	return false
}

// commitBatch applies tb under its partition's lock. With a queue q, it
// also takes q's lock and stages stageQ's queue write in the same engine
// batch (the combined calls); stageQ runs only when tb staged and returns
// what to run once the batch is applied.
func (s *Store) commitBatch(tb *tableBatch, q *queue, stageQ func(b *pebble.Batch) (after func())) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.RUnlock()
	b := s.db.NewBatch()
	mu := s.partition(tb.t.lower, tb.pk)
	mu.Lock()
	// The table part reads under the partition's lock only; the queue's
	// lock is taken for the queue part and the apply, so that combined
	// calls on one queue serialise no table reads.
	err := tb.t.deletedErr()
	if err == nil {
		err = tb.stage(b)
	}
	if err == nil {
		var after func()
		if q != nil {
			q.mu.Lock()
			if err = q.deletedErr(); err == nil {
				after = stageQ(b)
			}
		}
		if err == nil {
			err = s.apply(b)
		}
		if err == nil && after != nil {
			after()
		}
		if q != nil {
			q.settle(false)
			q.mu.Unlock()
		}
	}
	mu.Unlock()
	if err != nil {
		_ = b.Close()
		return err
	}
	if err := s.syncWait(b); err != nil {
		return err
	}
	s.names.settle(tb.fresh)
	return nil
}
