package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// goodStore builds a store with data in every kind of file (flushed data
// files, a manifest, a log holding unflushed writes) and returns its
// directory, closed.
func goodStore(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "good")
	s, err := Open(dir, &Options{PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q, err := s.Queue(ctx, "damage")
	if err != nil {
		t.Fatal(err)
	}
	tb, err := s.Table(ctx, "damage")
	if err != nil {
		t.Fatal(err)
	}
	write := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := q.Enqueue(ctx, fmt.Sprintf("message %d %s", i, strings.Repeat("m", 200)), 0, storage.NoExpiry); err != nil {
				t.Fatal(err)
			}
			e := storage.Entity{PartitionKey: fmt.Sprintf("p%05d", i), RowKey: "a:cmd", Properties: map[string]any{"V": strings.Repeat("v", 300), "N": int64(i)}}
			if _, err := tb.Insert(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 600)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	write(600, 700) // in the log only
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyDir copies the files of src into a new directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// files returns the names in dir matching suffix or prefix, sorted.
func files(t *testing.T, dir string, match func(string) bool) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if match(e.Name()) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatalf("no matching file in %s", dir)
	}
	return out
}

func isSST(n string) bool      { return strings.HasSuffix(n, ".sst") }
func isManifest(n string) bool { return strings.HasPrefix(n, "MANIFEST-") }
func isOptions(n string) bool  { return strings.HasPrefix(n, "OPTIONS-") }

func truncateFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// flip inverts n bytes of path starting at off.
func flip(t *testing.T, path string, off int64, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		b[off+int64(i)] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestOpenDamagedStore damages a real store's files (truncation, flipped
// bytes, missing files, foreign content) and checks that Open returns an
// error wrapping ErrCorrupt that names the file and says what to do, and
// never panics.
func TestOpenDamagedStore(t *testing.T) {
	t.Parallel()
	good := goodStore(t)
	// The undamaged copy opens and holds every message.
	{
		dir := copyDir(t, good)
		s, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("open of an undamaged copy: %v", err)
		}
		q, _ := s.Queue(context.Background(), "damage")
		if n, _ := q.ApproximateCount(context.Background()); n != 700 {
			t.Errorf("undamaged copy holds %d messages, want 700", n)
		}
		_ = s.Close()
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string) (file string)
	}{
		{"data file truncated", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, files(t, dir, isSST)[0])
			truncateFile(t, f, fileSize(t, f)/2)
			return f
		}},
		{"data file cut to its first 4 KiB", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, files(t, dir, isSST)[0])
			truncateFile(t, f, 4096)
			return f
		}},
		{"data file bytes flipped in a data block", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, files(t, dir, isSST)[0])
			flip(t, f, 1000, 8)
			return f
		}},
		{"data file bytes flipped near its end", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, files(t, dir, isSST)[0])
			flip(t, f, fileSize(t, f)-100, 4)
			return f
		}},
		{"data file empty", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, files(t, dir, isSST)[0])
			truncateFile(t, f, 0)
			return f
		}},
		{"data file missing", func(t *testing.T, dir string) string {
			n := files(t, dir, isSST)[0]
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				t.Fatal(err)
			}
			return strings.TrimSuffix(n, ".sst") // the engine names it by number
		}},
		{"manifest truncated", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, files(t, dir, isManifest)[0])
			truncateFile(t, f, fileSize(t, f)/2)
			return f
		}},
		{"manifest bytes flipped", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, files(t, dir, isManifest)[0])
			flip(t, f, 20, 8)
			return dir
		}},
		{"manifest missing", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, files(t, dir, isManifest)[0])
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		{"manifest marker missing", func(t *testing.T, dir string) string {
			for _, n := range files(t, dir, func(n string) bool { return strings.HasPrefix(n, "marker.manifest.") }) {
				if err := os.Remove(filepath.Join(dir, n)); err != nil {
					t.Fatal(err)
				}
			}
			return "marker.manifest"
		}},
		{"options file garbage", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, files(t, dir, isOptions)[0])
			if err := os.WriteFile(f, []byte("[Options]\n  comparer=x\x00\xff\n[broken"), 0o644); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		{"marker missing", func(t *testing.T, dir string) string {
			if err := os.Remove(filepath.Join(dir, markerFile)); err != nil {
				t.Fatal(err)
			}
			return markerFile
		}},
		{"marker changed", func(t *testing.T, dir string) string {
			if err := os.WriteFile(filepath.Join(dir, markerFile), []byte("something else\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return markerFile
		}},
		{"every data file missing", func(t *testing.T, dir string) string {
			for _, n := range files(t, dir, func(n string) bool { return n != markerFile && n != "LOCK" }) {
				if err := os.Remove(filepath.Join(dir, n)); err != nil {
					t.Fatal(err)
				}
			}
			return dir
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, good)
			want := c.damage(t, dir)
			assertCorrupt(t, dir, want)
			// The damaged directory is left as it was found: nothing is
			// created or rewritten, so a second open says the same.
			assertCorrupt(t, dir, want)
		})
	}
}

// assertCorrupt opens dir and checks the error.
func assertCorrupt(t *testing.T, dir, file string) {
	t.Helper()
	var s *Store
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Open panicked: %v", r)
			}
		}()
		s, err = Open(dir, &Options{PurgeInterval: -1})
	}()
	if err == nil {
		_ = s.Close()
		t.Fatalf("Open of the damaged store succeeded")
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open: %v; want an error wrapping ErrCorrupt", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, file) {
		t.Errorf("error %q does not name %s", msg, file)
	}
	if !strings.Contains(msg, "restore") || !strings.Contains(msg, "move it aside") {
		t.Errorf("error %q does not say what to do (restore from a backup, or move it aside)", msg)
	}
}

// TestOpenWrongContent: Open refuses what is not a store: a regular file,
// an earlier version's single-file store, a directory with other files.
func TestOpenWrongContent(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	file := filepath.Join(base, "cmdq.db")
	if err := os.WriteFile(file, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	legacy := filepath.Join(base, "legacy")
	if err := os.MkdirAll(legacy, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(legacy, legacyFile), make([]byte, 188416), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(base, "other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{file, "is a file"},
		{legacy, "earlier cmdq version"},
		{other, "not empty"},
	} {
		s, err := Open(c.dir, nil)
		if err == nil {
			_ = s.Close()
			t.Fatalf("Open(%s) succeeded", c.dir)
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s): %v; want ErrCorrupt saying %q", c.dir, err, c.want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(other, "notes.txt")); err != nil || string(b) != "mine" {
		t.Errorf("the other directory's file changed: %q, %v", b, err)
	}
	entries, _ := os.ReadDir(other)
	for _, e := range entries {
		if e.Name() != "notes.txt" && e.Name() != "LOCK" {
			t.Errorf("Open wrote %s into a directory that holds no store", e.Name())
		}
	}
}

// TestReadOfDamagedBlockFails: with the verification at Open skipped, a
// flipped byte in a data block is reported by the read that meets it as an
// error wrapping ErrCorrupt, not a panic.
func TestReadOfDamagedBlockFails(t *testing.T) {
	t.Parallel()
	dir := copyDir(t, goodStore(t))
	f := filepath.Join(dir, files(t, dir, isSST)[0])
	flip(t, f, fileSize(t, f)/2, 8) // a block in the middle: the first holds the name dictionary, which Open reads
	s, err := Open(dir, &Options{SkipVerify: true, PurgeInterval: -1})
	if err != nil {
		t.Fatalf("Open without verification refused a store damaged in a block it does not read: %v", err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Opening the table reads the table registry: it may meet the damage.
	tb, failed := s.Table(ctx, "damage")
	cont := ""
	for failed == nil {
		p, err := tb.Query(ctx, storage.Query{Continuation: cont})
		if err != nil {
			failed = err
			break
		}
		if cont = p.Continuation; cont == "" {
			break
		}
	}
	var q storage.Queue
	if failed == nil {
		q, failed = s.Queue(ctx, "damage")
	}
	for failed == nil {
		msgs, err := q.Dequeue(ctx, 32, time.Hour)
		if err != nil {
			failed = err
			break
		}
		if len(msgs) == 0 {
			break
		}
	}
	if failed == nil {
		t.Fatal("every read of a store with a damaged data block succeeded")
	}
	if !errors.Is(failed, ErrCorrupt) {
		t.Fatalf("read error %v; want ErrCorrupt", failed)
	}
}
