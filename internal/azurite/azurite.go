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
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite/emulator"
)

// Environment variables read by this package.
const (
	// EnvConnectionString, when set, is returned by ConnectionString as is and
	// no emulator is started.
	EnvConnectionString = "AZURE_STORAGE_CONNECTION_STRING"
	// EnvBin overrides the Azurite executable (default: the module root's
	// tools/azurite/node_modules/.bin/azurite).
	EnvBin = emulator.EnvBin
	// EnvRequire, set to 1, turns a missing Azurite into a test failure
	// instead of a skip.
	EnvRequire = "CMDQ_REQUIRE_AZURITE"
)

// StartTimeout is how long ConnectionString waits for Azurite's ports to
// accept connections after starting it (emulator.StartTimeout, 90 s).
const StartTimeout = emulator.StartTimeout

var (
	once     sync.Once
	mu       sync.Mutex
	inst     *emulator.Instance // nil before start and after Stop
	exited   <-chan struct{}    // closed when the started emulator exits
	output   func() string      // the started emulator's output
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
		tb.Fatalf("azurite: the emulator started for this test binary has exited; its output:\n%s", output())
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
// for it to exit (at most 10 seconds). It is safe to call more than once;
// Main calls it.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	for _, e := range extra {
		e.Stop()
	}
	extra = nil
	if inst == nil {
		return
	}
	inst.Stop()
	inst = nil
}

var extra []*emulator.Instance // started by ConnectionStrings, stopped by Stop

// ConnectionStrings returns n connection strings of n distinct Azure
// Storage accounts (as several storage accounts of one deployment): the
// first is ConnectionString's, the others those of more Azurite instances
// started in memory once per test binary and shared by its tests (Main
// stops them). It skips or fails as ConnectionString does. With
// AZURE_STORAGE_CONNECTION_STRING set it still starts Azurite for the
// others.
func ConnectionStrings(tb testing.TB, n int) []string {
	tb.Helper()
	out := []string{ConnectionString(tb)}
	mu.Lock()
	defer mu.Unlock()
	for len(extra) < n-1 {
		i, err := emulator.Start()
		if err != nil {
			tb.Fatalf("azurite: start another instance: %v", err)
		}
		extra = append(extra, i)
	}
	for _, e := range extra[:n-1] {
		select {
		case <-e.Done():
			tb.Fatalf("azurite: an extra emulator of this test binary has exited; its output:\n%s", e.Output())
		default:
		}
		out = append(out, e.ConnectionString)
	}
	return out
}

func start() {
	i, err := emulator.Start()
	if err != nil {
		startErr, missing = err, errors.Is(err, emulator.ErrNotInstalled)
		return
	}
	mu.Lock()
	inst, exited, output, connStr = i, i.Done(), i.Output, i.ConnectionString
	mu.Unlock()
}

// Restartable is an Azurite of one test's own, with its data on disk, that
// the test stops and starts again on the same endpoints: a storage account
// lost and back (NewRestartable).
type Restartable struct {
	// ConnectionString reaches it (the same after a restart).
	ConnectionString string

	loc   string
	ports [3]int
	mu    sync.Mutex
	inst  *emulator.Instance
}

// NewRestartable starts an Azurite of the test's own, its data in a
// temporary directory, stopped when the test ends. It skips or fails as
// ConnectionString does when Azurite is not installed.
func NewRestartable(tb testing.TB) *Restartable {
	tb.Helper()
	r := &Restartable{loc: tb.TempDir()}
	inst, err := emulator.StartWith(emulator.Options{Location: r.loc})
	if errors.Is(err, emulator.ErrNotInstalled) {
		if os.Getenv(EnvRequire) == "1" {
			tb.Fatalf("this test needs Azurite: %v; install it with `make azurite`", err)
		}
		tb.Skipf("Azurite not installed (%v); install it with `make azurite`", err)
	}
	if err != nil {
		tb.Fatalf("azurite: %v", err)
	}
	b, q, t := inst.Ports()
	r.inst, r.ports, r.ConnectionString = inst, [3]int{b, q, t}, inst.ConnectionString
	tb.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.inst != nil {
			r.inst.Stop()
			r.inst = nil
		}
	})
	return r
}

// Stop stops it cleanly (its data saved): its endpoints refuse
// connections until Start.
func (r *Restartable) Stop(tb testing.TB) {
	tb.Helper()
	r.mu.Lock()
	inst := r.inst
	r.inst = nil
	r.mu.Unlock()
	if inst == nil {
		return
	}
	if err := inst.Shutdown(20 * time.Second); err != nil {
		tb.Fatalf("azurite: stop: %v", err)
	}
}

// Start starts it again on the same endpoints with its data.
func (r *Restartable) Start(tb testing.TB) {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inst != nil {
		return
	}
	inst, err := emulator.StartWith(emulator.Options{Location: r.loc, QueuePort: r.ports[1], TablePort: r.ports[2]}) // a new blob port: unused, and maybe taken since
	if err != nil {
		tb.Fatalf("azurite: start again: %v", err)
	}
	r.inst = inst
}
