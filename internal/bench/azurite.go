package bench

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
)

// Azurite's well-known development account (public, documented by Microsoft).
const (
	azuriteAccount = "devstoreaccount1"
	azuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// devConnectionString is what "UseDevelopmentStorage=true" stands for:
// Azurite on its default ports.
var devConnectionString = "DefaultEndpointsProtocol=http;AccountName=" + azuriteAccount + ";AccountKey=" + azuriteKey +
	";QueueEndpoint=http://127.0.0.1:10001/" + azuriteAccount + ";TableEndpoint=http://127.0.0.1:10002/" + azuriteAccount + ";"

// expandConnectionString replaces "UseDevelopmentStorage=true" (which the
// SDK's parsers do not know) by Azurite's default connection string.
func expandConnectionString(cs string) string {
	if strings.EqualFold(strings.TrimSuffix(strings.TrimSpace(cs), ";"), "UseDevelopmentStorage=true") {
		return devConnectionString
	}
	return cs
}

// EnvAzuriteBin overrides the Azurite executable StartAzurite runs (default:
// tools/azurite/node_modules/.bin/azurite under the module root found from
// the working directory). Same variable as internal/azurite.
const EnvAzuriteBin = "CMDQ_AZURITE_BIN"

// AzuriteStartTimeout is how long StartAzurite waits for the emulator's ports (30 s).
const AzuriteStartTimeout = 30 * time.Second

// Azurite is an emulator process started by StartAzurite.
type Azurite struct {
	// ConnectionString reaches its queue and table endpoints.
	ConnectionString string
	cmd              *exec.Cmd
	done             chan struct{}
	out              *lockedBuffer
	stopOnce         sync.Once
}

// StartAzurite starts the repository's pinned Azurite in memory on free
// loopback ports and waits until it listens. Stop it with Stop. It fails with
// a message saying how to install Azurite when it is missing.
func StartAzurite() (*Azurite, error) {
	bin, err := findAzurite()
	if err != nil {
		return nil, fmt.Errorf("bench: Azurite not available: %w; install it with `npm ci --prefix tools/azurite` from the repository root, or set AZURE_STORAGE_CONNECTION_STRING", err)
	}
	var errs []error
	for range 4 { // a free port can be taken by someone else before Azurite binds it
		a, err := startAzuriteOnce(bin)
		if err == nil {
			return a, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("bench: could not start %s: %w", bin, errors.Join(errs...))
}

// Stop kills the emulator's process group and waits for it to exit (at most 10 s).
func (a *Azurite) Stop() {
	a.stopOnce.Do(func() {
		killGroup(a.cmd)
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
		}
	})
}

func findAzurite() (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("node is not on PATH: %w", err)
	}
	if b := os.Getenv(EnvAzuriteBin); b != "" {
		if _, err := os.Stat(b); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvAzuriteBin, b, err)
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
			return "", errors.New("no go.mod above the working directory (run from the repository, or set " + EnvAzuriteBin + ")")
		}
		dir = parent
	}
	bin := filepath.Join(dir, "tools", "azurite", "node_modules", ".bin", "azurite")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s not found", bin)
	}
	return bin, nil
}

func startAzuriteOnce(bin string) (*Azurite, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "cmdq-bench-azurite-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--inMemoryPersistence", "--silent", "--skipApiVersionCheck", "--disableTelemetry",
		"--blobHost", "127.0.0.1", "--blobPort", strconv.Itoa(ports[0]),
		"--queueHost", "127.0.0.1", "--queuePort", strconv.Itoa(ports[1]),
		"--tableHost", "127.0.0.1", "--tablePort", strconv.Itoa(ports[2]),
	)
	cmd.Dir = dir
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
	deadline := time.Now().Add(AzuriteStartTimeout)
	for _, p := range ports[1:] {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		for {
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err == nil {
				_ = c.Close()
				break
			}
			select {
			case <-done:
				return nil, fmt.Errorf("azurite exited before listening on %s: %s", addr, out.String())
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				killGroup(cmd)
				<-done
				return nil, fmt.Errorf("azurite did not listen on %s within %s: %s", addr, AzuriteStartTimeout, out.String())
			}
		}
	}
	select {
	case <-done:
		return nil, fmt.Errorf("azurite exited after start: %s", out.String())
	default:
	}
	conn := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;"+
		"QueueEndpoint=http://127.0.0.1:%d/%s;TableEndpoint=http://127.0.0.1:%d/%s;",
		azuriteAccount, azuriteKey, ports[1], azuriteAccount, ports[2], azuriteAccount)
	return &Azurite{ConnectionString: conn, cmd: cmd, done: done, out: out}, nil
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
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

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 64*1024 {
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
