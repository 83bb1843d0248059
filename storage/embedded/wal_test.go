package embedded_test

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// copyStore copies the files of the store in src into a new directory.
func copyStore(t *testing.T, src string) string {
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

// TestOpenAfterKillWithLogDamaged: a process writing to the store is
// SIGKILLed; its newest write-ahead log holds acknowledged writes. With
// that log gone or emptied the store opened without error and lost them;
// now Open refuses it (ErrCorrupt, naming the log). The undamaged copy
// opens.
func TestOpenAfterKillWithLogDamaged(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "killed")
	cmd, sc := child(t, "crash", path)
	acks := 0
	for acks < 500 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "ACK ") {
			acks++
		}
	}
	if acks < 500 {
		t.Fatalf("child stopped after %d acks: %v", acks, sc.Err())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	newest := func(dir string) string {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var logs []string
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".log") {
				logs = append(logs, e.Name())
			}
		}
		if len(logs) == 0 {
			t.Fatalf("no log in %s", dir)
		}
		sort.Strings(logs)
		return filepath.Join(dir, logs[len(logs)-1])
	}
	for _, c := range []struct {
		name   string
		damage func(log string) error
	}{
		{"missing", os.Remove},
		{"emptied", func(log string) error { return os.Truncate(log, 0) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyStore(t, path)
			log := newest(dir)
			if err := c.damage(log); err != nil {
				t.Fatal(err)
			}
			s, err := embedded.Open(dir, nil)
			if err == nil {
				_ = s.Close()
				t.Fatalf("Open of a store whose log %s is %s succeeded", filepath.Base(log), c.name)
			}
			if !errors.Is(err, embedded.ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(log)) {
				t.Fatalf("Open: %v; want ErrCorrupt naming %s", err, filepath.Base(log))
			}
		})
	}
	t.Run("undamaged", func(t *testing.T) {
		s, err := embedded.Open(copyStore(t, path), nil)
		if err != nil {
			t.Fatalf("Open of the undamaged copy: %v", err)
		}
		_ = s.Close()
	})
}
