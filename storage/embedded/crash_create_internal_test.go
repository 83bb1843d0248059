package embedded

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cmdq-dev/cmdq/storage"
)

// Environment of the child process of TestKillWhileCreatingStore.
const (
	envCreatePath = "CMDQ_EMBEDDED_CREATE_PATH"
	envCreateKill = "CMDQ_EMBEDDED_CREATE_KILL" // n: kill before the engine's n-th file operation
)

// opKillFS kills the process (SIGKILL) just before the engine's target-th
// file operation: a create, rename, remove, link or directory creation, or
// a write or sync of a file it created.
type opKillFS struct {
	vfs.FS
	target int64
	ops    atomic.Int64
}

func (fs *opKillFS) op(what string) {
	if fs.ops.Add(1) == fs.target {
		fmt.Fprintln(os.Stdout, "KILL", what)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

func (fs *opKillFS) file(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	return &opKillFile{File: f, fs: fs}, nil
}

func (fs *opKillFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	fs.op("create " + filepath.Base(name))
	return fs.file(fs.FS.Create(name, c))
}

func (fs *opKillFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	fs.op("reuse " + filepath.Base(newname))
	return fs.file(fs.FS.ReuseForWrite(oldname, newname, c))
}

func (fs *opKillFS) Rename(oldname, newname string) error {
	fs.op("rename " + filepath.Base(newname))
	return fs.FS.Rename(oldname, newname)
}

func (fs *opKillFS) Remove(name string) error {
	fs.op("remove " + filepath.Base(name))
	return fs.FS.Remove(name)
}

func (fs *opKillFS) Link(oldname, newname string) error {
	fs.op("link " + filepath.Base(newname))
	return fs.FS.Link(oldname, newname)
}

func (fs *opKillFS) MkdirAll(dir string, perm os.FileMode) error {
	fs.op("mkdir")
	return fs.FS.MkdirAll(dir, perm)
}

type opKillFile struct {
	vfs.File
	fs *opKillFS
}

func (f *opKillFile) Write(p []byte) (int, error) {
	f.fs.op("write")
	return f.File.Write(p)
}

func (f *opKillFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.op("write at")
	return f.File.WriteAt(p, off)
}

func (f *opKillFile) Sync() error {
	f.fs.op("sync")
	return f.File.Sync()
}

func (f *opKillFile) SyncData() error {
	f.fs.op("sync data")
	return f.File.SyncData()
}

func (f *opKillFile) SyncTo(length int64) (bool, error) {
	f.fs.op("sync to")
	return f.File.SyncTo(length)
}

// TestKillWhileCreatingStoreHelper is not a test: it is the child process
// of TestKillWhileCreatingStore, started with envCreatePath set. It
// creates a store, killing itself before the engine's n-th file
// operation, and prints OPENED if Open returned first.
func TestKillWhileCreatingStoreHelper(t *testing.T) {
	path := os.Getenv(envCreatePath)
	if path == "" {
		return // run as a normal test: nothing to do
	}
	target, _ := strconv.ParseInt(os.Getenv(envCreateKill), 10, 64)
	_, err := Open(path, &Options{PurgeInterval: -1, MemTableSize: 64 << 10,
		wrapFS: func(fs vfs.FS) vfs.FS { return &opKillFS{FS: fs, target: target} }})
	if err != nil {
		fmt.Fprintln(os.Stdout, "OPENERR", err)
		os.Exit(2)
	}
	fmt.Fprintln(os.Stdout, "OPENED")
	os.Exit(0)
}

// TestKillWhileCreatingStore kills (SIGKILL) the first Open of a new data
// directory before each of the engine's file operations in turn (the
// manifest, its marker, the log and its zero fill, the options file...),
// until Open returns first. After each kill, Open must complete the
// store (no write was acknowledged: there is nothing to lose), a write
// must be kept, and the store must reopen as a finished one.
func TestKillWhileCreatingStore(t *testing.T) {
	t.Parallel()
	for n := 1; ; n++ {
		if n > 300 {
			t.Fatal("Open of a new store did not return after 300 kill points")
		}
		ctx := ctxTorn(t) // each kill point's storage calls: its own bound (the whole loop takes minutes under -race on a loaded machine)
		path := filepath.Join(t.TempDir(), "new")
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillWhileCreatingStoreHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), envCreatePath+"="+path, envCreateKill+"="+strconv.Itoa(n))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		watchdog := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
		killed, opened := "", false
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "OPENED":
				opened = true
			case strings.HasPrefix(line, "KILL "):
				killed = strings.TrimPrefix(line, "KILL ")
			case line == "PASS":
			default:
				t.Fatalf("kill point %d: child: %s", n, line)
			}
		}
		werr := cmd.Wait()
		watchdog.Stop()
		var ee *exec.ExitError
		if killed != "" && (!errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL) {
			t.Fatalf("kill point %d: child ended with %v; want its SIGKILL before %s", n, werr, killed)
		}
		if killed == "" && (!opened || werr != nil) {
			t.Fatalf("kill point %d: child ended with %v, opened %v", n, werr, opened)
		}
		left := dirNames(t, path)
		s, err := Open(path, &Options{PurgeInterval: -1})
		if err != nil {
			t.Fatalf("kill point %d (before %s): reopen of the store the kill left (%s): %v", n, killed, strings.Join(left, " "), err)
		}
		tb, err := s.Table(ctx, "made")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"N": int64(n)}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(path, creatingFile)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("kill point %d: %s is left after Open returned: %v", n, creatingFile, err)
		}
		s, err = Open(path, &Options{PurgeInterval: -1})
		if err != nil {
			t.Fatalf("kill point %d: second reopen: %v", n, err)
		}
		tb, err = s.Table(ctx, "made")
		if err != nil {
			t.Fatal(err)
		}
		if e, err := tb.Get(ctx, "p", "r"); err != nil || e.Properties["N"] != int64(n) {
			t.Fatalf("kill point %d: row after reopen: %+v, %v", n, e, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if opened {
			t.Logf("Open of a new store returned after %d engine file operations; killed before each, every store was completed by the next Open", n-1)
			return
		}
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestOpenAfterCreationMarkerLeft: a kill after the creation wrote the
// store's marker and before it removed creatingFile leaves both; Open
// opens the store as it is (with its data) and removes creatingFile. A
// creatingFile beside files that are not the engine's is refused as a
// directory holding no store, and those files are left alone.
func TestOpenAfterCreationMarkerLeft(t *testing.T) {
	t.Parallel()
	ctx := ctxTorn(t)
	dir := filepath.Join(t.TempDir(), "made")
	s, err := Open(dir, &Options{PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := s.Table(ctx, "made")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"V": "kept"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, creatingFile), []byte(creatingText), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, &Options{PurgeInterval: -1})
	if err != nil {
		t.Fatalf("Open of a store with %s left: %v", creatingFile, err)
	}
	tb, err = s.Table(ctx, "made")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := tb.Get(ctx, "p", "r"); err != nil || e.Properties["V"] != "kept" {
		t.Fatalf("row after Open: %+v, %v", e, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, creatingFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s is left after Open: %v", creatingFile, err)
	}

	other := filepath.Join(t.TempDir(), "other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{creatingFile: creatingText, "notes.txt": "mine"} {
		if err := os.WriteFile(filepath.Join(other, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if s, err := Open(other, nil); err == nil {
		_ = s.Close()
		t.Fatal("Open of a directory with a foreign file and a creation marker succeeded")
	} else if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("Open: %v; want ErrCorrupt naming notes.txt", err)
	}
	if got := dirNames(t, other); strings.Join(got, " ") != "CMDQ-CREATING LOCK notes.txt" {
		t.Fatalf("Open changed the directory: %v", got)
	}
}
