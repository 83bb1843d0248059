package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeRefusesToStartBelowReserve: serve and worker do not start on
// a volume with less free space than --reserve, and say how much is
// needed.
func TestServeRefusesToStartBelowReserve(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"serve", "worker"} {
		r := runCmdq(t, time.Minute, nil, cmd, "--data", filepath.Join(t.TempDir(), "d"), "--reserve", "1000TiB", "--addr", "127.0.0.1:0")
		if cmd == "worker" {
			r = runCmdq(t, time.Minute, nil, cmd, "--data", filepath.Join(t.TempDir(), "d"), "--reserve", "1000TiB")
		}
		if r.code == 0 || !strings.Contains(lastLine(r.stderr), "needs at least 1000 TiB free") {
			t.Errorf("%s --reserve 1000TiB: exit %d, stderr %q; want a refusal saying 1000 TiB are needed", cmd, r.code, r.stderr)
		}
	}
	if r := runCmdq(t, time.Minute, nil, "serve", "--reserve", "lots"); r.code == 0 || !strings.Contains(r.stderr, "--reserve") {
		t.Errorf("serve --reserve lots: exit %d, stderr %q", r.code, r.stderr)
	}
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory, unmounted
// when the test ends; the test is skipped where mounting is not allowed.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOSYS) {
			t.Skipf("a size-limited file system needs mount(2) of a tmpfs, which needs CAP_SYS_ADMIN (root): %v; the faked-probe tests (storage/embedded, api, cmdq) cover the rest", err)
		}
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
	return dir
}

// fillTo writes a ballast file in dir until its volume has about free
// bytes left.
func fillTo(t *testing.T, dir string, free int64) string {
	t.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	n := int64(fs.Bavail)*int64(fs.Bsize) - free
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for ; n > 0; n -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(int64(len(buf)), n)]); err != nil {
			t.Fatalf("write ballast: %v", err)
		}
	}
	return path
}

// TestServeFullDisk runs `cmdq serve` on a real size-limited file system
// (a 128 MiB tmpfs, --reserve 32MiB): commands flow; once another file
// fills the volume below the reserve plus the issue headroom, `cmdq send`
// fails with a one-line error naming the 507 and the free space, and
// exits non-zero, while serve stays up and answers reads; once the file
// is deleted, new commands are accepted within seconds without a restart,
// and every accepted command completes.
func TestServeFullDisk(t *testing.T) {
	t.Parallel()
	vol := mountTmpfs(t, "128m")
	data := filepath.Join(vol, "data")
	s := startServe(t, serveOpts{args: []string{"--data", data, "--reserve", "32MiB"}})
	first := strings.TrimSpace(mustRun(t, nil, "send", "demo.echo", "--server", s.URL, "--wait").stdout)
	if first == "" {
		t.Fatal("send printed no ID")
	}
	// Another program fills the volume: 40 MiB left, less than the
	// reserve plus the 64 MiB of issue headroom.
	ballast := fillTo(t, vol, 40<<20)
	var r result
	waitFor(t, time.Minute, "send is refused", func() bool {
		r = runCmdq(t, time.Minute, nil, "send", "demo.echo", "--server", s.URL)
		return r.code != 0
	})
	if line := strings.TrimSpace(r.stderr); strings.Contains(line, "\n") || !strings.Contains(line, "disk full") || !strings.Contains(line, "free") || !strings.Contains(line, data) {
		t.Errorf("send on a full disk: stderr %q; want one line saying the disk is full, naming the data directory and its free space", r.stderr)
	}
	if st := mustRun(t, nil, "status", strings.Fields(first)[0], "--server", s.URL); !strings.Contains(st.stdout, "completed") {
		t.Errorf("status while the disk is full: %q", st.stdout)
	}
	select {
	case <-s.done:
		t.Fatalf("serve exited on a full disk: %v\n%s", s.err, s.stderr.String())
	default:
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "send is accepted again", func() bool {
		r = runCmdq(t, time.Minute, nil, "send", "demo.echo", "--server", s.URL, "--wait")
		return r.code == 0
	})
	if !strings.Contains(r.stdout, "completed") {
		t.Errorf("send --wait after space returned: %q", r.stdout)
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
