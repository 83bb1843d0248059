package embedded

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cmdq-dev/cmdq/storage"
)

// ErrCorrupt is returned (wrapped) by Open when the data directory does not
// hold a readable store: a file is truncated, damaged or missing, or the
// directory holds something other than a cmdq store. The message names the
// file and what to do. Reads that meet damaged data later return it too.
var ErrCorrupt = errors.New("embedded: store is damaged or not a cmdq store")

// markerFile is the file that identifies a data directory as a cmdq store
// and names its format; markerText is its content for the format this
// version writes (5: format 4 with an entity merge written as an engine
// merge operand holding the merged properties, merger.go), markerTextV4
// for format 4 (format 3 with a message's lease state in its visibility
// index entry, queue.go: every format-4 store is a format-5 store without
// merge operands, so Open only rewrites the marker), markerTextV3 for
// format 3 (format 2 plus the binary traceparent value, codec.go: its
// index entries are read as they are, so Open only rewrites the marker),
// markerTextV2 for format 2 (entity records with the property name
// dictionary: every format-2 record is a format-3 record; the marker
// only, too), markerTextV1 for the format Open migrates (1: every record
// carries its names).
const (
	markerFile   = "CMDQ"
	markerText   = "cmdq embedded store\nformat 5 (pebble v2)\n"
	markerTextV4 = "cmdq embedded store\nformat 4 (pebble v2)\n"
	markerTextV3 = "cmdq embedded store\nformat 3 (pebble v2)\n"
	markerTextV2 = "cmdq embedded store\nformat 2 (pebble v2)\n"
	markerTextV1 = "cmdq embedded store\nformat 1 (pebble v2)\n"
	// formatVersion is the format this version writes.
	formatVersion = 5
	// legacyFile is the single-file store of earlier versions (bbolt).
	legacyFile = "cmdq.db"
	// creatingFile says a store is being created: Open writes it (synced)
	// before the engine creates its first file and removes it once
	// markerFile is written. A directory that holds it and no markerFile
	// is a creation a crash cut short: no Open returned, so it holds no
	// data, and Open completes the creation.
	creatingFile = "CMDQ-CREATING"
	creatingText = "cmdq embedded store being created (Open completes it)\n"
)

// ErrFormat is returned (wrapped) by Open for a store written in a format
// this version cannot read (a newer cmdq version's). The message names the
// format; open the store with the version that wrote it.
var ErrFormat = errors.New("embedded: store format not supported by this version")

// newerFormat reads the format number of a marker of a later version
// ("cmdq embedded store\nformat N …").
func newerFormat(b []byte) (int, bool) {
	rest, ok := bytes.CutPrefix(b, []byte("cmdq embedded store\nformat "))
	if !ok {
		return 0, false
	}
	n := 0
	for _, c := range rest {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
		if n > 1_000_000 {
			return 0, false
		}
	}
	return n, n > formatVersion
}

// advice says what an operator can do about a damaged store in dir.
func advice(dir string) string {
	return fmt.Sprintf("restore %s from a backup, or move it aside (mv %s %s.damaged) to start with an empty store", dir, dir, dir)
}

// corrupt builds an error wrapping ErrCorrupt about file (in dir).
func corrupt(dir, file string, cause error) error {
	if cause != nil {
		return fmt.Errorf("%w: %s: %w; %s", ErrCorrupt, file, cause, advice(dir))
	}
	return fmt.Errorf("%w: %s; %s", ErrCorrupt, file, advice(dir))
}

// Open opens (creating if needed) the store in the data directory dir, for
// example ./cmdq-data. A nil opts uses the defaults.
//
// If another Store holds the directory, Open fails within
// Options.LockTimeout with an error wrapping ErrInUse. A directory that is
// not empty and holds no store is refused, so Open never writes into an
// unrelated directory. A damaged store (a data file truncated, changed or
// missing, an unreadable log or manifest) fails with an error wrapping
// ErrCorrupt that names the file; Open never panics on one. Unless
// Options.SkipVerify is set, Open verifies the checksum of every block of
// every data file the store's manifest lists, which reads the whole store
// once (docs/storage.md has its cost); a data file outside the manifest (a
// flush or compaction that a crash cut short) is no part of the store and
// the engine deletes it.
func Open(dir string, opts *Options) (st *Store, err error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: embedded store directory is empty; pass a data directory such as ./cmdq-data", storage.ErrInvalidArgument)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = 100 * time.Millisecond
	}
	if o.PurgeInterval == 0 {
		o.PurgeInterval = time.Minute
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = 4 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Reserve == 0 {
		o.Reserve = DefaultReserve
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return nil, corrupt(dir, dir, errors.New("is a file, not a store directory (pass the directory that holds the store; earlier versions kept one file, "+legacyFile+", inside it)"))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded: create data directory %s: %w", dir, err)
	}
	lock, err := lockDir(dir, o.LockTimeout)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = lock.Close()
		}
	}()
	exists, format, err := checkDir(dir)
	if err != nil {
		return nil, err
	}
	logger := &quietLogger{dir: dir}
	guard := &manifestGuard{dir: dir}
	wal := newWALGuard(dir)
	fs := &countingFS{FS: vfs.Default, prefill: int64(o.MemTableSize) + 1<<20, wal: wal}
	if o.wrapFS != nil {
		fs.FS = o.wrapFS(fs.FS)
	}
	// The engine charges its write buffers to its cache (each live one
	// reserves its size there), so the cache is made that much larger:
	// CacheSize stays the room for data blocks whatever MemTableSize is
	// (a cache of 16 MiB with two 8 MiB buffers would otherwise cache
	// nothing).
	cache := pebble.NewCache(engineCacheSize(o))
	defer cache.Unref()
	popts := &pebble.Options{
		FS:                          fs,
		Lock:                        lock,
		Cache:                       cache,
		MemTableSize:                o.MemTableSize,
		MemTableStopWritesThreshold: memTables,
		ErrorIfNotExists:            exists,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      logger,
		Merger:                      entityMerger,
		EventListener: &pebble.EventListener{
			// A damaged block met by a read or a background compaction
			// is reported once, not fatal: the read that met it fails
			// with ErrCorrupt (the engine's default ends the process).
			DataCorruption: func(info pebble.DataCorruptionInfo) {
				logger.once(info.Path, "damaged data file %s: %v; %s", info.Path, info.Details, advice(dir))
			},
			BackgroundError: func(err error) {
				logger.once(err.Error(), "background error: %v", err)
			},
			ManifestCreated: func(info pebble.ManifestCreateInfo) {
				if info.Err == nil {
					guard.created(info.Path)
				}
			},
			FlushEnd: func(info pebble.FlushInfo) {
				if info.Err == nil {
					guard.record()
				}
			},
			CompactionEnd: func(info pebble.CompactionInfo) {
				if info.Err == nil {
					guard.record()
				}
			},
		},
	}
	// Group more writes per sync when the log is saturated: the engine
	// asks after every sync how long to hold the next one.
	popts.WALMinSyncInterval = fs.holdNext
	// Data files of 1 MiB at L0 and at the base level (the only level of
	// a store of up to about 64 MiB; doubling per level below it): a
	// completion rewrites its command's row, and each compaction into
	// the base level rewrites the files its keys overlap, so smaller files
	// rewrite less (Pebble's 2 and 4 MiB: 1.5x the compacted bytes).
	popts.TargetFileSizes[0], popts.TargetFileSizes[1] = 1<<20, 1<<20
	// No tombstone-density compactions: a queue's deletes would trigger
	// one for each small L0 file of tombstones, each rewriting the base
	// level's files of those messages; L0's own compactions carry the
	// tombstones down, and a dequeue scans from the queue's low-water
	// mark, past deleted keys (queue.setLow).
	popts.Experimental.TombstoneDenseCompactionThreshold = -1
	popts.EnsureDefaults()
	for i := range popts.Levels {
		popts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		// Uncompressed blocks: reading a block is a copy, not a decode
		// (cmdq's records are small JSON; CPU is scarcer than disk).
		popts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
		// 16 KiB blocks: a burn-down reads commands in issue order, so one
		// block read serves more of them (and the index is smaller).
		popts.Levels[i].BlockSize = 16 << 10
	}
	if exists {
		if err := guard.check(); err != nil {
			return nil, err
		}
		if err := wal.check(); err != nil {
			return nil, err
		}
	}
	if exists && !o.SkipVerify {
		// Before the engine opens (and its compactions start reading).
		if err := verify(dir, popts); err != nil {
			return nil, err
		}
	}
	if !exists {
		// Until the marker is written, the directory says that a
		// creation is under way (and a crash leaves one Open completes).
		if err := writeCreating(dir); err != nil {
			return nil, err
		}
	}
	db, err := openEngine(dir, popts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = db.Close()
		}
	}()
	if !exists {
		if err := writeMarker(dir); err != nil {
			return nil, err
		}
	}
	if err := removeCreating(dir); err != nil {
		return nil, err
	}
	s := newStore(db, lock, dir, o, fs)
	free := o.FreeSpace
	if free == nil {
		free = func(dir string) (uint64, error) {
			du, err := fs.GetDiskUsage(dir)
			return du.AvailBytes, err
		}
	}
	s.space = newSpaceProbe(dir, o.Reserve, free, logger.Errorf)
	if s.names, err = loadNames(s); err != nil {
		return nil, err
	}
	if exists && format < formatVersion {
		// A format-1 store's records are rewritten in the current format
		// before the marker says so; a crash in between leaves a store
		// that the next Open migrates again (each record's first byte
		// tells its format, so none is ever misread). A format-2, -3 or -4
		// store needs its marker only (its queues' index entries, with
		// empty values, are read as format 3's until their messages move;
		// it holds no merge operand): the marker is written before any
		// record of format 4 or merge operand, which an earlier version
		// must not read.
		if format == 1 {
			if err := s.migrateV1(); err != nil {
				return nil, err
			}
		}
		if err := writeMarker(dir); err != nil {
			return nil, err
		}
	}
	if guard.name == "" {
		if guard.name, err = currentManifest(dir); err != nil {
			return nil, fmt.Errorf("embedded: read data directory %s: %w", dir, err)
		}
	}
	guard.record()
	s.guard = guard
	s.wal = wal
	s.startSweeper()
	return s, nil
}

// lockDir takes the directory lock, retrying until timeout.
func lockDir(dir string, timeout time.Duration) (*pebble.Lock, error) {
	// Make sure the lock file can be created at all, so that a permission
	// problem is reported as one and not as ErrInUse.
	name := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("embedded: open %s: %w", name, err)
	}
	_ = f.Close()
	deadline := time.Now().Add(timeout)
	for {
		l, err := pebble.LockDirectory(dir, vfs.Default)
		if err == nil {
			return l, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("embedded: open %s: %w (no lock within %s: %v); close the other store or use another directory", dir, ErrInUse, timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkDir tells whether dir holds a store (its marker file) and refuses
// what it must not open: an earlier version's single-file store, a
// directory with other content, a store with its marker or manifest gone.
// A creation cut short (creatingFile and no marker) is a new store.
func checkDir(dir string) (exists bool, format int, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, 0, fmt.Errorf("embedded: read data directory %s: %w", dir, err)
	}
	var hasMarker, hasEngine, creating bool
	var other []string
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == markerFile:
			hasMarker = true
		case name == manifestGuardFile, name == manifestGuardFile+".tmp", name == walGuardFile, name == walGuardFile+".tmp":
		case name == "LOCK":
		case name == creatingFile:
			creating = true
		case name == legacyFile:
			return false, 0, corrupt(dir, filepath.Join(dir, legacyFile), errors.New("is a store of an earlier cmdq version (one bbolt file), which this version cannot read (drain it with that version first)"))
		case strings.HasPrefix(name, "MANIFEST-"), strings.HasPrefix(name, "OPTIONS-"), strings.HasPrefix(name, "marker."), name == "CURRENT",
			strings.HasSuffix(name, ".sst"), strings.HasSuffix(name, ".log"), strings.HasSuffix(name, ".blob"):
			hasEngine = true
		default:
			other = append(other, name)
		}
	}
	if hasMarker {
		b, err := os.ReadFile(filepath.Join(dir, markerFile))
		if err != nil {
			return false, 0, fmt.Errorf("embedded: read %s: %w", filepath.Join(dir, markerFile), err)
		}
		switch {
		case bytes.Equal(b, []byte(markerText)):
			format = formatVersion
		case bytes.Equal(b, []byte(markerTextV4)):
			format = 4
		case bytes.Equal(b, []byte(markerTextV3)):
			format = 3
		case bytes.Equal(b, []byte(markerTextV2)):
			format = 2
		case bytes.Equal(b, []byte(markerTextV1)):
			format = 1
		default:
			if v, ok := newerFormat(b); ok {
				return false, 0, fmt.Errorf("%w: %s holds a store of format %d, written by a newer cmdq version; this version reads formats 1 to %d: open it with that version (or a newer one)", ErrFormat, dir, v, formatVersion)
			}
			return false, 0, corrupt(dir, filepath.Join(dir, markerFile), fmt.Errorf("unexpected content %.40q (want %q)", b, markerText))
		}
		if !hasEngine {
			return false, 0, corrupt(dir, dir, errors.New("the store's data files are missing (only its "+markerFile+" file is left)"))
		}
		return true, format, nil
	}
	if creating {
		// The engine's files, if any, hold no data (the Open that created
		// them never returned); its temporary files and the marker's are
		// left by the same crash.
		var foreign []string
		for _, name := range other {
			if !strings.HasSuffix(name, ".dbtmp") && name != markerFile+".tmp" {
				foreign = append(foreign, name)
			}
		}
		if other = foreign; len(other) == 0 {
			return false, 0, nil
		}
	}
	if hasEngine {
		return false, 0, corrupt(dir, filepath.Join(dir, markerFile), errors.New("is missing: the directory holds engine files but no cmdq store marker"))
	}
	if len(other) > 0 {
		return false, 0, fmt.Errorf("%w: %s is not empty and holds no cmdq store (found %s); pass a new or empty directory", ErrCorrupt, dir, strings.Join(other[:min(len(other), 3)], ", "))
	}
	return false, 0, nil
}

// writeMarker writes the marker of a new store durably.
func writeMarker(dir string) error {
	return writeFileSynced(dir, markerFile, markerText)
}

// writeCreating creates creatingFile durably (its presence is what
// counts: it is written in place).
func writeCreating(dir string) error {
	name := filepath.Join(dir, creatingFile)
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err == nil {
		_, err = f.WriteString(creatingText)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("embedded: write %s: %w", name, err)
	}
	return nil
}

// removeCreating removes creatingFile, if there, durably: once Open
// returns, the store is a finished one.
func removeCreating(dir string) error {
	name := filepath.Join(dir, creatingFile)
	err := os.Remove(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("embedded: remove %s: %w", name, err)
	}
	return nil
}

// writeFileSynced writes file (in dir) durably: a temporary file synced,
// renamed, and the directory synced.
func writeFileSynced(dir, file, text string) error {
	name := filepath.Join(dir, file)
	f, err := os.OpenFile(name+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err == nil {
		_, err = f.WriteString(text)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(name+".tmp", name)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("embedded: write %s: %w", name, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if runtime.GOOS == "windows" {
		return nil
	}
	return d.Sync()
}

// openEngine opens Pebble, turning any failure (and any panic of the
// engine on a damaged file) into an error wrapping ErrCorrupt.
func openEngine(dir string, popts *pebble.Options) (db *pebble.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, corrupt(dir, dir, fmt.Errorf("the engine failed while reading it: %v", r))
		}
	}()
	db, err = pebble.Open(dir, popts)
	if err != nil {
		if errors.Is(err, pebble.ErrDBDoesNotExist) {
			return nil, corrupt(dir, dir, errors.New("the engine's manifest marker (marker.manifest.*) is missing: the list of data files cannot be found"))
		}
		return nil, corrupt(dir, dir, err)
	}
	return db, nil
}

// quietLogger drops the engine's informational messages, writes its errors
// to stderr and turns a fatal one into a panic that Open reports as
// ErrCorrupt.
type quietLogger struct {
	dir  string
	seen sync.Map // messages logged by once
}

func (*quietLogger) Infof(string, ...any) {}
func (l *quietLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cmdq embedded store %s: %s\n", l.dir, fmt.Sprintf(format, args...))
}
func (l *quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Errorf("%w: %s: %s; %s", ErrCorrupt, l.dir, fmt.Sprintf(format, args...), advice(l.dir)))
}

// once logs an error the first time key is seen (a damaged file met by
// every compaction retry is reported once).
func (l *quietLogger) once(key, format string, args ...any) {
	if _, seen := l.seen.LoadOrStore(key, true); !seen {
		l.Errorf(format, args...)
	}
}

// countingFS counts and times the syncs of the write-ahead log files, and
// tells the engine how long to hold the next sync.
type countingFS struct {
	vfs.FS
	wal     *walGuard // records the log files (walguard.go)
	prefill int64     // bytes of zeros written into each new log file
	syncs   atomic.Uint64
	busy    atomic.Int64
	slow    atomic.Uint64 // syncs that took SlowSync or longer
	longest atomic.Int64  // the longest sync, nanoseconds
	waiting atomic.Int64  // writes applied and waiting for their sync
}

// When at least crowdedWrites writes are waiting for a log sync (16
// concurrent issuers, a processor with many handlers draining a backlog),
// the next sync is held for groupHold so that it carries more writes:
// fewer fdatasyncs, each costing CPU and disk time, for the same work (16
// issuers: about 13 writes a sync instead of 4-5, and the log busy 40 % of
// the time instead of 90 %). A steady trickle (one or two writes a sync)
// never holds a sync: a hold rests on a timer, which adds about a
// millisecond when the process is otherwise idle.
const (
	crowdedWrites = 8
	groupHold     = 100 * time.Microsecond
)

// memTables is the most write buffers the engine holds (one being
// written, one being flushed); writes wait while both are full.
const memTables = 2

// engineCacheSize is the size of the engine's cache: o.CacheSize for data
// blocks and the reservation of memTables write buffers.
func engineCacheSize(o Options) int64 {
	return o.CacheSize + memTables*int64(o.MemTableSize)
}

// holdNext is the engine's WALMinSyncInterval: called after every log
// sync, it returns how long to hold the next one.
func (fs *countingFS) holdNext() time.Duration {
	if fs.waiting.Load() >= crowdedWrites {
		return groupHold
	}
	return 0
}

func (fs *countingFS) wrap(f vfs.File, name string, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &countingFile{File: f, fs: fs}, nil
}

func (fs *countingFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err == nil && fs.prefill > 0 && strings.HasSuffix(name, ".log") {
		// A new log file is filled with zeros (synced) before use, so that
		// each log sync writes data only: appending would change the
		// file's size and make every fdatasync also commit metadata. The
		// engine reads a zeroed chunk as the end of the log.
		if err := prefill(f, fs.prefill); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	if err == nil && fs.wal != nil && strings.HasSuffix(name, ".log") {
		if err := fs.wal.added(name); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	return fs.wrap(f, name, err)
}

// Remove takes a log file out of the record before deleting it.
func (fs *countingFS) Remove(name string) error {
	if fs.wal != nil && strings.HasSuffix(name, ".log") {
		if err := fs.wal.removing(name); err != nil {
			return err
		}
	}
	return fs.FS.Remove(name)
}

func prefill(f vfs.File, size int64) error {
	zeros := make([]byte, 256<<10)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, off); err != nil {
			return err
		}
	}
	return f.SyncData()
}

// ReuseForWrite recycles an obsolete log file as a new one: the old name
// leaves the record before, the new one enters it after.
func (fs *countingFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.wal != nil {
		if err := fs.wal.removing(oldname); err != nil {
			return nil, err
		}
	}
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err == nil && fs.wal != nil && strings.HasSuffix(newname, ".log") {
		if err := fs.wal.added(newname); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	return fs.wrap(f, newname, err)
}

type countingFile struct {
	vfs.File
	fs *countingFS
}

func (f *countingFile) count(start time.Time) {
	d := int64(time.Since(start))
	f.fs.syncs.Add(1)
	f.fs.busy.Add(d)
	if d >= int64(SlowSync) {
		f.fs.slow.Add(1)
	}
	for {
		l := f.fs.longest.Load()
		if d <= l || f.fs.longest.CompareAndSwap(l, d) {
			return
		}
	}
}

func (f *countingFile) Sync() error {
	defer f.count(time.Now())
	return f.File.Sync()
}

func (f *countingFile) SyncData() error {
	defer f.count(time.Now())
	return f.File.SyncData()
}

func (f *countingFile) SyncTo(length int64) (bool, error) {
	defer f.count(time.Now())
	return f.File.SyncTo(length)
}

var _ io.Closer = (*countingFile)(nil)
