package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// TestDamagedStoreExitsOne: `cmdq serve` and `cmdq worker` on a damaged
// embedded store (an earlier version's single file cut short, as in issue
// 8; a store whose manifest was truncated) print what is wrong, which file
// and what to do, and exit 1: no panic, no stack trace.
func TestDamagedStoreExitsOne(t *testing.T) {
	t.Parallel()
	base := t.TempDir()

	legacy := filepath.Join(base, "legacy")
	if err := os.MkdirAll(legacy, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(legacy, "cmdq.db"), make([]byte, 188416), 0o600); err != nil {
		t.Fatal(err)
	}

	truncated := filepath.Join(base, "truncated")
	st, err := embedded.Open(truncated, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	manifests, _ := filepath.Glob(filepath.Join(truncated, "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatal("no manifest in a new store")
	}
	for _, m := range manifests {
		fi, err := os.Stat(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(m, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
	}

	for _, c := range []struct{ dir, file string }{
		{legacy, filepath.Join(legacy, "cmdq.db")},
		{truncated, "MANIFEST-"},
	} {
		for _, args := range [][]string{
			{"serve", "--addr", "127.0.0.1:0", "--data", c.dir},
			{"worker", "--run-for", "2s", "--data", c.dir},
		} {
			r := runCmdq(t, 30*time.Second, nil, args...)
			if r.code != 1 {
				t.Errorf("cmdq %s: exit %d, want 1\nstderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
			}
			for _, want := range []string{"damaged or not a cmdq store", c.file, "move it aside"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("cmdq %s: stderr does not say %q:\n%s", strings.Join(args, " "), want, r.stderr)
				}
			}
			if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("cmdq %s: stderr shows a panic:\n%s", strings.Join(args, " "), r.stderr)
			}
		}
	}
}
