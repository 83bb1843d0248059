// Package emulator starts and stops the Azure Storage emulator (Azurite) from
// the repository's pinned install. It is the single implementation behind the
// test harness (package internal/azurite) and `cmdq bench` (internal/bench),
// and does not import "testing".
//
// Start runs Azurite in memory on free loopback ports, in its own process
// group (on Linux the kernel also kills it if the parent dies), and waits
// until its queue and table ports accept connections:
//
//	inst, err := emulator.Start()
//	if err != nil { ... }
//	defer inst.Stop()
//	conn := inst.ConnectionString
//
// StartWith runs it with its data on disk instead (Options.Location) and on
// given ports, so that a test can stop it (Shutdown saves the data) and start
// it again on the same endpoints with the same queues, messages and tables.
package emulator

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/storage/azure"
)

// EnvBin names the environment variable that overrides the Azurite
// executable (default: tools/azurite/node_modules/.bin/azurite under the
// module root found from the working directory).
const EnvBin = "CMDQ_AZURITE_BIN"

// StartTimeout is how long Start waits for Azurite's ports to accept
// connections after starting it (90 seconds: Node starts Azurite in about
// 2 s on a quiet machine, but over 30 s was seen on a 2-core machine at a
// load average of 30).
const StartTimeout = 90 * time.Second

// keepAliveSeconds is how long Azurite keeps an idle keep-alive
// connection open (300 s: longer than the SDK transport's 90 s).
const keepAliveSeconds = 300

// stopTimeout is how long Stop waits for the killed process to exit.
const stopTimeout = 10 * time.Second

// startAttempts is how many times Start tries with new free ports: a port
// picked free can be taken by another process before Azurite binds it.
const startAttempts = 4

// outputLimit bounds the Azurite output kept for error messages (64 KiB).
const outputLimit = 64 * 1024

// AccountName and AccountKey are Azurite's well-known development account
// (public, documented by Microsoft); the Azure driver owns them.
const (
	AccountName = azure.DevAccountName
	AccountKey  = azure.DevAccountKey
)

// DevConnectionString is what "UseDevelopmentStorage=true" stands for:
// Azurite on its default ports (queue 10001, table 10002) on 127.0.0.1.
const DevConnectionString = azure.DevConnectionString

// ErrNotInstalled is matched (errors.Is) by the errors of Bin and Start when
// Azurite or node is missing, as opposed to installed but failing to start.
var ErrNotInstalled = errors.New("azurite not installed")

// notInstalled keeps the underlying message as is and matches ErrNotInstalled.
type notInstalled struct{ err error }

func (e notInstalled) Error() string        { return e.err.Error() }
func (e notInstalled) Unwrap() error        { return e.err }
func (e notInstalled) Is(target error) bool { return target == ErrNotInstalled }

// ExpandConnectionString returns DevConnectionString for
// "UseDevelopmentStorage=true" (which the SDK's parsers do not know; case,
// surrounding spaces and a trailing ';' ignored) and cs unchanged otherwise.
func ExpandConnectionString(cs string) string { return azure.ExpandConnectionString(cs) }

// Bin locates the Azurite executable ($CMDQ_AZURITE_BIN, else the module
// root's tools/azurite/node_modules/.bin/azurite) and checks node is on PATH.
// Its errors match ErrNotInstalled.
func Bin() (string, error) {
	bin, err := findBin()
	if err != nil {
		return "", notInstalled{err}
	}
	return bin, nil
}

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
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory (run from the repository, or set " + EnvBin + ")")
		}
		dir = parent
	}
	bin := filepath.Join(dir, "tools", "azurite", "node_modules", ".bin", "azurite")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s not found", bin)
	}
	return bin, nil
}

// Instance is a running Azurite started by Start. Stop it with Stop.
type Instance struct {
	// ConnectionString reaches its queue and table endpoints with the
	// development account.
	ConnectionString string

	cmd      *exec.Cmd
	done     chan struct{}
	out      *lockedBuffer
	stopOnce sync.Once
	ports    [3]int // blob, queue, table
}

// Options configures StartWith. The zero Options is what Start uses.
type Options struct {
	// Location, when set, makes Azurite keep its data in this directory
	// (created if missing) instead of in memory, so that an Azurite started
	// again with the same Location finds its queues, messages and tables.
	// Stop it with Shutdown, which lets Azurite save its data (Azurite saves
	// its metadata every 5 seconds and on a clean exit, so Stop, a SIGKILL,
	// may lose the last seconds). Default "": in memory.
	Location string
	// QueuePort and TablePort, when both > 0, are the loopback ports to
	// listen on (pass a previous instance's Ports to come back on the same
	// endpoints); a port in use fails StartWith. BlobPort likewise, or 0
	// with them: a free port for the blob service, which cmdq does not use
	// (a blob port taken since the last start then costs nothing but a new
	// try). Default all 0: free ports, retried a few times.
	BlobPort, QueuePort, TablePort int
	// Timeout is how long StartWith waits for the ports to accept
	// connections (a loaded machine can take longer to start node).
	// Default StartTimeout.
	Timeout time.Duration
}

// Start starts the pinned Azurite (see Bin) in memory on free loopback ports
// and waits up to StartTimeout until its queue and table ports accept
// connections, retrying with new ports a few times. When Azurite or node is
// missing the error matches ErrNotInstalled; otherwise it reads
// "could not start BIN: ..." with Azurite's output.
func Start() (*Instance, error) { return StartWith(Options{}) }

// StartWith is Start with options: a persistent data directory and fixed
// ports (see Options). With fixed ports it makes a single attempt.
func StartWith(o Options) (*Instance, error) {
	fixed := o.QueuePort > 0 && o.TablePort > 0
	if !fixed && (o.BlobPort != 0 || o.QueuePort != 0 || o.TablePort != 0) {
		return nil, fmt.Errorf("emulator options: set QueuePort and TablePort together (got blob %d, queue %d, table %d)", o.BlobPort, o.QueuePort, o.TablePort)
	}
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	if o.Location != "" {
		if err := os.MkdirAll(o.Location, 0o755); err != nil {
			return nil, fmt.Errorf("emulator location: %w", err)
		}
	}
	attempts := startAttempts
	if fixed && o.BlobPort > 0 {
		attempts = 1
	}
	var errs []error
	for range attempts {
		inst, err := startOnce(bin, o)
		if err == nil {
			return inst, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("could not start %s: %w", bin, errors.Join(errs...))
}

// Ports returns the blob, queue and table ports the emulator listens on.
func (i *Instance) Ports() (blob, queue, table int) { return i.ports[0], i.ports[1], i.ports[2] }

// Shutdown asks the emulator to exit (SIGTERM, on which Azurite closes its
// servers and saves a persistent Location) and waits up to timeout for it;
// if it is still running then, it is killed as Stop does and Shutdown
// returns an error saying so.
func (i *Instance) Shutdown(timeout time.Duration) error {
	var err error
	i.stopOnce.Do(func() {
		termGroup(i.cmd)
		select {
		case <-i.done:
			return
		case <-time.After(timeout):
		}
		err = fmt.Errorf("azurite did not exit within %s of SIGTERM; killed", timeout)
		killGroup(i.cmd)
		select {
		case <-i.done:
		case <-time.After(stopTimeout):
		}
	})
	return err
}

// Stop kills the emulator's process group and waits for it to exit (at most
// 10 seconds). It is safe to call more than once.
func (i *Instance) Stop() {
	i.stopOnce.Do(func() {
		killGroup(i.cmd)
		select {
		case <-i.done:
		case <-time.After(stopTimeout):
		}
	})
}

// Done is closed when the emulator process has exited, whether by Stop or
// on its own.
func (i *Instance) Done() <-chan struct{} { return i.done }

// Output returns what the emulator wrote to stdout and stderr so far (the
// first 64 KiB or so).
func (i *Instance) Output() string { return i.out.String() }

func startOnce(bin string, o Options) (*Instance, error) {
	blobPort, queuePort, tablePort := o.BlobPort, o.QueuePort, o.TablePort
	switch {
	case queuePort == 0:
		ports, err := freePorts(3)
		if err != nil {
			return nil, err
		}
		blobPort, queuePort, tablePort = ports[0], ports[1], ports[2]
	case blobPort == 0:
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		blobPort = ports[0]
	}
	dir, err := os.MkdirTemp("", "cmdq-azurite-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	args := []string{"--silent", "--skipApiVersionCheck", "--disableTelemetry",
		"--blobHost", "127.0.0.1", "--blobPort", strconv.Itoa(blobPort),
		"--queueHost", "127.0.0.1", "--queuePort", strconv.Itoa(queuePort),
		"--tableHost", "127.0.0.1", "--tablePort", strconv.Itoa(tablePort),
		// Azurite closes a keep-alive connection after 5 s idle, far
		// sooner than the Azure SDK's transport lets go of it (90 s idle,
		// azcore's default): a request sent on a connection as Azurite
		// closes it failed with "connection reset by peer" — an enqueue,
		// sent once, then counted as failed and recovered (a marker, the
		// reconciler), as any failed enqueue is. Tests that count calls or
		// expect every enqueue to land must not meet that race on every
		// 5 s pause; with this setting the client closes idle
		// connections first.
		"--queueKeepAliveTimeout", strconv.Itoa(keepAliveSeconds),
		"--tableKeepAliveTimeout", strconv.Itoa(keepAliveSeconds),
		"--blobKeepAliveTimeout", strconv.Itoa(keepAliveSeconds),
	}
	if o.Location != "" {
		args = append(args, "--location", o.Location)
	} else {
		args = append(args, "--inMemoryPersistence")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir // Azurite may write debug/telemetry files to its working directory
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
		close(done)
	}()

	timeout := o.Timeout
	if timeout <= 0 {
		timeout = StartTimeout
	}
	deadline := time.Now().Add(timeout)
	// Ready is when Azurite itself says its table service listens (the
	// last of its three, each bound before the next starts). A port that
	// merely answers proves nothing: the ports were free a moment before
	// Azurite started, and on a loaded machine, where Node takes seconds
	// to start, another test's process may bind one first. Azurite then
	// exits, but until it does, requests meant for it reach that other
	// process (seen beside a CPU hog: a table create answered by another
	// emulator's queue service, 400 InvalidResourceName).
	ready := fmt.Sprintf("Table service is successfully listening at http://127.0.0.1:%d", tablePort)
	for !strings.Contains(out.String(), ready) {
		select {
		case <-done:
			return nil, fmt.Errorf("azurite exited before listening on its ports (queue %d, table %d): %s", queuePort, tablePort, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			killGroup(cmd)
			<-done
			return nil, fmt.Errorf("azurite did not say it listens on its ports (queue %d, table %d) within %s: %s", queuePort, tablePort, timeout, out.String())
		}
	}
	conn := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;"+
		"QueueEndpoint=http://127.0.0.1:%d/%s;TableEndpoint=http://127.0.0.1:%d/%s;",
		AccountName, AccountKey, queuePort, AccountName, tablePort, AccountName)
	return &Instance{ConnectionString: conn, cmd: cmd, done: done, out: out, ports: [3]int{blobPort, queuePort, tablePort}}, nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// lockedBuffer collects the emulator's output from its copying goroutines,
// bounded to about outputLimit bytes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > outputLimit {
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
