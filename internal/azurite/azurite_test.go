package azurite

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func endpoint(t *testing.T, conn, key string) *url.URL {
	t.Helper()
	for _, part := range strings.Split(conn, ";") {
		if v, ok := strings.CutPrefix(part, key+"="); ok {
			u, err := url.Parse(v)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			return u
		}
	}
	t.Fatalf("connection string %q has no %s", conn, key)
	return nil
}

func TestEnvConnectionStringWins(t *testing.T) {
	t.Setenv(EnvConnectionString, "UseDevelopmentStorage=true")
	if got := ConnectionString(t); got != "UseDevelopmentStorage=true" {
		t.Fatalf("ConnectionString = %q, want the environment's value", got)
	}
}

func TestStartAndStop(t *testing.T) {
	t.Setenv(EnvConnectionString, "")
	conn := ConnectionString(t)
	if again := ConnectionString(t); again != conn {
		t.Fatalf("second call returned %q, want the same emulator %q", again, conn)
	}
	var addrs []string
	for _, key := range []string{"QueueEndpoint", "TableEndpoint"} {
		u := endpoint(t, conn, key)
		if u.Hostname() != "127.0.0.1" || u.Path != "/devstoreaccount1" {
			t.Fatalf("%s = %s, want http://127.0.0.1:PORT/devstoreaccount1", key, u)
		}
		c, err := net.DialTimeout("tcp", u.Host, time.Second)
		if err != nil {
			t.Fatalf("%s not accepting connections: %v", key, err)
		}
		_ = c.Close()
		addrs = append(addrs, u.Host)
	}

	mu.Lock()
	done := exited
	mu.Unlock()
	Stop()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("azurite still running after Stop")
	}
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			_ = c.Close()
			t.Fatalf("%s still accepting connections after Stop", a)
		}
	}
	// A dead emulator makes later calls fail clearly rather than hang.
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		ConnectionString(ft)
	}()
	if !strings.Contains(ft.msg, "has exited") {
		t.Fatalf("ConnectionString after Stop: got %q, want a failure saying the emulator exited", ft.msg)
	}
}

// fatalRecorder captures Fatalf instead of failing the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}
