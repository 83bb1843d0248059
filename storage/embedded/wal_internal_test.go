package embedded

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq/storage"
)

func isLog(n string) bool { return strings.HasSuffix(n, ".log") }

// newestLog returns the path of the newest write-ahead log file in dir.
func newestLog(t *testing.T, dir string) string {
	t.Helper()
	logs := files(t, dir, isLog)
	if len(logs) == 0 {
		t.Fatalf("no log file in %s", dir)
	}
	sort.Strings(logs) // numbered, zero-padded
	return filepath.Join(dir, logs[len(logs)-1])
}

// TestOpenWithLogDamaged: the newest write-ahead log of a closed store
// holds its last writes (goodStore leaves 100 commands in it only). Gone,
// emptied or cut short, the store opened without error and without those
// writes; now it is refused like any other damage, naming the file.
func TestOpenWithLogDamaged(t *testing.T) {
	t.Parallel()
	good := goodStore(t)
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, log string)
	}{
		{"log missing", func(t *testing.T, log string) {
			if err := os.Remove(log); err != nil {
				t.Fatal(err)
			}
		}},
		{"log emptied", func(t *testing.T, log string) { truncateFile(t, log, 0) }},
		{"log cut to its first 4 KiB", func(t *testing.T, log string) { truncateFile(t, log, 4096) }},
		{"log one byte short", func(t *testing.T, log string) { truncateFile(t, log, fileSize(t, log)-1) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, good)
			log := newestLog(t, dir)
			c.damage(t, log)
			assertCorrupt(t, dir, filepath.Base(log))
			assertCorrupt(t, dir, filepath.Base(log))
		})
	}
}

// TestLogRecordFollowsRotation: a store whose logs rotate, are recycled
// and deleted many times (a small memtable) reopens without a false alarm
// after a clean close, and its record names only logs that exist.
func TestLogRecordFollowsRotation(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "rotate")
	for round := range 3 {
		s, err := Open(dir, &Options{MemTableSize: 256 << 10, PurgeInterval: -1})
		if err != nil {
			t.Fatalf("round %d: open: %v", round, err)
		}
		ctx := t.Context()
		tb, err := s.Table(ctx, "rot")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 1000 {
			e := storage.Entity{PartitionKey: fmt.Sprintf("r%d-%05d", round, i), RowKey: "a", Properties: map[string]any{"V": strings.Repeat("v", 1000)}}
			if _, err := tb.Insert(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, walGuardFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			name, _, _ := strings.Cut(line, " ")
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Fatalf("round %d: the record names %s: %v", round, name, err)
			}
		}
	}
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	tb, _ := s.Table(t.Context(), "rot")
	for round := range 3 {
		if _, err := tb.Get(t.Context(), fmt.Sprintf("r%d-%05d", round, 999), "a"); err != nil {
			t.Fatalf("round %d's last write: %v", round, err)
		}
	}
}
