package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/cmdq-dev/cmdq/storage"
)

// quotaFS is a disk of a set capacity under the engine: its free space
// (GetDiskUsage, which the store's default probe asks) is the capacity
// less the bytes of the files in the data directory, and a write that
// finds the disk full fails with ENOSPC (injected with Pebble's errorfs),
// as a real full disk's would. enospc counts those failures: the store's
// reserve must keep it at zero.
type quotaFS struct {
	vfs.FS
	dir      string
	capacity atomic.Int64
	enospc   atomic.Int64
	onLog    atomic.Int64 // ENOSPC failures on write-ahead log files
}

func newQuotaFS(dir string, capacity int64) *quotaFS {
	q := &quotaFS{dir: dir}
	q.capacity.Store(capacity)
	return q
}

// wrap is Options.wrapFS.
func (q *quotaFS) wrap(fs vfs.FS) vfs.FS {
	q.FS = errorfs.Wrap(fs, errorfs.InjectorFunc(q.inject))
	return q
}

func (q *quotaFS) used() int64 {
	entries, _ := os.ReadDir(q.dir)
	var n int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

func (q *quotaFS) inject(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpCreate, errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFilePreallocate, errorfs.OpReuseForWrite, errorfs.OpLink:
	default:
		return nil
	}
	if q.used() < q.capacity.Load() {
		return nil
	}
	q.enospc.Add(1)
	if strings.HasSuffix(op.Path, ".log") {
		q.onLog.Add(1)
	}
	return fmt.Errorf("%s: %w", op.Path, syscall.ENOSPC)
}

func (q *quotaFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	c := q.capacity.Load()
	free := max(c-q.used(), 0)
	return vfs.DiskUsage{AvailBytes: uint64(free), TotalBytes: uint64(c), UsedBytes: uint64(c - free)}, nil
}

// Unwrap returns the wrapped file system.
func (q *quotaFS) Unwrap() vfs.FS { return q.FS }

// TestSpaceReserveRefusesBeforeDiskFull fills a disk of 96 MiB with a
// reserve of 32 MiB: writes succeed until the reserve, then every write
// fails with storage.ErrFull and the engine never meets ENOSPC; reads go
// on; deleting a queue (which frees space) is accepted; once the disk
// grows, writes are accepted again without a reopen; every accepted write
// is there after a reopen.
func TestSpaceReserveRefusesBeforeDiskFull(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const reserve = 32 << 20
	q := newQuotaFS(dir, 96<<20)
	opts := &Options{Reserve: reserve, MemTableSize: 1 << 20, PurgeInterval: -1, wrapFS: q.wrap}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() { _ = s.Close() }()
	tb, err := s.Table(ctx, "things")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Queue(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Enqueue(ctx, "x", 0, 0); err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("v", 32<<10)
	accepted := 0
	var refused error
	for i := 0; i < 10000 && refused == nil; i++ {
		_, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: fmt.Sprintf("r%05d", i), Properties: map[string]any{"V": value}})
		switch {
		case err == nil:
			accepted++
		case errors.Is(err, storage.ErrFull):
			refused = err
		default:
			t.Fatalf("insert %d: %v (want success or storage.ErrFull)", i, err)
		}
	}
	if refused == nil || accepted < 100 {
		t.Fatalf("accepted %d writes, refused: %v; want a refusal after at least 100 writes", accepted, refused)
	}
	t.Logf("accepted %d writes of 32 KiB, then: %v", accepted, refused)
	if !strings.Contains(refused.Error(), dir) || !strings.Contains(refused.Error(), "free") {
		t.Errorf("refusal %q does not name the directory and its free space", refused)
	}
	if n := q.enospc.Load(); n != 0 {
		t.Fatalf("the engine met ENOSPC %d times (%d on its log); the reserve must refuse first", n, q.onLog.Load())
	}
	sp := s.Space()
	if sp.Free >= reserve || sp.Reserve != reserve || sp.Dir != dir {
		t.Errorf("Space() = %+v while refusing; want Free below the reserve %d", sp, reserve)
	}
	if err := storage.CheckSpace(s, 0); !errors.Is(err, storage.ErrFull) {
		t.Errorf("CheckSpace while refusing = %v, want storage.ErrFull", err)
	}
	// Every other write is refused too; reads go on.
	if _, err := other.Enqueue(ctx, "y", 0, 0); !errors.Is(err, storage.ErrFull) {
		t.Errorf("Enqueue while full: %v, want storage.ErrFull", err)
	}
	if _, err := other.Dequeue(ctx, 1, time.Minute); !errors.Is(err, storage.ErrFull) {
		t.Errorf("Dequeue (a write) while full: %v, want storage.ErrFull", err)
	}
	for i := 0; i < accepted; i++ {
		e, err := tb.Get(ctx, "p", fmt.Sprintf("r%05d", i))
		if err != nil || e.Properties["V"] != value {
			t.Fatalf("read %d while full: %v", i, err)
		}
	}
	if msgs, err := other.Peek(ctx, 1); err != nil || len(msgs) != 1 {
		t.Fatalf("Peek while full: %v %v", msgs, err)
	}
	// Deleting a queue frees space: it is accepted.
	if err := s.DeleteQueue(ctx, "other"); err != nil {
		t.Fatalf("DeleteQueue while full: %v", err)
	}
	// The volume grows: writes resume by themselves.
	q.capacity.Add(64 << 20)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: fmt.Sprintf("r%05d", accepted), Properties: map[string]any{"V": value}})
		if err == nil {
			accepted++
			break
		}
		if !errors.Is(err, storage.ErrFull) || time.Now().After(deadline) {
			t.Fatalf("insert after the volume grew: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // the probe's cache (100 ms) decides when
	}
	if n := q.enospc.Load(); n != 0 {
		t.Fatalf("the engine met ENOSPC %d times", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, &Options{Reserve: -1})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer func() { _ = s2.Close() }()
	tb2, err := s2.Table(ctx, "things")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < accepted; i++ {
		if _, err := tb2.Get(ctx, "p", fmt.Sprintf("r%05d", i)); err != nil {
			t.Fatalf("accepted write %d lost after reopen: %v", i, err)
		}
	}
}
