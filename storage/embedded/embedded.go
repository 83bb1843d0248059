// Package embedded is the cmdq storage driver on a local data directory: no
// server, one process owns the directory. It reproduces Azure Storage's queue
// and table semantics (see package storage) and passes the same conformance
// suite as the Azure driver.
//
// The engine is Pebble (github.com/cockroachdb/pebble/v2), a log-structured
// merge tree: every write is one atomic batch appended to a write-ahead log,
// and concurrent writers share one fdatasync (group commit). Compaction runs
// in the background. Every write is durable when its call returns nil.
//
// Writers never wait for each other's fsync: a write takes the locks of
// what it reads (its queue, or its table partition), applies its batch
// (visible to readers at once), releases the locks and then waits for the
// log sync that covers it. The log is sequential, so a write that depends on
// another (a dequeue of a message just enqueued) is never durable without
// it. Reads go straight to the engine and do not wait for syncs.
//
// Keys (one keyspace):
//
//	Q<queue>                            queue registry (PurgeExpired and Queues list it)
//	T<table>                            table registry (Tables lists it); value: the name as created
//	q<queue>\x00n                       message count, 8 bytes big-endian
//	q<queue>\x00m<id:16>                message: 40-byte header, then the text
//	q<queue>\x00v<visible:8><id:16>     visibility index (empty value)
//	t<table>\x00<PartitionKey>\x00<RowKey>  entity record (codec.go)
//
// Table names are stored lower-cased (Azure's table names are
// case-insensitive). Keys and names never contain a zero byte.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cmdq-dev/cmdq/storage"
)

// ErrInUse is returned by Open when another Store (in this process or
// another one) holds the data directory. Close the other store or use
// another directory.
var ErrInUse = errors.New("embedded: database is in use by another process")

// DefaultCacheSize is Options.CacheSize's default, in bytes: 2 MiB of
// blocks (the engine's cache is 10 MiB in all with the default write
// buffers; while only one buffer is live, blocks also use the other's
// room). The store's files are read through the
// operating system's page cache, so a block the engine's cache misses
// costs a copy, not a disk read, while that cache holds the files: random
// reads of a 60 MB store take the same time with 2 and 16 MiB
// (BenchmarkGetRandom; docs/performance.md, "Memory").
const DefaultCacheSize = 2 << 20

// Options tunes a Store. The zero value (and a nil *Options) gives the
// defaults documented on each field.
type Options struct {
	// LockTimeout is how long Open waits for the directory lock held by
	// another Store before failing with ErrInUse. Default 100ms.
	LockTimeout time.Duration
	// PurgeInterval is the time between background sweeps that delete
	// expired queue messages. Default 1 minute; a negative value disables
	// the sweeper (Dequeue still purges the expired messages it meets).
	PurgeInterval time.Duration
	// CacheSize is the engine's cache of data, index and filter blocks,
	// in bytes (outside the Go heap), on top of the write buffers (the
	// engine's cache is CacheSize + 2 × MemTableSize: it charges each
	// live buffer to it). Default DefaultCacheSize (2 MiB).
	CacheSize int64
	// MemTableSize is the size of one in-memory write buffer, in bytes
	// (outside the Go heap); at most two are held (one being written, one
	// being flushed). Default 4 MiB.
	MemTableSize uint64
	// SkipVerify skips the checksum verification of every data file at
	// Open (see Open). Default false: verify.
	SkipVerify bool
	// Reserve is the free space, in bytes, the store keeps on its data
	// directory's volume: while less is free, every write fails at once
	// with an error wrapping storage.ErrFull (nothing is written; reads
	// go on), so the engine never meets a full disk, which it does not
	// survive. Writes are accepted again by themselves once space is
	// freed (the free space is probed at most every second, every 100 ms
	// while less than twice the reserve is free). Deleting a queue or a
	// table is always accepted: it is how space is freed. Default
	// DefaultReserve (256 MiB); a negative value turns the check off.
	Reserve int64
	// FreeSpace reports the bytes this process may still write on the
	// volume of dir (the data directory). Default: the file system's
	// answer (statfs: the blocks available to unprivileged users).
	// Deployments whose real limit is another one (a quota) may supply
	// their own, as may tests.
	FreeSpace func(dir string) (uint64, error)
	// Now is the clock used for visibility, expiry and timestamps. Default
	// time.Now. Tests may supply a fake clock; it must return times after
	// 1970.
	Now func() time.Time

	// wrapFS, when set (by this package's tests), wraps the file system
	// the engine writes through: a crash test uses it to kill the process
	// in the middle of writing a data file.
	wrapFS func(vfs.FS) vfs.FS
}

// Store is a storage.Store on one data directory. It is safe for
// concurrent use.
type Store struct {
	db   *pebble.DB
	lock *pebble.Lock
	dir  string
	opts Options
	fs   *countingFS
	// guard records the manifest's synced size (manifest.go).
	guard *manifestGuard
	// wal records the live write-ahead log files (walguard.go).
	wal *walGuard
	// space refuses writes while the disk is short of space (space.go).
	space *spaceProbe
	// names is the property name dictionary of the entity records
	// (codec.go).
	names *names

	// gate: every call holds it shared while it uses db; Close takes it
	// exclusively, so db is never closed under a running call.
	gate    sync.RWMutex
	closed  atomic.Bool
	failed  atomic.Pointer[error] // a log sync failed: writes refused
	closing chan struct{}
	sweeper chan struct{} // sweeper exited
	closeMu sync.Mutex

	queues  sync.Map   // queue name → *queue
	queueMu sync.Mutex // serialises the creation and deletion of queues
	tables  sync.Map   // table name as given → *table
	tableMu sync.Mutex // serialises the registration and deletion of tables

	// parts serialises the read-modify-write of table partitions; a
	// partition maps to one of these by hash.
	parts [256]sync.Mutex
	seed  maphash.Seed

	writes   atomic.Uint64 // write calls applied
	receipts atomic.Uint64 // pop receipt counter, random start
	lastTS   atomic.Int64  // last entity timestamp handed out (unix nanos)
}

var _ storage.Store = (*Store)(nil)

// SlowSync is how long a log sync takes at least to count in
// Stats.SlowSyncs: 20 ms, about 50 times a sync of a local SSD.
const SlowSync = 20 * time.Millisecond

// Stats counts the store's work since Open.
type Stats struct {
	// Commits is the number of write-ahead log syncs (fdatasync): each one
	// makes every write before it durable.
	Commits uint64
	// Writes is the number of write calls (enqueue, dequeue, delete,
	// entity write, batch, combined call, …) applied. Writes/Commits is
	// the average group-commit size.
	Writes uint64
	// Busy is the wall time spent in log syncs. Busy divided by elapsed
	// time is the log's utilisation: near 1, fsync is the bottleneck.
	Busy time.Duration
	// SlowSyncs is the number of log syncs that took SlowSync or longer,
	// and LongestSync the longest one. Every write waiting for a sync
	// waits that long: a slow sync is the disk's, and shows as a latency
	// outlier of every issue and completion behind it.
	SlowSyncs   uint64
	LongestSync time.Duration
	// CacheHits and CacheMisses count the reads of data, index and filter
	// blocks that the engine's block cache (Options.CacheSize) served,
	// and those it read from the store's files. A miss is a read of the
	// file (from the operating system's page cache when it holds it).
	// Both read zero once the store is closed.
	CacheHits, CacheMisses int64
	// LogBytes is the number of bytes written to the write-ahead log,
	// FlushedBytes those written to data files by flushes of the
	// in-memory write buffers, and CompactedBytes those written by
	// compactions (rewrites of data files): together, the bytes the
	// store's writes cost the disk. All read zero once the store is
	// closed.
	LogBytes, FlushedBytes, CompactedBytes uint64
}

// Stats returns counters of the store's work since Open.
func (s *Store) Stats() Stats {
	st := Stats{Commits: s.fs.syncs.Load(), Writes: s.writes.Load(), Busy: time.Duration(s.fs.busy.Load()),
		SlowSyncs: s.fs.slow.Load(), LongestSync: time.Duration(s.fs.longest.Load())}
	if s.enter() == nil {
		m := s.db.Metrics()
		s.gate.RUnlock()
		st.CacheHits, st.CacheMisses = m.BlockCache.Hits, m.BlockCache.Misses
		st.LogBytes = m.WAL.BytesWritten
		for i := range m.Levels {
			st.FlushedBytes += m.Levels[i].TableBytesFlushed
			st.CompactedBytes += m.Levels[i].TableBytesCompacted
		}
	}
	return st
}

// Exclusive reports true: the data directory is locked, so no other
// process uses the store while it is open (storage.Exclusive).
func (s *Store) Exclusive() bool { return true }

// Dir returns the data directory the store was opened on.
func (s *Store) Dir() string { return s.dir }

// Close waits for the calls in progress, makes every write durable and
// closes the directory. Queues and tables from this store fail with
// storage.ErrClosed afterwards. Close is idempotent.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Load() {
		return nil
	}
	close(s.closing)
	<-s.sweeper
	s.gate.Lock()
	s.closed.Store(true)
	s.gate.Unlock()
	err := s.db.Close()
	if err == nil && s.guard != nil {
		s.guard.record()
	}
	if err == nil && s.wal != nil {
		s.wal.closed()
	}
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("embedded: close %s: %w", s.dir, err)
	}
	return nil
}

// enter starts a call: it fails with ErrClosed once Close began. The
// caller must call s.gate.RUnlock when done.
func (s *Store) enter() error {
	s.gate.RLock()
	if s.closed.Load() {
		s.gate.RUnlock()
		return storage.ErrClosed
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
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// One creator at a time: a second one would write the new queue's
	// zero count over the first one's writes.
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	if q, ok := s.queues.Load(name); ok {
		return q.(*queue), nil
	}
	q, err := s.openQueue(name)
	if err != nil {
		return nil, fmt.Errorf("embedded: create queue %q: %w", name, err)
	}
	s.queues.Store(name, q)
	return q, nil
}

// Table returns the named table, creating it on first use (its first use
// in a data directory records it in the table registry: one durable write).
// Table names are case-insensitive, as in Azure: "Orders" and "orders" are
// the same table.
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
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, fmt.Errorf("embedded: create table %q: %w", name, storage.ErrClosed)
	}
	lower := lowerASCII(name)
	if err := s.registerTable(lower, name); err != nil {
		return nil, fmt.Errorf("embedded: create table %q: %w", name, err)
	}
	t := &table{s: s, name: name, lower: lower, prefix: []byte("t" + lower + "\x00")}
	actual, _ := s.tables.LoadOrStore(name, t)
	return actual.(*table), nil
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

// partition returns the lock of a table partition.
func (s *Store) partition(table, pk string) *sync.Mutex {
	return &s.parts[s.partitionSlot(table, pk)]
}

// partitionSlot is the index in parts of a table partition's lock.
func (s *Store) partitionSlot(table, pk string) int {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(table)
	h.WriteByte(0)
	h.WriteString(pk)
	return int(h.Sum64() % uint64(len(s.parts)))
}

// get reads key; found is false when it does not exist. The value is a copy.
func (s *Store) get(key []byte) (val []byte, found bool, err error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, s.readErr(err)
	}
	val = append(make([]byte, 0, len(v)), v...)
	_ = closer.Close()
	return val, true, nil
}

// readErr maps an engine read error: corruption wraps ErrCorrupt.
func (s *Store) readErr(err error) error {
	if pebble.IsCorruptionError(err) {
		return fmt.Errorf("%w: %s: %w; %s", ErrCorrupt, s.dir, err, advice(s.dir))
	}
	return err
}

// apply applies b (built while the caller holds the locks of what it read)
// and makes it visible. The caller releases its locks, then calls
// syncWait. b is not applied when apply fails.
func (s *Store) apply(b *pebble.Batch) error { return s.applyN(b, 1) }

// applyN is apply for a batch that stands for n writes (a group of
// completions): the sync hold counts n waiting writes. The caller passes
// the same n to syncWaitN.
func (s *Store) applyN(b *pebble.Batch, n int64) error {
	if err := s.space.check(); err != nil {
		return fmt.Errorf("embedded: write: %w", err)
	}
	return s.applyAnyway(b, n)
}

// applyFreeing is apply for a write that frees space (the deletion of a
// queue or a table): it is accepted whatever the free space.
func (s *Store) applyFreeing(b *pebble.Batch) error { return s.applyAnyway(b, 1) }

func (s *Store) applyAnyway(b *pebble.Batch, n int64) error {
	if f := s.failed.Load(); f != nil {
		return *f
	}
	if err := s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		return fmt.Errorf("embedded: write: %w", s.readErr(err))
	}
	s.writes.Add(1)
	s.fs.waiting.Add(n)
	return nil
}

// syncWait waits until the log sync covering b is done and closes b. A
// failed sync leaves the store refusing writes: what was applied is
// visible but may not be durable.
func (s *Store) syncWait(b *pebble.Batch) error { return s.syncWaitN(b, 1) }

// syncWaitN is syncWait for a batch applied with applyN(b, n).
func (s *Store) syncWaitN(b *pebble.Batch, n int64) error {
	err := b.SyncWait()
	s.fs.waiting.Add(-n)
	_ = b.Close()
	if err != nil {
		err = fmt.Errorf("embedded: sync of the write-ahead log in %s failed: %w; the store refuses further writes: restart the process", s.dir, err)
		s.failed.CompareAndSwap(nil, &err)
		return err
	}
	return nil
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
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	names, err := s.queueNames()
	if err != nil {
		return 0, err
	}
	total := 0
	for _, name := range names {
		sq, err := s.Queue(ctx, name)
		if err != nil {
			return total, err
		}
		for {
			n, more, err := sq.(*queue).purge(ctx, purgeChunk)
			total += n
			if err != nil {
				return total, err
			}
			if !more {
				break
			}
		}
	}
	return total, nil
}

// purgeChunk is the most expired messages one purge write deletes.
const purgeChunk = 10000

// queueNames lists the queues of the registry.
func (s *Store) queueNames() ([]string, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.gate.RUnlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("Q"), UpperBound: []byte("R")})
	if err != nil {
		return nil, s.readErr(err)
	}
	var names []string
	for ok := it.First(); ok; ok = it.Next() {
		names = append(names, string(it.Key()[1:]))
	}
	if err := it.Close(); err != nil {
		return nil, s.readErr(err)
	}
	return names, nil
}

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

func newStore(db *pebble.DB, lock *pebble.Lock, dir string, o Options, fs *countingFS) *Store {
	s := &Store{
		db:      db,
		lock:    lock,
		dir:     dir,
		opts:    o,
		fs:      fs,
		closing: make(chan struct{}),
		sweeper: make(chan struct{}),
		seed:    maphash.MakeSeed(),
	}
	s.receipts.Store(rand.Uint64() >> 1)
	return s
}

// startSweeper starts the background purge of expired messages (once Open
// succeeded; Close waits for it to end).
func (s *Store) startSweeper() {
	if s.opts.PurgeInterval > 0 {
		go s.sweep(s.opts.PurgeInterval)
	} else {
		close(s.sweeper)
	}
}
