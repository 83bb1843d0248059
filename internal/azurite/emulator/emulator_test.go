package emulator

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
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

// TestPersistentRestart stops an emulator with a Location (Shutdown) and
// starts it again on the same queue and table ports, its old blob port
// taken by another process meanwhile (a new one is chosen: cmdq uses no
// blob): the queue message and the table entity written before are there.
func TestPersistentRestart(t *testing.T) {
	if _, err := Bin(); err != nil {
		if os.Getenv("CMDQ_REQUIRE_AZURITE") == "1" {
			t.Fatalf("emulator test needs Azurite: %v; install it with `npm ci --prefix tools/azurite`", err)
		}
		t.Skipf("Azurite not installed (%v); install it with `npm ci --prefix tools/azurite`", err)
	}
	loc := filepath.Join(t.TempDir(), "data")
	inst, err := StartWith(Options{Location: loc})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := azure.Open(ctx, azure.Config{ConnectionString: inst.ConnectionString})
	if err != nil {
		t.Fatal(err)
	}
	q, err := st.Queue(ctx, "persist")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, "kept", 0, storage.NoExpiry); err != nil {
		t.Fatal(err)
	}
	tb, err := st.Table(ctx, "persist")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"V": "kept"}}); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	if err := inst.Shutdown(20 * time.Second); err != nil {
		t.Fatalf("Shutdown: %v; output:\n%s", err, inst.Output())
	}
	b, qp, tp := inst.Ports()
	taken, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(b)))
	if err != nil {
		t.Fatalf("take the old blob port: %v", err)
	}
	defer taken.Close()
	again, err := StartWith(Options{Location: loc, QueuePort: qp, TablePort: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Stop()
	if _, q2, t2 := again.Ports(); q2 != qp || t2 != tp {
		t.Fatalf("restarted on queue %d, table %d, want the same %d, %d", q2, t2, qp, tp)
	}
	st, err = azure.Open(ctx, azure.Config{ConnectionString: again.ConnectionString})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if q, err = st.Queue(ctx, "persist"); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Peek(ctx, 32)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Text != "kept" {
		t.Fatalf("after restart the queue holds %+v, want the one message \"kept\"", msgs)
	}
	if tb, err = st.Table(ctx, "persist"); err != nil {
		t.Fatal(err)
	}
	e, err := tb.Get(ctx, "p", "r")
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if e.Properties["V"] != "kept" {
		t.Fatalf("after restart the entity holds %v, want V=kept", e.Properties)
	}
}

func TestStartWithPartialPorts(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{QueuePort: 10001}, {BlobPort: 10000, TablePort: 10002}} {
		_, err := StartWith(o)
		if err == nil || !strings.Contains(err.Error(), "set QueuePort and TablePort together") {
			t.Fatalf("StartWith %+v: error %v, want one asking for both the queue and the table port", o, err)
		}
	}
}

// TestPortTakenBySomeoneElse: a table port that another process holds
// when Azurite starts (the free ports' race) is not taken for Azurite's:
// StartWith fails (Azurite cannot bind it and exits) instead of handing
// out a connection string whose table endpoint is that other process.
// Before the fix the port's answer to a dial counted as ready.
func TestPortTakenBySomeoneElse(t *testing.T) {
	t.Parallel()
	if _, err := Bin(); err != nil {
		t.Skipf("Azurite not installed (%v); install it with `npm ci --prefix tools/azurite`", err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	go func() { // answer dials, as another emulator would
		for {
			c, err := taken.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := StartWith(Options{BlobPort: ports[0], QueuePort: ports[1], TablePort: taken.Addr().(*net.TCPAddr).Port, Timeout: time.Minute})
	if err == nil {
		_ = inst.Shutdown(10 * time.Second)
		t.Fatalf("StartWith succeeded with its table port held by another process: %s", inst.ConnectionString)
	}
	if !strings.Contains(err.Error(), "exited before listening") {
		t.Fatalf("StartWith: %v, want Azurite's exit reported", err)
	}
}
