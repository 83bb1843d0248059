// Package embedded is the cmdq storage driver on a single bbolt file: no
// server, one process owns the file. It reproduces Azure Storage's queue and
// table semantics (see package storage) and passes the same conformance suite
// as the Azure driver.
//
// Writes go through one commit loop that gathers every pending queue and table
// write into a single bbolt transaction and one fsync (group commit), so many
// concurrent writers share the cost of durability. Every write is durable when
// its call returns nil. Reads run in their own read-only transactions and do
// not wait for the commit loop.
//
// Layout of the file: one top-level bucket per queue ("q:" + name) holding a
// message bucket (id → header and text), a visibility index (nextVisibleAt,
// id → nothing) that Dequeue and Peek seek into, and a message counter; one
// top-level bucket per table ("t:" + name) mapping PartitionKey, 0x00, RowKey
// to the encoded entity.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrInUse is returned by Open when another Store (in this process or
// another one) holds the file. Close the other store or use another path.
var ErrInUse = errors.New("embedded: database is in use by another process")

// Options tunes a Store. The zero value (and a nil *Options) gives the
// defaults documented on each field.
type Options struct {
	// LockTimeout is how long Open waits for the file lock held by another
	// Store before failing with ErrInUse. Default 100ms.
	LockTimeout time.Duration
	// MaxBatch is the most write operations (enqueues, dequeues, entity
	// writes, …) one commit gathers into a single transaction and fsync.
	// Default 4096.
	MaxBatch int
	// PurgeInterval is the time between background sweeps that delete
	// expired queue messages. Default 1 minute; a negative value disables
	// the sweeper (Dequeue still purges the expired messages it meets).
	PurgeInterval time.Duration
	// Now is the clock used for visibility, expiry and timestamps. Default
	// time.Now. Tests may supply a fake clock; it must return times after
	// 1970.
	Now func() time.Time
}

// Store is a storage.Store on one bbolt file. It is safe for concurrent use.
type Store struct {
	db   *bolt.DB
	path string
	opts Options

	mu       sync.Mutex
	pending  []*op // writes waiting for the commit loop
	stopping bool  // Close began: no new writes
	wake     chan struct{}
	closing  chan struct{}
	done     chan struct{} // commit loop exited
	sweeper  chan struct{} // sweeper exited
	closed   atomic.Bool
	closeMu  sync.Mutex

	known  sync.Map // bucket name (string) → struct{}: buckets known to exist
	queues sync.Map // queue name → *queue, once its bucket exists
	tables sync.Map // table name as given → *table, once its bucket exists

	commits atomic.Uint64 // transactions committed by the commit loop
	writes  atomic.Uint64 // write operations those transactions carried
	busy    atomic.Int64  // nanoseconds spent in commit (apply, write, fsync)

	receipts atomic.Uint64 // pop receipt counter, random start
	lastTS   atomic.Int64  // last entity timestamp handed out (unix nanos)
}

var _ storage.Store = (*Store)(nil)

// Open opens (creating if needed) the store in the file at path. A nil opts
// uses the defaults. If another Store holds the file, Open fails within
// Options.LockTimeout with an error wrapping ErrInUse.
func Open(path string, opts *Options) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: embedded store path is empty; pass a file path such as ./cmdq.db", storage.ErrInvalidArgument)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = 100 * time.Millisecond
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 4096
	}
	if o.PurgeInterval == 0 {
		o.PurgeInterval = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:         o.LockTimeout,
		NoFreelistSync:  true,
		FreelistType:    bolt.FreelistMapType,
		InitialMmapSize: 64 << 20,
	})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("embedded: open %s: %w (no lock within %s); close the other store or use another file", path, ErrInUse, o.LockTimeout)
		}
		return nil, fmt.Errorf("embedded: open %s: %w", path, err)
	}
	s := &Store{
		db:      db,
		path:    path,
		opts:    o,
		wake:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		sweeper: make(chan struct{}),
	}
	s.receipts.Store(rand.Uint64() >> 1)
	go s.commitLoop()
	if o.PurgeInterval > 0 {
		go s.sweep(o.PurgeInterval)
	} else {
		close(s.sweeper)
	}
	return s, nil
}

// Stats counts the commit loop's work since Open.
type Stats struct {
	// Commits is the number of write transactions committed (each one
	// fsync'd).
	Commits uint64
	// Writes is the number of write operations (enqueue, dequeue, delete,
	// entity write, batch, …) those transactions carried. Writes/Commits is
	// the average group-commit size.
	Writes uint64
	// Busy is the wall time the commit loop spent in transactions (applying
	// writes, writing pages, fsync), including failed ones. Busy divided by
	// elapsed time is the loop's utilisation: near 1 it is the bottleneck.
	Busy time.Duration
}

// Stats returns counters of the commit loop's work since Open.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.commits.Load(), Writes: s.writes.Load(), Busy: time.Duration(s.busy.Load())}
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// Close stops the commit loop after the writes already submitted, and
// closes the file. Queues and tables from this store fail with
// storage.ErrClosed afterwards. Close is idempotent.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	close(s.closing)
	<-s.done
	<-s.sweeper
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("embedded: close %s: %w", s.path, err)
	}
	return nil
}

// Queue returns the named queue, creating it on first use.
func (s *Store) Queue(ctx context.Context, name string) (storage.Queue, error) {
	if err := storage.ValidateQueueName(name); err != nil {
		return nil, err
	}
	if q, ok := s.queues.Load(name); ok {
		if s.closed.Load() {
			return nil, fmt.Errorf("embedded: create queue %q: %w", name, storage.ErrClosed)
		}
		return q.(*queue), nil
	}
	q := &queue{s: s, name: name, bucket: []byte("q:" + name)}
	if err := s.ensure(ctx, q.bucket, initQueue); err != nil {
		return nil, fmt.Errorf("embedded: create queue %q: %w", name, err)
	}
	s.queues.Store(name, q)
	return q, nil
}

// Table returns the named table, creating it on first use. Table names are
// case-insensitive, as in Azure: "Orders" and "orders" are the same table.
func (s *Store) Table(ctx context.Context, name string) (storage.Table, error) {
	if err := storage.ValidateTableName(name); err != nil {
		return nil, err
	}
	if t, ok := s.tables.Load(name); ok {
		if s.closed.Load() {
			return nil, fmt.Errorf("embedded: create table %q: %w", name, storage.ErrClosed)
		}
		return t.(*table), nil
	}
	t := &table{s: s, name: name, bucket: []byte("t:" + lowerASCII(name))}
	if err := s.ensure(ctx, t.bucket, func(*bolt.Bucket) error { return nil }); err != nil {
		return nil, fmt.Errorf("embedded: create table %q: %w", name, err)
	}
	s.tables.Store(name, t)
	return t, nil
}

func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// ensure creates the top-level bucket name (running init on a new bucket).
func (s *Store) ensure(ctx context.Context, name []byte, init func(*bolt.Bucket) error) error {
	if _, ok := s.known.Load(string(name)); ok {
		if s.closed.Load() {
			return storage.ErrClosed
		}
		return nil
	}
	err := s.write(ctx, func(tx *bolt.Tx) error {
		if tx.Bucket(name) != nil {
			return nil
		}
		b, err := tx.CreateBucket(name)
		if err != nil {
			return fatal(err)
		}
		if err := init(b); err != nil {
			return fatal(err)
		}
		return nil
	})
	if err == nil {
		s.known.Store(string(name), struct{}{})
	}
	return err
}

// op is one write submitted to the commit loop. run must leave the
// transaction untouched when it returns a non-fatal error (the operation's
// result), and must be safe to run again on a fresh transaction: it may be
// retried alone when another operation in its group fails fatally.
type op struct {
	run  func(tx *bolt.Tx) error
	err  error
	done chan struct{}
}

// fatalError marks an error that leaves the transaction unusable (a bbolt
// Put or Delete failed); the commit loop rolls back and retries each
// operation on its own.
type fatalError struct{ err error }

func (e fatalError) Error() string { return e.err.Error() }
func (e fatalError) Unwrap() error { return e.err }

func fatal(err error) error { return fatalError{err} }

func isFatal(err error) bool {
	var f fatalError
	return errors.As(err, &f)
}

var opPool = sync.Pool{New: func() any { return &op{done: make(chan struct{}, 1)} }}

// write runs fn in the commit loop and returns its result once the
// transaction holding it is durable. ctx is checked before the operation is
// queued; once queued, it runs and write waits for the commit.
func (s *Store) write(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o := opPool.Get().(*op)
	o.run, o.err = fn, nil
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		o.run = nil
		opPool.Put(o)
		return storage.ErrClosed
	}
	s.pending = append(s.pending, o)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-o.done
	err := o.err
	o.run, o.err = nil, nil
	opPool.Put(o)
	return err
}

// take moves up to MaxBatch pending operations into batch.
func (s *Store) take(batch []*op) []*op {
	s.mu.Lock()
	n := min(len(s.pending), s.opts.MaxBatch-len(batch))
	batch = append(batch, s.pending[:n]...)
	rest := copy(s.pending, s.pending[n:])
	clear(s.pending[rest:])
	s.pending = s.pending[:rest]
	s.mu.Unlock()
	return batch
}

// commitLoop gathers pending writes into one transaction per commit. After
// taking the pending writes it yields the processor a few times while more
// arrive, so writers that were just woken by the previous commit join this
// one instead of waiting a whole commit.
func (s *Store) commitLoop() {
	defer close(s.done)
	batch := make([]*op, 0, 64)
	var last time.Duration // duration of the previous commit
	for {
		batch = s.take(batch[:0])
		if len(batch) == 0 {
			select {
			case <-s.wake:
				continue
			case <-s.closing:
				// Close stopped new writes; finish those already queued.
				if batch = s.take(batch); len(batch) == 0 {
					return
				}
			}
		}
		batch = s.gather(batch, last)
		start := time.Now()
		s.commit(batch)
		last = time.Since(start)
		s.busy.Add(int64(last))
		for _, o := range batch {
			o.done <- struct{}{}
		}
	}
}

// Fill factors of the B-tree buckets (bbolt's Bucket.FillPercent, default
// 0.5): keys are mostly appended in order (time-ordered message and command
// IDs, visibility times), so full pages mean fewer pages written per commit.
const (
	queueFill = 0.9
	tableFill = 0.9
)

// gatherIdle is how long gather waits for another writer after the last
// one arrived.
const gatherIdle = 50 * time.Microsecond

// gather yields the processor while more writes arrive, so that writers
// woken by the previous commit (and preparing their next write on another
// core) join this commit instead of waiting a whole one. It stops when no
// write arrived for gatherIdle, after a quarter of the previous commit's
// duration, or at MaxBatch; a lone writer on an idle store waits at most
// gatherIdle.
func (s *Store) gather(batch []*op, last time.Duration) []*op {
	start := time.Now()
	arrived := start
	for len(batch) < s.opts.MaxBatch {
		n := len(batch)
		runtime.Gosched()
		now := time.Now()
		if batch = s.take(batch); len(batch) > n {
			arrived = now
		}
		if now.Sub(arrived) >= gatherIdle || now.Sub(start) >= last/4 {
			break
		}
	}
	return batch
}

// commit runs ops in one transaction; on a fatal error it falls back to one
// transaction per operation so only the culprit fails.
func (s *Store) commit(ops []*op) {
	tx, err := s.db.Begin(true)
	if err != nil {
		for _, o := range ops {
			o.err = fmt.Errorf("embedded: begin transaction: %w", err)
		}
		return
	}
	failed := false
	for _, o := range ops {
		o.err = o.run(tx)
		if o.err != nil && isFatal(o.err) {
			failed = true
			break
		}
	}
	if failed {
		_ = tx.Rollback()
		if len(ops) == 1 {
			ops[0].err = fmt.Errorf("embedded: write: %w", ops[0].err)
			return
		}
		for _, o := range ops {
			s.commit([]*op{o})
		}
		return
	}
	if err := tx.Commit(); err != nil {
		for _, o := range ops {
			o.err = fmt.Errorf("embedded: commit: %w", err)
		}
		return
	}
	s.commits.Add(1)
	s.writes.Add(uint64(len(ops)))
}

// view runs a read-only transaction.
func (s *Store) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return storage.ErrClosed
	}
	err := s.db.View(fn)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return storage.ErrClosed
	}
	return err
}

// sweep periodically purges expired messages from every queue.
func (s *Store) sweep(every time.Duration) {
	defer close(s.sweeper)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			_, _ = s.PurgeExpired(context.Background())
		}
	}
}

// PurgeExpired deletes the expired messages of every queue that are due
// for visibility (an expired message still hidden by a visibility timeout is
// purged once that timeout ends) and returns how many it deleted. The
// background sweeper calls it every Options.PurgeInterval.
func (s *Store) PurgeExpired(ctx context.Context) (int, error) {
	var names [][]byte
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			if len(name) > 2 && name[0] == 'q' && name[1] == ':' {
				names = append(names, append([]byte(nil), name...))
			}
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	total := 0
	for _, name := range names {
		for {
			// Find candidates without holding the commit loop, then delete
			// them (re-checked) in one write.
			var stale [][]byte
			now := s.now().UnixNano()
			err := s.view(ctx, func(tx *bolt.Tx) error {
				if qb := tx.Bucket(name); qb != nil {
					stale = findStale(qb, now, purgeChunk)
				}
				return nil
			})
			if err != nil {
				return total, err
			}
			if len(stale) == 0 {
				break
			}
			n := 0
			err = s.write(ctx, func(tx *bolt.Tx) error {
				qb := tx.Bucket(name)
				if qb == nil {
					return nil
				}
				var err error
				n, err = dropStale(qb, qb.Bucket(keyMessages), qb.Bucket(keyVisIndex), stale, s.now().UnixNano())
				return err
			})
			if err != nil {
				return total, err
			}
			total += n
			if len(stale) < purgeChunk {
				break
			}
		}
	}
	return total, nil
}

// purgeChunk is the most expired messages one purge transaction deletes.
const purgeChunk = 10000

func (s *Store) now() time.Time { return s.opts.Now() }

// timestamp returns a strictly increasing write time for entities, so that
// ETags derived from it change on every write.
func (s *Store) timestamp() time.Time {
	now := s.now().UnixNano()
	for {
		last := s.lastTS.Load()
		if now <= last {
			now = last + 1
		}
		if s.lastTS.CompareAndSwap(last, now) {
			return time.Unix(0, now).UTC()
		}
	}
}
