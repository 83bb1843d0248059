package embedded_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// Environment of the child processes the crash and lock tests start.
const (
	envRole = "CMDQ_EMBEDDED_CHILD" // "crash", "complete" or "hold"
	envPath = "CMDQ_EMBEDDED_PATH"
)

// TestCrashHelper is not a test: it is the child process of TestCrash and
// TestSecondOpenOtherProcess, started with envRole set.
func TestCrashHelper(t *testing.T) {
	role := os.Getenv(envRole)
	if role == "" {
		return // run as a normal test: nothing to do
	}
	path := os.Getenv(envPath)
	var opts *embedded.Options
	if d, err := time.ParseDuration(os.Getenv(envShift)); err == nil {
		opts = &embedded.Options{Now: func() time.Time { return time.Now().Add(d) }}
	}
	s, err := embedded.Open(path, opts)
	if err != nil {
		fmt.Fprintln(os.Stdout, "OPENERR", err)
		os.Exit(2)
	}
	ctx := context.Background()
	switch role {
	case "hold":
		fmt.Fprintln(os.Stdout, "OPEN")
		// Hold the lock until the parent kills us or closes stdin.
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		os.Exit(0)
	case "complete":
		completeChild(s)
	case "crash":
		tb, err := s.Table(ctx, "crash")
		if err != nil {
			os.Exit(3)
		}
		if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "before", Properties: map[string]any{"V": "written before the kill"}}); err != nil {
			os.Exit(4)
		}
		fmt.Fprintln(os.Stdout, "TABLE")
		q, err := s.Queue(ctx, "crash")
		if err != nil {
			os.Exit(5)
		}
		var mu sync.Mutex
		for w := range 8 {
			go func() {
				for i := 0; ; i++ {
					text := fmt.Sprintf("w%d-%d-%s", w, i, strings.Repeat("x", i%200))
					if _, err := q.Enqueue(ctx, text, 0, storage.NoExpiry); err != nil {
						continue
					}
					mu.Lock()
					fmt.Fprintln(os.Stdout, "ACK", text)
					mu.Unlock()
				}
			}()
		}
		select {}
	}
	os.Exit(9)
}

func child(t *testing.T, role, path string, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), envRole+"="+role, envPath+"="+path), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A hung child ends the test with an error instead of a hang: killing
	// it closes stdout, which ends the parent's Scan.
	watchdog := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	t.Cleanup(func() {
		watchdog.Stop()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return cmd, sc
}

func TestCrash(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "crash.db")
	cmd, sc := child(t, "crash", path)
	acked := map[string]bool{}
	table := false
	for len(acked) < 2000 && sc.Scan() {
		line := sc.Text()
		switch {
		case line == "TABLE":
			table = true
		case strings.HasPrefix(line, "ACK "):
			acked[strings.TrimPrefix(line, "ACK ")] = true
		}
	}
	if len(acked) < 2000 {
		t.Fatalf("child stopped after %d acks: %v", len(acked), sc.Err())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if !table {
		t.Fatal("child acknowledged messages without the table write")
	}

	s, err := embedded.Open(path, nil)
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	defer s.Close()
	ctx := ctxT(t)
	tb, err := s.Table(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	e, err := tb.Get(ctx, "p", "before")
	if err != nil || e.Properties["V"] != "written before the kill" {
		t.Fatalf("table entity after crash: %+v, %v", e, err)
	}
	q, err := s.Queue(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	count, err := q.ApproximateCount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for {
		got, err := q.Dequeue(ctx, 32, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		for _, m := range got {
			if found[m.Text] {
				t.Fatalf("message %q found twice", m.Text)
			}
			found[m.Text] = true
			if m.DequeueCount != 1 {
				t.Fatalf("message %q DequeueCount %d; want 1", m.Text, m.DequeueCount)
			}
		}
	}
	if len(found) != count {
		t.Fatalf("dequeued %d messages; ApproximateCount said %d", len(found), count)
	}
	var missing []string
	for text := range acked {
		if !found[text] {
			missing = append(missing, text)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d acknowledged messages lost after SIGKILL, e.g. %q", len(missing), len(acked), missing[0])
	}
	// Every message found is one the child tried to write, intact.
	for text := range found {
		var w, i int
		if _, err := fmt.Sscanf(text, "w%d-%d-", &w, &i); err != nil || text != fmt.Sprintf("w%d-%d-%s", w, i, strings.Repeat("x", i%200)) {
			t.Fatalf("corrupt message %q", text)
		}
	}
	t.Logf("%d acked, %d found after SIGKILL", len(acked), len(found))
}

func TestSecondOpenOtherProcess(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "held.db")
	_, sc := child(t, "hold", path)
	if !sc.Scan() || sc.Text() != "OPEN" {
		t.Fatalf("child did not open the store: %q %v", sc.Text(), sc.Err())
	}
	start := time.Now()
	s, err := embedded.Open(path, nil)
	if err == nil {
		s.Close()
		t.Fatal("Open of a file another process holds succeeded")
	}
	if !errors.Is(err, embedded.ErrInUse) || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("Open: %v; want ErrInUse", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Open took %s; want a quick failure", el)
	}
	// And the other way round: a child cannot open a file we hold.
	path2 := filepath.Join(t.TempDir(), "mine.db")
	mine, err := embedded.Open(path2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	_, sc2 := child(t, "hold", path2)
	if !sc2.Scan() || !strings.HasPrefix(sc2.Text(), "OPENERR") || !strings.Contains(sc2.Text(), "in use by another process") {
		t.Fatalf("child open of a held file: %q; want OPENERR … in use by another process", sc2.Text())
	}
}
