package embedded

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cmdq-dev/cmdq/storage"
)

// slowLogFS makes every sync of a log file take at least delay once slow
// is set: a disk whose flushes stall.
type slowLogFS struct {
	vfs.FS
	delay time.Duration
	slow  *atomic.Bool
}

func (fs *slowLogFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.Create(name, category))
}

func (fs *slowLogFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, category))
}

func (fs *slowLogFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &slowLogFile{File: f, fs: fs}, nil
}

type slowLogFile struct {
	vfs.File
	fs *slowLogFS
}

func (f *slowLogFile) SyncData() error {
	if f.fs.slow.Load() {
		time.Sleep(f.fs.delay)
	}
	return f.File.SyncData()
}

// TestSlowSyncsCounted: writes made while the disk's log syncs stall
// (each at least 1.5 × SlowSync) are counted in Stats.SlowSyncs, one per
// sync, and LongestSync is at least the stall.
func TestSlowSyncsCounted(t *testing.T) {
	var slow atomic.Bool
	delay := SlowSync * 3 / 2
	opts := &Options{PurgeInterval: -1, wrapFS: func(fs vfs.FS) vfs.FS { return &slowLogFS{FS: fs, delay: delay, slow: &slow} }}
	s, err := Open(filepath.Join(t.TempDir(), "slow"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ctx := context.Background()
	tb, err := s.Table(ctx, "slowsyncs")
	if err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	slow.Store(true)
	const writes = 3
	for i := range writes {
		e := storage.Entity{PartitionKey: "p", RowKey: strings.Repeat("r", i+1), Properties: map[string]any{"V": int64(i)}}
		if _, err := tb.Insert(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	slow.Store(false)
	after := s.Stats()
	// One write at a time: each waits for a sync of its own.
	if got := after.SlowSyncs - before.SlowSyncs; got < writes {
		t.Fatalf("%d writes, each behind a sync that took %s: SlowSyncs grew by %d (%d → %d)", writes, delay, got, before.SlowSyncs, after.SlowSyncs)
	}
	if after.LongestSync < delay {
		t.Fatalf("LongestSync %s, want at least %s", after.LongestSync, delay)
	}
}
