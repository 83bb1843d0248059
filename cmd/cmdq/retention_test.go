package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// TestStatusOfExpiredCommand: `cmdq status` of a command removed after its
// retention says it expired, with its issue day and the retention.
func TestStatusOfExpiredCommand(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	st, err := embedded.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	issued := time.Now().Add(-20 * 24 * time.Hour)
	id := testenv.CompletedAt(t, st, cmdq.DefaultPrefix, issued, "demo.echo")
	if n := testenv.OpenLog(t, st, cmdq.DefaultPrefix).Sweep(t); n != 1 {
		t.Fatalf("the sweep dropped %d day tables, want 1", n)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	r := runCmdq(t, 20*time.Second, nil, "status", id, "--store", "embedded", "--data", dir)
	day := issued.UTC().Format(time.DateOnly)
	if r.code != 1 || !strings.Contains(r.stderr, "expired") || !strings.Contains(r.stderr, day) || !strings.Contains(r.stderr, "retention") {
		t.Fatalf("status of an expired command: exit %d, stderr %q; want 1, \"expired\", the issue day %s and the retention", r.code, r.stderr, day)
	}
}
