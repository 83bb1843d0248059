package embedded

import (
	"bufio"
	"context"
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

	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cmdq-dev/cmdq/storage"
)

// Environment of the child process of TestKillWhileWritingDataFile.
const (
	envTornPath   = "CMDQ_EMBEDDED_TORN_PATH"
	envTornTarget = "CMDQ_EMBEDDED_TORN_TARGET" // n: kill in the n-th data file this process writes
	envTornRound  = "CMDQ_EMBEDDED_TORN_ROUND"
)

// tornFS kills the process (SIGKILL) in the middle of writing the
// target-th data file it creates: after that file's second write, when
// some of its blocks are in the file and its footer is not. The file is
// then what an interrupted flush or compaction leaves behind.
type tornFS struct {
	vfs.FS
	target  int64
	created atomic.Int64
}

func (fs *tornFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil || !strings.HasSuffix(name, ".sst") || fs.created.Add(1) < fs.target {
		return f, err
	}
	return &tornFile{File: f, name: name}, nil
}

type tornFile struct {
	vfs.File
	name   string
	writes int
}

func (f *tornFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	if f.writes++; f.writes == 2 {
		fmt.Fprintln(os.Stdout, "KILL", f.name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the file gets no further byte
	}
	return n, err
}

// TestKillWhileWritingDataFileHelper is not a test: it is the child
// process of TestKillWhileWritingDataFile, started with envTornPath set.
// It opens the store with small write buffers (a flush every few hundred
// writes, compactions soon after), prints OPEN, then inserts entities from
// 8 goroutines, printing ACK <row> after each insert returns, until its
// tornFS kills it.
func TestKillWhileWritingDataFileHelper(t *testing.T) {
	path := os.Getenv(envTornPath)
	if path == "" {
		return // run as a normal test: nothing to do
	}
	target, _ := strconv.ParseInt(os.Getenv(envTornTarget), 10, 64)
	round := os.Getenv(envTornRound)
	s, err := Open(path, &Options{PurgeInterval: -1, MemTableSize: 256 << 10,
		wrapFS: func(fs vfs.FS) vfs.FS { return &tornFS{FS: fs, target: target} }})
	if err != nil {
		fmt.Fprintln(os.Stdout, "OPENERR", err)
		os.Exit(2)
	}
	ctx := context.Background()
	tb, err := s.Table(ctx, "torn")
	if err != nil {
		fmt.Fprintln(os.Stdout, "ERR", err)
		os.Exit(3)
	}
	fmt.Fprintln(os.Stdout, "OPEN")
	for w := range 8 {
		go func() {
			for i := 0; ; i++ {
				row := fmt.Sprintf("r%s-w%d-%d", round, w, i)
				e := storage.Entity{PartitionKey: "p", RowKey: row, Properties: map[string]any{"V": tornValue(row)}}
				if _, err := tb.Insert(ctx, e); err != nil {
					fmt.Fprintln(os.Stdout, "ERR", row, err)
					os.Exit(4)
				}
				fmt.Fprintln(os.Stdout, "ACK", row)
			}
		}()
	}
	select {}
}

// tornValue is the value the child writes in row (about 1 KiB).
func tornValue(row string) string { return strings.Repeat(row+";", 1024/(len(row)+1)) }

// TestKillWhileWritingDataFile kills (SIGKILL) a process in the middle of
// writing a data file: in each round the n-th one the process writes (a
// flush of its write buffer, or a compaction's output; after a round whose
// store was not reopened, the first is the flush of the killed process's
// log inside Open, as in the chaos run where a serve killed 1.9 s after
// its start left a store no process could open). The half-written file is
// in no manifest: the engine deletes it at Open. Every open must succeed,
// with the checksum verification on: the parent's after a round, and the
// next child's when the parent did not reopen; and hold every write
// acknowledged before any kill. A half-written file is not damage.
func TestKillWhileWritingDataFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "torn")
	acked := map[string]bool{}
	rounds := []struct {
		target int  // the data file of the child to cut
		reopen bool // the parent reopens and checks after the kill
	}{{1, true}, {2, false}, {1, true}, {3, false}, {4, true}, {8, true}}
	for round, r := range rounds {
		target := r.target
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillWhileWritingDataFileHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), envTornPath+"="+path, envTornTarget+"="+strconv.Itoa(target), envTornRound+"="+strconv.Itoa(round))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// A child that never reaches its target ends the round with an
		// error instead of a hang.
		watchdog := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
		torn, opened, n := "", false, 0
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "OPEN":
				opened = true
			case strings.HasPrefix(line, "ACK "):
				acked[strings.TrimPrefix(line, "ACK ")] = true
				n++
			case strings.HasPrefix(line, "KILL "):
				torn = strings.TrimPrefix(line, "KILL ")
			default:
				t.Fatalf("round %d: child: %s", round, line)
			}
		}
		werr := cmd.Wait()
		watchdog.Stop()
		var ee *exec.ExitError
		if !errors.As(werr, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL || torn == "" {
			t.Fatalf("round %d: child ended with %v after %d acknowledgements, torn file %q; want it killed by its SIGKILL while writing a data file", round, werr, n, torn)
		}
		// What the kill left: a data file with blocks and no footer.
		if fi, err := os.Stat(torn); err != nil || fi.Size() == 0 {
			t.Fatalf("round %d: half-written data file %s: %v", round, torn, err)
		}
		if err := verifyTable(torn, sstable.ReaderOptions{}); err == nil {
			t.Fatalf("round %d: %s reads as a whole table; want one cut by the kill", round, torn)
		}
		if !r.reopen {
			t.Logf("round %d: killed while writing data file %d of the child (%s, open: %v) after %d acknowledgements; the next child opens it", round, target, filepath.Base(torn), opened, n)
			continue
		}

		s, err := Open(path, &Options{PurgeInterval: -1})
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL while writing %s (target %d, open in the child: %v, %d acknowledgements): %v", round, filepath.Base(torn), target, opened, n, err)
		}
		ctx := ctxTorn(t)
		tb, err := s.Table(ctx, "torn")
		if err != nil {
			t.Fatal(err)
		}
		for row := range acked {
			e, err := tb.Get(ctx, "p", row)
			if err != nil {
				t.Fatalf("round %d: acknowledged row %s: %v", round, row, err)
			}
			if e.Properties["V"] != tornValue(row) {
				t.Fatalf("round %d: row %s holds %.40q", round, row, e.Properties["V"])
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// The engine deleted the half-written file as no part of the store.
		if _, err := os.Stat(torn); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("round %d: %s is still there after a reopen: %v", round, torn, err)
		}
		t.Logf("round %d: killed while writing data file %d of the child (%s, open: %v) after %d acknowledgements; reopened with all %d acknowledged rows", round, target, filepath.Base(torn), opened, n, len(acked))
	}
}

func ctxTorn(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
