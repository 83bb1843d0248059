// Package azurite starts the Azure Storage emulator (Azurite) for tests.
//
// Any package's tests can use it:
//
//	func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		conn := azurite.ConnectionString(t)
//		...
//	}
//
// ConnectionString returns AZURE_STORAGE_CONNECTION_STRING when it is set (so
// the same tests can run against a real account or an Azurite you started
// yourself). Otherwise it starts one Azurite per test binary, lazily, from the
// repository's pinned install (tools/azurite/node_modules/.bin/azurite, or the
// path in CMDQ_AZURITE_BIN), in memory, on free loopback ports. Main stops it
// when the tests end.
//
// When Azurite or node is missing the test is skipped with a visible message,
// unless CMDQ_REQUIRE_AZURITE=1 (as `make test` sets), in which case it fails
// and says how to install it.
package azurite

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Environment variables read by this package.
const (
	// EnvConnectionString, when set, is returned by ConnectionString as is and
	// no emulator is started.
	EnvConnectionString = "AZURE_STORAGE_CONNECTION_STRING"
	// EnvBin overrides the Azurite executable (default: the module root's
	// tools/azurite/node_modules/.bin/azurite).
	EnvBin = "CMDQ_AZURITE_BIN"
	// EnvRequire, set to 1, turns a missing Azurite into a test failure
	// instead of a skip.
	EnvRequire = "CMDQ_REQUIRE_AZURITE"
)

// Well-known Azurite development account (public, documented by Microsoft).
const (
	accountName = "devstoreaccount1"
	accountKey  = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// StartTimeout is how long ConnectionString waits for Azurite's ports to
// accept connections after starting it (30 seconds).
const StartTimeout = 30 * time.Second

var (
	once     sync.Once
	mu       sync.Mutex
	proc     *exec.Cmd
	exited   chan struct{} // closed when proc exits
	stderr   *lockedBuffer
	connStr  string
	startErr error
	missing  bool // startErr means "not installed", not "failed to start"
)

// ConnectionString returns a connection string for an Azure Storage account
// with queue and table endpoints: AZURE_STORAGE_CONNECTION_STRING if set,
// otherwise that of an Azurite this package starts once per test binary. It
// skips the test (or fails it when CMDQ_REQUIRE_AZURITE=1) if Azurite is not
// installed, and fails it if Azurite could not start or has died since.
func ConnectionString(tb testing.TB) string {
	tb.Helper()
	if s := os.Getenv(EnvConnectionString); s != "" {
		return s
	}
	once.Do(start)
	if startErr != nil {
		if missing {
			if os.Getenv(EnvRequire) == "1" {
				tb.Fatalf("Azure suite needs Azurite: %v; install it with `make azurite` (or `npm ci --prefix tools/azurite`), or set %s", startErr, EnvConnectionString)
			}
			tb.Skipf("Azure suite skipped: Azurite not installed (%v); run make test, or install it with `npm ci --prefix tools/azurite`", startErr)
		}
		tb.Fatalf("azurite: %v", startErr)
	}
	select {
	case <-exited:
		tb.Fatalf("azurite: the emulator started for this test binary has exited; its output:\n%s", stderr.String())
	default:
	}
	return connStr
}

// Main runs the tests and then stops the Azurite process that
// ConnectionString started, if any, with its whole process group. Use it as
// os.Exit(azurite.Main(m)) in TestMain.
func Main(m *testing.M) int {
	code := m.Run()
	Stop()
	return code
}

// Stop kills the Azurite process group started by ConnectionString and waits
// for it to exit. It is safe to call more than once; Main calls it.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	if proc == nil || proc.Process == nil {
		return
	}
	killGroup(proc)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
	}
	proc = nil
}

// findBin locates the Azurite executable and checks node is on PATH.
func findBin() (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("node is not on PATH: %w", err)
	}
	if b := os.Getenv(EnvBin); b != "" {
		if _, err := os.Stat(b); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvBin, b, err)
		}
		return b, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod found above the working directory")
		}
		dir = parent
	}
	bin := filepath.Join(dir, "tools", "azurite", "node_modules", ".bin", "azurite")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s not found", bin)
	}
	return bin, nil
}

func start() {
	bin, err := findBin()
	if err != nil {
		startErr, missing = err, true
		return
	}
	// Free ports are picked by listening on :0 and closing, so another
	// process can take one before Azurite binds it; retry with new ports.
	var errs []error
	for attempt := 0; attempt < 4; attempt++ {
		err := startOnce(bin)
		if err == nil {
			return
		}
		errs = append(errs, err)
	}
	startErr = fmt.Errorf("could not start %s: %w", bin, errors.Join(errs...))
}

func startOnce(bin string) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	blobPort, queuePort, tablePort := ports[0], ports[1], ports[2]
	dir, err := os.MkdirTemp("", "cmdq-azurite-")
	if err != nil {
		return err
	}
	cmd := exec.Command(bin,
		"--inMemoryPersistence", "--silent", "--skipApiVersionCheck", "--disableTelemetry",
		"--blobHost", "127.0.0.1", "--blobPort", strconv.Itoa(blobPort),
		"--queueHost", "127.0.0.1", "--queuePort", strconv.Itoa(queuePort),
		"--tableHost", "127.0.0.1", "--tablePort", strconv.Itoa(tablePort),
	)
	cmd.Dir = dir // Azurite may write debug/telemetry files to its working directory
	buf := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("start: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
		close(done)
	}()

	deadline := time.Now().Add(StartTimeout)
	for _, p := range []int{queuePort, tablePort} {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		for {
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err == nil {
				_ = c.Close()
				break
			}
			select {
			case <-done:
				return fmt.Errorf("azurite exited before listening on %s: %s", addr, buf.String())
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				killGroup(cmd)
				<-done
				return fmt.Errorf("azurite did not listen on %s within %s: %s", addr, StartTimeout, buf.String())
			}
		}
	}
	// A port answering could belong to someone else if Azurite lost the race
	// for it and exited; make sure it is still running.
	select {
	case <-done:
		return fmt.Errorf("azurite exited after start: %s", buf.String())
	default:
	}
	mu.Lock()
	proc, exited, stderr = cmd, done, buf
	mu.Unlock()
	connStr = fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;"+
		"QueueEndpoint=http://127.0.0.1:%d/%s;TableEndpoint=http://127.0.0.1:%d/%s;",
		accountName, accountKey, queuePort, accountName, tablePort, accountName)
	return nil
}

func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 64*1024 { // keep the output bounded
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
