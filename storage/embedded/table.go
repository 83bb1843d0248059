package embedded

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	bolt "go.etcd.io/bbolt"
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
	bucket []byte
}

var _ storage.Table = (*table)(nil)

func (t *table) Name() string { return t.name }

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

func (t *table) tb(tx *bolt.Tx) (*bolt.Bucket, error) {
	b := tx.Bucket(t.bucket)
	if b == nil {
		return nil, fmt.Errorf("%w: table %q", storage.ErrNotFound, t.name)
	}
	b.FillPercent = tableFill
	return b, nil
}

func matches(ifMatch string, rec []byte) bool {
	return ifMatch == "" || ifMatch == storage.IfMatchAny || ifMatch == etagOf(recordTimestamp(rec))
}

// change is one planned write: the new record (nil for a delete).
type change struct {
	key []byte
	val []byte
}

// plan works out one operation against the stored state without writing.
// pre is the operation's entity encoded with ts (used unless it merges).
func plan(b *bolt.Bucket, op storage.BatchOp, ts time.Time, pre []byte) (change, error) {
	key := entityKey(op.Entity.PartitionKey, op.Entity.RowKey)
	cur := b.Get(key)
	switch op.Kind {
	case storage.OpInsert:
		if cur != nil {
			return change{}, fmt.Errorf("%w: (%q, %q)", storage.ErrExists, op.Entity.PartitionKey, op.Entity.RowKey)
		}
		return change{key, pre}, nil
	case storage.OpDelete:
		if cur == nil {
			return change{}, fmt.Errorf("%w: entity (%q, %q)", storage.ErrNotFound, op.Entity.PartitionKey, op.Entity.RowKey)
		}
		if !matches(op.IfMatch, cur) {
			return change{}, fmt.Errorf("%w: entity (%q, %q) has ETag %s, not %s", storage.ErrConflict, op.Entity.PartitionKey, op.Entity.RowKey, etagOf(recordTimestamp(cur)), op.IfMatch)
		}
		return change{key, nil}, nil
	case storage.OpUpdate, storage.OpUpsert:
		if cur == nil {
			if op.Kind == storage.OpUpsert {
				return change{key, pre}, nil
			}
			return change{}, fmt.Errorf("%w: entity (%q, %q)", storage.ErrNotFound, op.Entity.PartitionKey, op.Entity.RowKey)
		}
		if op.Kind == storage.OpUpdate && !matches(op.IfMatch, cur) {
			return change{}, fmt.Errorf("%w: entity (%q, %q) has ETag %s, not %s", storage.ErrConflict, op.Entity.PartitionKey, op.Entity.RowKey, etagOf(recordTimestamp(cur)), op.IfMatch)
		}
		if op.Mode == storage.Replace {
			return change{key, pre}, nil
		}
		// Merge the encoded records without decoding them: unchanged
		// values (a command's parameters) are copied as bytes.
		keySize := 4 + 2*utf16LenBytes([]byte(op.Entity.PartitionKey)) + 2*utf16LenBytes([]byte(op.Entity.RowKey))
		rec, err := mergeRecords(cur, pre, ts, keySize)
		if err != nil {
			if errors.Is(err, errCorrupt) {
				return change{}, fatal(err)
			}
			return change{}, fmt.Errorf("entity (%q, %q): %w", op.Entity.PartitionKey, op.Entity.RowKey, err)
		}
		return change{key, rec}, nil
	}
	return change{}, fmt.Errorf("%w: unknown batch operation kind %d", storage.ErrInvalidArgument, op.Kind)
}

func apply(b *bolt.Bucket, c change) error {
	var err error
	if c.val == nil {
		err = b.Delete(c.key)
	} else {
		err = b.Put(c.key, c.val)
	}
	if err != nil {
		return fatal(err)
	}
	return nil
}

// one runs a single-entity operation through the commit loop.
func (t *table) one(ctx context.Context, op storage.BatchOp) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	ts := t.s.timestamp()
	var pre []byte
	if op.Kind != storage.OpDelete {
		pre = encodeEntity(ts, op.Entity.Properties)
	}
	err := t.s.write(ctx, func(tx *bolt.Tx) error {
		b, err := t.tb(tx)
		if err != nil {
			return err
		}
		c, err := plan(b, op, ts, pre)
		if err != nil {
			return err
		}
		return apply(b, c)
	})
	if err != nil {
		return "", fmt.Errorf("embedded: %s in table %q: %w", op.Kind, t.name, err)
	}
	if op.Kind == storage.OpDelete {
		return "", nil
	}
	return etagOf(ts.UnixNano()), nil
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

func toEntity(k, rec []byte) (storage.Entity, error) {
	ts, props, err := decodeEntity(rec)
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
	var e storage.Entity
	key := entityKey(partitionKey, rowKey)
	err := t.s.view(ctx, func(tx *bolt.Tx) error {
		b, err := t.tb(tx)
		if err != nil {
			return err
		}
		rec := b.Get(key)
		if rec == nil {
			return fmt.Errorf("%w: entity (%q, %q)", storage.ErrNotFound, partitionKey, rowKey)
		}
		e, err = toEntity(key, rec)
		return err
	})
	if err != nil {
		return storage.Entity{}, fmt.Errorf("embedded: get from table %q: %w", t.name, err)
	}
	return e, nil
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
	top := q.Top
	if top == 0 {
		top = defaultTop
	}
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
	page := storage.Page{Entities: []storage.Entity{}}
	err := t.s.view(ctx, func(tx *bolt.Tx) error {
		b, err := t.tb(tx)
		if err != nil {
			return err
		}
		c := b.Cursor()
		scanned := 0
		var k, v []byte
		if len(start) == 0 {
			k, v = c.First()
		} else {
			k, v = c.Seek(start)
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if len(page.Entities) == top || scanned == maxScan {
				page.Continuation = base64.RawURLEncoding.EncodeToString(k)
				return nil
			}
			scanned++
			if q.PartitionKey == "" && q.RowKeyPrefix != "" {
				if _, rk := splitKey(k); !strings.HasPrefix(rk, q.RowKeyPrefix) {
					continue
				}
			}
			e, err := toEntity(k, v)
			if err != nil {
				return err
			}
			page.Entities = append(page.Entities, e)
		}
		return nil
	})
	if err != nil {
		return storage.Page{}, fmt.Errorf("embedded: query table %q: %w", t.name, err)
	}
	return page, nil
}

func (t *table) Batch(ctx context.Context, partitionKey string, ops []storage.BatchOp) ([]string, error) {
	run, etags, err := t.prepareBatch(ctx, partitionKey, ops)
	if err != nil {
		return nil, err
	}
	if err := t.s.write(ctx, run); err != nil {
		return nil, err
	}
	return etags, nil
}

// prepareBatch validates a batch and returns the write that applies it and
// the ETags it gives each operation.
func (t *table) prepareBatch(ctx context.Context, partitionKey string, ops []storage.BatchOp) (func(*bolt.Tx) error, []string, error) {
	if err := storage.ValidateBatch(partitionKey, ops); err != nil {
		return nil, nil, err
	}
	for i, op := range ops {
		if op.Kind == storage.OpUpdate || op.Kind == storage.OpUpsert {
			if err := validMode(op.Mode); err != nil {
				return nil, nil, &storage.BatchError{Index: i, Err: err}
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	ts := make([]time.Time, len(ops))
	pre := make([][]byte, len(ops))
	for i, op := range ops {
		ts[i] = t.s.timestamp()
		if op.Kind != storage.OpDelete {
			pre[i] = encodeEntity(ts[i], op.Entity.Properties)
		}
	}
	changes := make([]change, len(ops))
	run := func(tx *bolt.Tx) error {
		b, err := t.tb(tx)
		if err != nil {
			return err
		}
		for i, op := range ops {
			c, err := plan(b, op, ts[i], pre[i])
			if err != nil {
				if isFatal(err) {
					return err
				}
				return &storage.BatchError{Index: i, Err: err}
			}
			changes[i] = c
		}
		for _, c := range changes {
			if err := apply(b, c); err != nil {
				return err
			}
		}
		return nil
	}
	etags := make([]string, len(ops))
	for i, op := range ops {
		if op.Kind != storage.OpDelete {
			etags[i] = etagOf(ts[i].UnixNano())
		}
	}
	return run, etags, nil
}
