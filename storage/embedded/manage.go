package embedded

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cmdq-dev/cmdq/storage"
)

// Keys of the registries (see the package comment):
//
//	Q<queue>   queue registry (empty value)
//	T<table>   table registry, lower-cased name; the value is the name as created

// deletedErr is the error of a call on a queue deleted since its handle was
// obtained (under q.mu, or before a read).
func (q *queue) deletedErr() error {
	if q.deleted.Load() {
		return fmt.Errorf("%w: queue %q was deleted", storage.ErrNotFound, q.name)
	}
	return nil
}

// deletedErr is the error of a call on a table deleted since its handle was
// obtained.
func (t *table) deletedErr() error {
	if t.deleted.Load() {
		return fmt.Errorf("%w: table %q was deleted", storage.ErrNotFound, t.name)
	}
	return nil
}

// registerTable records table lower (created as name) in the registry, once
// per data directory: the first Table call that finds no entry writes one
// (one durable write).
func (s *Store) registerTable(lower, name string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.RUnlock()
	s.tableMu.Lock()
	defer s.tableMu.Unlock()
	key := []byte("T" + lower)
	if _, found, err := s.get(key); err != nil || found {
		return err
	}
	b := s.db.NewBatch()
	_ = b.Set(key, []byte(name), nil)
	if err := s.apply(b); err != nil {
		_ = b.Close()
		return err
	}
	return s.syncWait(b)
}

// DeleteQueue deletes the named queue and its messages in one durable write.
// Handles of it fail with storage.ErrNotFound afterwards; Queue(name) creates
// a new, empty queue.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	if err := storage.ValidateQueueName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return fmt.Errorf("embedded: delete queue %q: %w", name, err)
	}
	defer s.gate.RUnlock()
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	var q *queue
	if v, ok := s.queues.Load(name); ok {
		q = v.(*queue)
	} else if _, found, err := s.get([]byte("Q" + name)); err != nil {
		return fmt.Errorf("embedded: delete queue %q: %w", name, err)
	} else if !found {
		return fmt.Errorf("embedded: delete queue %q: %w: no such queue", name, storage.ErrNotFound)
	}
	prefix := []byte("q" + name + "\x00")
	b := s.db.NewBatch()
	_ = b.Delete([]byte("Q"+name), nil)
	_ = b.DeleteRange(prefix, prefixEnd(append([]byte(nil), prefix...)), nil)
	if q != nil {
		// Writes on the queue hold q.mu while they stage and apply: none
		// lands after the range delete.
		q.mu.Lock()
		q.deleted.Store(true)
	}
	err := s.applyFreeing(b)
	if q != nil {
		q.mu.Unlock()
		s.queues.Delete(name)
	}
	if err != nil {
		_ = b.Close()
		return fmt.Errorf("embedded: delete queue %q: %w", name, err)
	}
	if err := s.syncWait(b); err != nil {
		return fmt.Errorf("embedded: delete queue %q: %w", name, err)
	}
	return nil
}

// DeleteTable deletes the named table and its entities in one durable
// write. Handles of it fail with storage.ErrNotFound afterwards; Table(name)
// creates a new, empty table.
func (s *Store) DeleteTable(ctx context.Context, name string) error {
	if err := storage.ValidateTableName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return fmt.Errorf("embedded: delete table %q: %w", name, err)
	}
	defer s.gate.RUnlock()
	s.tableMu.Lock()
	defer s.tableMu.Unlock()
	lower := lowerASCII(name)
	prefix := []byte("t" + lower + "\x00")
	end := prefixEnd(append([]byte(nil), prefix...))
	_, registered, err := s.get([]byte("T" + lower))
	if err != nil {
		return fmt.Errorf("embedded: delete table %q: %w", name, err)
	}
	if !registered {
		// A table written before the registry existed has entities only.
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: end})
		if err != nil {
			return fmt.Errorf("embedded: delete table %q: %w", name, s.readErr(err))
		}
		registered = it.First()
		if cerr := it.Close(); cerr != nil {
			return fmt.Errorf("embedded: delete table %q: %w", name, s.readErr(cerr))
		}
		if !registered {
			return fmt.Errorf("embedded: delete table %q: %w: no such table", name, storage.ErrNotFound)
		}
	}
	b := s.db.NewBatch()
	_ = b.Delete([]byte("T"+lower), nil)
	_ = b.DeleteRange(prefix, end, nil)
	// Every write to a table holds its partition's lock while it stages and
	// applies: with all of them held, none lands after the range delete.
	for i := range s.parts {
		s.parts[i].Lock()
	}
	s.tables.Range(func(k, v any) bool {
		if t := v.(*table); t.lower == lower {
			t.deleted.Store(true)
			s.tables.Delete(k)
		}
		return true
	})
	err = s.applyFreeing(b)
	for i := range s.parts {
		s.parts[i].Unlock()
	}
	if err != nil {
		_ = b.Close()
		return fmt.Errorf("embedded: delete table %q: %w", name, err)
	}
	if err := s.syncWait(b); err != nil {
		return fmt.Errorf("embedded: delete table %q: %w", name, err)
	}
	return nil
}

// Queues lists the queues whose names start with prefix, sorted.
func (s *Store) Queues(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	names, err := s.queueNames()
	if err != nil {
		return nil, fmt.Errorf("embedded: list queues: %w", err)
	}
	out := []string{}
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Tables lists the tables whose names (as created) start with prefix,
// sorted.
func (s *Store) Tables(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, fmt.Errorf("embedded: list tables: %w", err)
	}
	defer s.gate.RUnlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("T"), UpperBound: []byte("U")})
	if err != nil {
		return nil, fmt.Errorf("embedded: list tables: %w", s.readErr(err))
	}
	out := []string{}
	for ok := it.First(); ok; ok = it.Next() {
		name := string(it.Value())
		if name == "" {
			name = string(it.Key()[1:])
		}
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("embedded: list tables: %w", s.readErr(err))
	}
	sort.Strings(out)
	return out, nil
}

// OpenTable returns the named table if it exists, without creating it
// (storage.TableOpener); a table that does not exist gives an error
// wrapping storage.ErrNotFound.
func (s *Store) OpenTable(ctx context.Context, name string) (storage.Table, error) {
	if err := storage.ValidateTableName(name); err != nil {
		return nil, err
	}
	if t, ok := s.tables.Load(name); ok && !s.closed.Load() {
		return t.(*table), nil
	}
	if err := s.enter(); err != nil {
		return nil, fmt.Errorf("embedded: open table %q: %w", name, err)
	}
	_, found, err := s.get([]byte("T" + lowerASCII(name)))
	s.gate.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("embedded: open table %q: %w", name, err)
	}
	if !found {
		return nil, fmt.Errorf("embedded: open table %q: %w: no such table", name, storage.ErrNotFound)
	}
	return s.Table(ctx, name)
}
