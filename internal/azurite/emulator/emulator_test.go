package emulator

import (
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExpandConnectionString(t *testing.T) {
	t.Parallel()
	for _, cs := range []string{"UseDevelopmentStorage=true", " usedevelopmentstorage=TRUE; "} {
		if got := ExpandConnectionString(cs); got != DevConnectionString {
			t.Errorf("ExpandConnectionString(%q) = %q, want DevConnectionString", cs, got)
		}
	}
	other := "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=eQ==;EndpointSuffix=core.windows.net"
	if got := ExpandConnectionString(other); got != other {
		t.Errorf("ExpandConnectionString(%q) = %q, want it unchanged", other, got)
	}
	if !strings.Contains(DevConnectionString, "QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;") ||
		!strings.Contains(DevConnectionString, "TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;") {
		t.Errorf("DevConnectionString = %q, want Azurite's default queue and table endpoints", DevConnectionString)
	}
}

func TestMissingBinIsNotInstalled(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-azurite")
	t.Setenv(EnvBin, missing)
	_, err := Bin()
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Bin() error = %v, want one matching ErrNotInstalled", err)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Fatalf("Bin() error = %q, want it to name %s", err, missing)
	}
	if _, err := Start(); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Start() error = %v, want one matching ErrNotInstalled", err)
	}
}

func endpointHost(t *testing.T, conn, key string) string {
	t.Helper()
	for _, part := range strings.Split(conn, ";") {
		if v, ok := strings.CutPrefix(part, key+"="); ok {
			u, err := url.Parse(v)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			if u.Hostname() != "127.0.0.1" || u.Path != "/"+AccountName {
				t.Fatalf("%s = %s, want http://127.0.0.1:PORT/%s", key, u, AccountName)
			}
			return u.Host
		}
	}
	t.Fatalf("connection string %q has no %s", conn, key)
	return ""
}

func TestStartAndStop(t *testing.T) {
	if _, err := Bin(); err != nil {
		if os.Getenv("CMDQ_REQUIRE_AZURITE") == "1" {
			t.Fatalf("emulator test needs Azurite: %v; install it with `npm ci --prefix tools/azurite`", err)
		}
		t.Skipf("Azurite not installed (%v); install it with `npm ci --prefix tools/azurite`", err)
	}
	inst, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop()
	var hosts []string
	for _, key := range []string{"QueueEndpoint", "TableEndpoint"} {
		host := endpointHost(t, inst.ConnectionString, key)
		c, err := net.DialTimeout("tcp", host, time.Second)
		if err != nil {
			t.Fatalf("%s not accepting connections: %v", key, err)
		}
		_ = c.Close()
		hosts = append(hosts, host)
	}
	select {
	case <-inst.Done():
		t.Fatalf("Done closed while the emulator runs; output:\n%s", inst.Output())
	default:
	}

	inst.Stop()
	inst.Stop() // a second Stop is harmless
	select {
	case <-inst.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("emulator still running after Stop")
	}
	for _, h := range hosts {
		if c, err := net.DialTimeout("tcp", h, time.Second); err == nil {
			_ = c.Close()
			t.Fatalf("%s still accepting connections after Stop", h)
		}
	}
}
