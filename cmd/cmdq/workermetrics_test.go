package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWorkerServesMetrics: `cmdq worker --metrics-addr` serves the same
// collectors as serve's /metrics: the processor's counts, the storage
// operations, the queue depth and the Go runtime's.
func TestWorkerServesMetrics(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	store := []string{"--store", "embedded", "--data", data}
	sendID(t, nil, append([]string{"demo.echo"}, store...)...)
	sendID(t, nil, append([]string{"demo.echo", "--params", `{"n":2}`}, store...)...)

	cmd := exec.Command(binPath, append([]string{"worker", "--metrics-addr", "127.0.0.1:0", "--log-format", "json"}, store...)...)
	cmd.Env = cleanEnv()
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	logs := &syncBuffer{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); _ = pw.Close() }()
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			_, _ = logs.Write([]byte(sc.Text() + "\n"))
			var rec struct {
				Message string `json:"message"`
				URL     string `json:"url"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Message == "cmdq worker: serving metrics" {
				urlc <- rec.URL
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("cmdq worker stderr:\n%s", logs.String())
		}
	})
	var url string
	select {
	case url = <-urlc:
	case err := <-done:
		t.Fatalf("cmdq worker exited (%v) before serving metrics", err)
	case <-time.After(30 * time.Second):
		t.Fatal("cmdq worker did not log its metrics address within 30s")
	}
	want := []string{`cmdq_commands_completed_total{type="demo.echo"} 2`, `cmdq_queue_depth{queue="cmdq-commands"}`,
		`cmdq_storage_operations_total{op="table_batch",result="ok"}`, `cmdq_polls_total{queue="commands"`, "go_goroutines"}
	var body string
	waitFor(t, 20*time.Second, "the worker's /metrics shows both completions", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return resp.StatusCode == http.StatusOK
	})
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if exitCode(err) != 0 {
			t.Fatalf("worker exit %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not exit within 30s of SIGTERM")
	}
}
