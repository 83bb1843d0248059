package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite"
)

// binPath is the cmdq binary built once by TestMain.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cmdq-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkdir:", err)
		os.Exit(2)
	}
	binPath = filepath.Join(dir, "cmdq")
	build := exec.Command("go", "build", "-o", binPath, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "go build ./cmd/cmdq:", err)
		os.Exit(2)
	}
	code := azurite.Main(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// cleanEnv is the environment for the binary: ours without CMDQ_ and
// OTEL_ variables (so a developer's settings do not leak in) plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CMDQ_") && !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "AZURE_STORAGE_CONNECTION_STRING=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// syncBuffer is a goroutine-safe bytes.Buffer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serveProc is a running `cmdq serve`.
type serveProc struct {
	URL    string
	Data   string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	err    error // Wait's result, valid after done is closed
}

// serveOpts configure startServe.
type serveOpts struct {
	args []string // extra flags
	env  []string // extra environment
	// azure runs on Azurite with a fresh prefix.
	azure bool
}

// startServe starts `cmdq serve` on a free loopback port with a temporary
// --data directory and waits until /readyz answers 200. It is stopped
// (SIGTERM) when the test ends.
func startServe(t *testing.T, o serveOpts) *serveProc {
	t.Helper()
	data := t.TempDir()
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--log-format", "json"}
	env := o.env
	if o.azure {
		args = append(args, "--store", "azure", "--prefix", randomPrefix())
		env = append(env, "CMDQ_AZURE_CONNECTION_STRING="+azurite.ConnectionString(t))
	}
	args = append(args, o.args...)
	p := &serveProc{Data: data, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(binPath, args...)
	p.cmd.Env = cleanEnv(env...)
	pr, pw := io.Pipe()
	p.cmd.Stderr = pw
	p.cmd.Stdout = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start cmdq serve: %v", err)
	}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			_, _ = p.stderr.Write([]byte(line + "\n"))
			var rec struct {
				Message string `json:"message"`
				URL     string `json:"url"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "cmdq serve: listening" {
				select {
				case urlc <- rec.URL:
				default:
				}
			}
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		_ = pw.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(t, 15*time.Second)
		if t.Failed() {
			t.Logf("cmdq serve stderr:\n%s", p.stderr.String())
		}
	})
	select {
	case u := <-urlc:
		// A wildcard listener is reached on loopback.
		u = strings.Replace(u, "http://0.0.0.0:", "http://127.0.0.1:", 1)
		p.URL = strings.Replace(u, "http://[::]:", "http://127.0.0.1:", 1)
	case <-p.done:
		t.Fatalf("cmdq serve exited before listening (%v):\n%s", p.err, p.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("cmdq serve did not log its address within 30s:\n%s", p.stderr.String())
	}
	waitFor(t, 20*time.Second, "GET /readyz answers 200", func() bool {
		resp, err := http.Get(p.URL + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// stop sends SIGTERM and waits for the exit (killing after timeout); it
// returns the exit code.
func (p *serveProc) stop(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(timeout):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("cmdq serve did not exit within %s of SIGTERM", timeout)
		}
	}
	return exitCode(p.err)
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// result is the outcome of one cmdq run.
type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// runCmdq runs the binary with args and extra environment, with a timeout.
func runCmdq(t *testing.T, timeout time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = cleanEnv(env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{code: exitCode(err), stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("cmdq %s did not finish within %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), timeout, r.stdout, r.stderr)
	}
	return r
}

// mustRun runs cmdq and fails the test unless it exits 0.
func mustRun(t *testing.T, env []string, args ...string) result {
	t.Helper()
	r := runCmdq(t, 30*time.Second, env, args...)
	if r.code != 0 {
		t.Fatalf("cmdq %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// waitFor polls cond every 25 ms until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(25 * time.Millisecond) // poll interval, not synchronisation
	}
}

func randomPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// response is an HTTP response read whole.
type response struct {
	code   int
	header http.Header
	body   string
}

// do sends one request. body "" sends none; JSON content type is set when a
// body is given unless headers override it.
func do(t *testing.T, method, url, token, body string, headers ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatalf("request %s %s: %v", method, url, err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: string(b)}
}

// commandState returns the status field of GET /v1/commands/{id}.
func commandState(t *testing.T, base, token, id string) string {
	t.Helper()
	r := do(t, http.MethodGet, base+"/v1/commands/"+id, token, "")
	if r.code != http.StatusOK {
		t.Fatalf("GET command %s: %d %s", id, r.code, r.body)
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(r.body), &st); err != nil {
		t.Fatalf("GET command %s: %v in %s", id, err, r.body)
	}
	return st.Status
}

// waitState polls a command until it reaches state.
func waitState(t *testing.T, base, token, id, state string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		last := commandState(t, base, token, id)
		if last == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("command %s is %s, not %s, after %s", id, last, state, timeout)
		}
		time.Sleep(50 * time.Millisecond) // poll interval, not synchronisation
	}
}
