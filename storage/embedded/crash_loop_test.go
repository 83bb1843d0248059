package embedded_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// envRound is the round number of a TestKillLoop child (its rows' prefix).
const envRound = "CMDQ_EMBEDDED_ROUND"

// churnChild is the child process of TestKillLoop: it opens the store with
// 128 KiB write buffers, so that the engine flushes a data file every few
// hundred writes and compacts them soon after, prints OPEN, then inserts
// rows of about 600 bytes from 8 goroutines and prints ACK <row> after
// each insert returns, until it is killed.
func churnChild(path string) {
	s, err := embedded.Open(path, &embedded.Options{MemTableSize: 128 << 10, PurgeInterval: -1})
	if err != nil {
		fmt.Fprintln(os.Stdout, "OPENERR", err)
		os.Exit(2)
	}
	ctx := context.Background()
	tb, err := s.Table(ctx, "churn")
	if err != nil {
		fmt.Fprintln(os.Stdout, "ERR", err)
		os.Exit(3)
	}
	fmt.Fprintln(os.Stdout, "OPEN")
	round := os.Getenv(envRound)
	for w := range 8 {
		go func() {
			for i := 0; ; i++ {
				row := fmt.Sprintf("r%s-w%d-%d", round, w, i)
				if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: row, Properties: map[string]any{"V": churnValue(row)}}); err != nil {
					fmt.Fprintln(os.Stdout, "ERR", row, err)
					os.Exit(4)
				}
				fmt.Fprintln(os.Stdout, "ACK", row)
			}
		}()
	}
	select {}
}

func churnValue(row string) string { return strings.Repeat(row+";", 600/(len(row)+1)) }

// TestKillLoop kills (SIGKILL) a process that writes continuously with
// small write buffers at a random moment in each of 16 rounds (after 0 to
// 2,999 acknowledged writes: during its Open, a flush, a compaction, a
// manifest rotation, a log rotation...). Every reopen, with the checksum
// verification on, must succeed and hold every write acknowledged before
// any kill, intact. The seed is logged.
func TestKillLoop(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	path := filepath.Join(t.TempDir(), "loop")
	acked := map[string]bool{}
	for round := range 16 {
		cmd, sc := child(t, "churn", path, envRound+"="+fmt.Sprint(round))
		want := rng.IntN(3000)
		got := 0
		opened := false
		for (!opened || got < want) && sc.Scan() {
			line := sc.Text()
			switch {
			case line == "OPEN":
				opened = true
			case strings.HasPrefix(line, "ACK "):
				acked[strings.TrimPrefix(line, "ACK ")] = true
				got++
			default:
				t.Fatalf("round %d: child: %s", round, line)
			}
		}
		if !opened || got < want {
			t.Fatalf("round %d: child stopped after %d of %d acknowledgements: %v", round, got, want, sc.Err())
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		for sc.Scan() { // acknowledgements printed before the kill
			if row, ok := strings.CutPrefix(sc.Text(), "ACK "); ok {
				acked[row] = true
			}
		}
		s, err := embedded.Open(path, &embedded.Options{PurgeInterval: -1})
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL (after %d acknowledgements): %v", round, got, err)
		}
		ctx := ctxT(t)
		tb, err := s.Table(ctx, "churn")
		if err != nil {
			t.Fatal(err)
		}
		for row := range acked {
			e, err := tb.Get(ctx, "p", row)
			if err != nil {
				t.Fatalf("round %d: acknowledged row %s: %v", round, row, err)
			}
			if e.Properties["V"] != churnValue(row) {
				t.Fatalf("round %d: row %s holds %.40q", round, row, e.Properties["V"])
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d acknowledged rows kept through 16 kills", len(acked))
}
