package processor_test

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// goroutineID returns the ID of the calling goroutine (the first line of
// its stack: "goroutine N [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf)
	if len(f) < 2 {
		return ""
	}
	return string(f[1])
}

// handlerGoroutines counts the goroutines waiting for or running handler
// work (processor's session workers).
func handlerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "processor.(*session).worker")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestHandlerGoroutinesReusedAndEnded checks that deliveries run on reused
// handler goroutines (far fewer goroutines than commands: each new one
// grows its stack again) and that none is left once Run has returned.
// Not parallel: it counts every goroutine of the process.
func TestHandlerGoroutinesReusedAndEnded(t *testing.T) {
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := newEnv(t, "embedded", st, func() storage.Store { return st })
	const n = 200
	var mu sync.Mutex
	seen := map[string]bool{}
	reg := registry.NewRegistry()
	register(t, reg, func(ctx context.Context, c okCmd, run *registry.Attempt) error {
		mu.Lock()
		seen[goroutineID()] = true
		mu.Unlock()
		return nil
	}, registry.Options{})
	cfg := e.cfg()
	cfg.Concurrency = 4
	p := newProc(t, e.store, reg, cfg)
	iss := e.issuer(nil)
	var ids []string
	for range n {
		ids = append(ids, e.issue(iss, okCmd{}))
	}
	stop := start(t, p)
	for _, id := range ids {
		e.waitState(id, model.StateCompleted, 30*time.Second)
	}
	if g := handlerGoroutines(); g == 0 || g > n/4 {
		t.Errorf("%d handler goroutines while running %d commands with Concurrency 4; want 1-%d (reused)", g, n, n/4)
	}
	stop()
	mu.Lock()
	distinct := len(seen)
	mu.Unlock()
	if distinct > n/4 {
		t.Errorf("%d commands ran on %d distinct goroutines; want at most %d (handler goroutines reused)", n, distinct, n/4)
	}
	deadline := time.Now().Add(10 * time.Second)
	for handlerGoroutines() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d handler goroutines still there 10 s after Run returned", handlerGoroutines())
		}
		runtime.Gosched()
	}
}
