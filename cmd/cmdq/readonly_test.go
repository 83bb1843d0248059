package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

// readOnlyCommands are the client commands that only read.
var readOnlyCommands = [][]string{{"ls"}, {"status", "0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10"}, {"poison", "ls"},
	{"poison", "show", "0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10"}, {"queue", "ls"}, {"periodic", "ls"}}

// TestCLIReadOnlyCreatesNothing: the read-only commands on a store nothing
// was issued to create nothing in it (no table or queue under the prefix
// on Azure, no data directory) and say that nothing was issued yet; after
// an issue they read it.
func TestCLIReadOnlyCreatesNothing(t *testing.T) {
	t.Parallel()
	t.Run("azure", func(t *testing.T) {
		t.Parallel()
		cs := azurite.ConnectionString(t)
		prefix := randomPrefix()
		store := []string{"--store", "azure", "--prefix", prefix, "--azure-connection-string", cs}
		for _, args := range readOnlyCommands {
			r := runCmdq(t, 30*time.Second, nil, append(args, store...)...)
			want := `cmdq: no cmdq tables under prefix "` + prefix + `" in this account (no table ` + prefix + `commands): nothing issued yet? Check --prefix and the account` + "\n"
			if r.code != 1 || r.stderr != want {
				t.Errorf("cmdq %s on an empty account: exit %d\nstderr %q\nwant   %q", strings.Join(args, " "), r.code, r.stderr, want)
			}
		}
		st, err := azure.Open(context.Background(), azure.Config{ConnectionString: cs})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		tables, err := st.Tables(context.Background(), prefix)
		if err != nil {
			t.Fatal(err)
		}
		queues, err := st.Queues(context.Background(), prefix)
		if err != nil {
			t.Fatal(err)
		}
		if len(tables) != 0 || len(queues) != 0 {
			t.Fatalf("read-only commands created tables %v and queues %v", tables, queues)
		}
		id := sendID(t, nil, append([]string{"demo.echo"}, store...)...)
		for _, args := range [][]string{{"ls"}, {"status", id}, {"poison", "ls"}, {"queue", "ls"}} {
			mustRun(t, nil, append(args, store...)...)
		}
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "never-written")
		for _, args := range readOnlyCommands {
			for _, store := range [][]string{{"--data", dir}, {"--store", "embedded", "--data", dir}} {
				r := runCmdq(t, 30*time.Second, nil, append(args, store...)...)
				if r.code != 1 || !strings.HasPrefix(r.stderr, "cmdq: no cmdq store in "+dir+": nothing issued yet?") || strings.Count(r.stderr, "\n") != 1 {
					t.Errorf("cmdq %s %s: exit %d\nstderr %q", strings.Join(args, " "), strings.Join(store, " "), r.code, r.stderr)
				}
			}
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("read-only commands created %s: %v", dir, err)
		}
	})
}

// TestCLIStorageKeyRefused: a wrong account key is one line that says what
// to check, for read-only commands and for send.
func TestCLIStorageKeyRefused(t *testing.T) {
	t.Parallel()
	cs := azurite.ConnectionString(t)
	var parts []string
	for _, p := range strings.Split(cs, ";") {
		if k, v, ok := strings.Cut(p, "="); ok && strings.EqualFold(k, "AccountKey") {
			// Another valid base64 key of the same length.
			p = k + "=" + strings.Repeat("A", len(v)-2) + "=="
		}
		parts = append(parts, p)
	}
	bad := strings.Join(parts, ";")
	if bad == cs {
		t.Skip("the connection string has no AccountKey")
	}
	store := []string{"--store", "azure", "--prefix", randomPrefix(), "--azure-connection-string", bad}
	for _, args := range [][]string{{"ls"}, {"poison", "ls"}, {"send", "demo.echo"}} {
		r := runCmdq(t, 60*time.Second, nil, append(args, store...)...)
		if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "cmdq: the storage account refused the credentials (403 ") ||
			!strings.Contains(r.stderr, "--azure-connection-string") || strings.Contains(r.stderr, "RESPONSE") {
			t.Errorf("cmdq %s with a wrong key: exit %d\nstderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}
