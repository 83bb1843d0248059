package embedded

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// migrateChunk is the most records one migration write rewrites.
const migrateChunk = 1000

// migrateV1 rewrites every format-1 entity record in format 2 (at Open of
// a format-1 store, before any call). Records already in format 2 (a
// migration that a crash interrupted) are left alone. The last write is
// synced, so every rewritten record is durable when it returns.
func (s *Store) migrateV1() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("t"), UpperBound: []byte("u")})
	if err != nil {
		return s.readErr(err)
	}
	b := s.db.NewBatch()
	n := 0
	flush := func(sync bool) error {
		opts := pebble.NoSync
		if sync {
			opts = pebble.Sync
		}
		err := s.db.Apply(b, opts)
		_ = b.Close()
		b = s.db.NewBatch()
		n = 0
		if err != nil {
			return fmt.Errorf("embedded: migrate %s to format %d: %w", s.dir, formatVersion, s.readErr(err))
		}
		return nil
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, verr := it.ValueAndErr()
		if verr != nil {
			_ = it.Close()
			_ = b.Close()
			return s.readErr(verr)
		}
		if isV2(v) {
			continue
		}
		ts, props, derr := decodeEntityV1(v)
		if derr != nil {
			_ = it.Close()
			_ = b.Close()
			return corrupt(s.dir, s.dir, fmt.Errorf("entity record %q (format 1): %w", it.Key(), derr))
		}
		rec, fresh := s.names.encode(ts, props)
		s.names.stage(b, fresh)
		_ = b.Set(it.Key(), rec, nil)
		if n++; n >= migrateChunk {
			if err := flush(false); err != nil {
				_ = it.Close()
				_ = b.Close()
				return err
			}
		}
	}
	if err := it.Close(); err != nil {
		_ = b.Close()
		return s.readErr(err)
	}
	err = flush(true)
	_ = b.Close()
	if err == nil {
		// Every entry is durable now: later records need not carry them.
		snap := s.names.snap.Load()
		fresh := make([]string, 0, len(snap.fresh))
		for n := range snap.fresh {
			fresh = append(fresh, n)
		}
		s.names.settle(fresh)
	}
	return err
}
