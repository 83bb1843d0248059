package faultproxy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/faultproxy"
)

// dial opens a connection to addr that the test closes at its end.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// echo writes msg on c and reads it back within 10 s.
func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo: %q, %v; want %q", got, err, msg)
	}
}

// readErr reads from c until an error within d and returns the error and
// how many bytes came before it.
func readErr(c net.Conn, d time.Duration) (int, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := io.Copy(io.Discard, c)
	if err == nil {
		err = io.EOF // io.Copy reports a clean end as nil
	}
	return int(n), err
}

// waitUntil polls cond until it holds, failing t after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
	}
}

func addToxic(t *testing.T, nw *faultproxy.Net, svcs []string, tx faultproxy.Toxic) func() {
	t.Helper()
	rm, err := nw.AddToxic(svcs, tx)
	if err != nil {
		t.Fatal(err)
	}
	return rm
}

// TestNetLatency: latency delays each chunk in the chosen stream by at
// least latency − jitter, on connections opened before the toxic too, and
// removing it forwards a chunk held back at once.
func TestNetLatency(t *testing.T) {
	t.Parallel()
	nw, qe, _ := echoNet(t)
	addr := nw.Addr(faultproxy.Queue)
	c := dial(t, addr)
	echo(t, c, "before")
	for _, stream := range []string{faultproxy.Upstream, faultproxy.Downstream} {
		rm := addToxic(t, nw, faultproxy.Services, faultproxy.Toxic{Type: faultproxy.Latency, Stream: stream, Attrs: map[string]any{"latency": 300, "jitter": 100}})
		for i := range 3 {
			began := time.Now()
			echo(t, c, fmt.Sprintf("%s %d", stream, i))
			if took := time.Since(began); took < 200*time.Millisecond {
				t.Fatalf("%s latency 300±100 ms: a round trip took %s", stream, took)
			}
		}
		rm()
	}

	// An hour of latency upstream: the service sees nothing until the
	// toxic goes, then the chunk goes on and comes back.
	before := qe.received.Load()
	rm := addToxic(t, nw, []string{faultproxy.Queue}, faultproxy.Toxic{Type: faultproxy.Latency, Stream: faultproxy.Upstream, Attrs: map[string]any{"latency": 3_600_000}})
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	if n, err := readErr(c, 200*time.Millisecond); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("under an hour of latency: %d bytes back, %v; want nothing yet", n, err)
	}
	if got := qe.received.Load(); got != before {
		t.Fatalf("the service received %d bytes under an hour of latency", got-before)
	}
	rm()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
		t.Fatalf("after the latency was removed: %q, %v", got, err)
	}
}

// TestNetResetPeer: reset_peer takes the next chunk of its stream off the
// wire and resets the connection after its timeout: upstream the service
// never sees the chunk, downstream it does and the answer is lost. Its
// toxicity is the share of connections it resets.
func TestNetResetPeer(t *testing.T) {
	t.Parallel()
	nw, qe, _ := echoNet(t)
	addr := nw.Addr(faultproxy.Queue)

	open := dial(t, addr) // opened before the toxic: it applies to it too
	echo(t, open, "before")
	before := qe.received.Load()
	rm := addToxic(t, nw, []string{faultproxy.Queue}, faultproxy.Toxic{Type: faultproxy.ResetPeer, Stream: faultproxy.Upstream, Attrs: map[string]any{"timeout": 300}})
	began := time.Now()
	if _, err := open.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	if n, err := readErr(open, 10*time.Second); n != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("upstream reset: %d bytes, %v; want ECONNRESET", n, err)
	}
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Fatalf("reset with a 300 ms timeout came after %s", took)
	}
	if got := qe.received.Load(); got != before {
		t.Fatalf("the service received %d bytes of a chunk an upstream reset took", got-before)
	}
	rm()

	rm = addToxic(t, nw, []string{faultproxy.Queue}, faultproxy.Toxic{Type: faultproxy.ResetPeer, Stream: faultproxy.Downstream})
	c := dial(t, addr)
	if _, err := c.Write([]byte("applied")); err != nil {
		t.Fatal(err)
	}
	if n, err := readErr(c, 10*time.Second); n != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("downstream reset: %d bytes, %v; want ECONNRESET", n, err)
	}
	if got := qe.received.Load() - before; got != int64(len("applied")) {
		t.Fatalf("the service received %d bytes, want the %d of the request whose answer was reset", got, len("applied"))
	}
	rm()

	// Toxicity 0.5 over 60 connections: some are reset, some are not (the
	// chance that fewer than 10 or more than 50 are is about 1e-8).
	rm = addToxic(t, nw, []string{faultproxy.Queue}, faultproxy.Toxic{Type: faultproxy.ResetPeer, Stream: faultproxy.Upstream, Toxicity: 0.5})
	resets := 0
	for i := range 60 {
		c := dial(t, addr)
		msg := fmt.Sprint("conn ", i)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		switch _, err := io.ReadFull(c, got); {
		case errors.Is(err, syscall.ECONNRESET):
			resets++
		case err != nil || string(got) != msg:
			t.Fatalf("connection %d: %q, %v; want an echo or a reset", i, got, err)
		}
		_ = c.Close()
	}
	if resets < 10 || resets > 50 {
		t.Fatalf("toxicity 0.5 reset %d of 60 connections", resets)
	}
	rm()
	echo(t, dial(t, addr), "after")
}

// TestNetStall: a timeout toxic with a timeout swallows the stream's bytes
// and closes the connection after it; one without (a black hole) holds the
// connection open until it is removed, then closes it; the swallowed bytes
// never arrive.
func TestNetStall(t *testing.T) {
	t.Parallel()
	nw, qe, te := echoNet(t)

	rm := addToxic(t, nw, []string{faultproxy.Queue}, faultproxy.Toxic{Type: faultproxy.Timeout, Stream: faultproxy.Upstream, Attrs: map[string]any{"timeout": 400}})
	began := time.Now()
	c := dial(t, nw.Addr(faultproxy.Queue))
	if _, err := c.Write([]byte("stalled")); err != nil {
		t.Fatal(err)
	}
	if n, err := readErr(c, 10*time.Second); n != 0 || err != io.EOF {
		t.Fatalf("stall: %d bytes, %v; want the connection closed with nothing", n, err)
	}
	if took := time.Since(began); took < 400*time.Millisecond {
		t.Fatalf("a stall of 400 ms closed the connection after %s", took)
	}
	if got := qe.received.Load(); got != 0 {
		t.Fatalf("the service received %d bytes through a stall", got)
	}
	echo(t, dial(t, nw.Addr(faultproxy.Table)), "the table service is not stalled")
	rm()

	// A black hole on the open connection of both services.
	held := dial(t, nw.Addr(faultproxy.Table))
	echo(t, held, "before")
	before := te.received.Load()
	nw.BlackHole(t)
	if _, err := held.Write([]byte("swallowed")); err != nil {
		t.Fatal(err)
	}
	if n, err := readErr(held, 300*time.Millisecond); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("black hole: %d bytes, %v; want silence on an open connection", n, err)
	}
	fresh := dial(t, nw.Addr(faultproxy.Queue)) // accepted, never answered
	if _, err := fresh.Write([]byte("swallowed too")); err != nil {
		t.Fatal(err)
	}
	if n, err := readErr(fresh, 300*time.Millisecond); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("black hole, new connection: %d bytes, %v; want silence", n, err)
	}
	nw.Restore(t)
	for name, c := range map[string]net.Conn{"held": held, "fresh": fresh} {
		// Closed: a FIN (EOF), or a reset when the proxy closed the socket
		// with the swallowed bytes still unread in its receive buffer (the
		// kernel then sends RST; on a loaded machine the pump may not have
		// read them yet).
		if n, err := readErr(c, 10*time.Second); n != 0 || (err != io.EOF && !errors.Is(err, syscall.ECONNRESET)) {
			t.Fatalf("%s connection after the black hole: %d bytes, %v; want it closed", name, n, err)
		}
	}
	if got := te.received.Load(); got != before {
		t.Fatalf("the service received %d bytes a black hole swallowed", got-before)
	}
	echo(t, dial(t, nw.Addr(faultproxy.Table)), "after")

	// Downstream only: the request lands, the answer never comes.
	rm = addToxic(t, nw, []string{faultproxy.Table}, faultproxy.Toxic{Type: faultproxy.Timeout, Stream: faultproxy.Downstream})
	c = dial(t, nw.Addr(faultproxy.Table))
	before = te.received.Load()
	if _, err := c.Write([]byte("applied")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the service receives the request", func() bool { return te.received.Load()-before == int64(len("applied")) })
	if n, err := readErr(c, 300*time.Millisecond); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("downstream black hole: %d bytes, %v; want silence", n, err)
	}
	rm()
}

// TestNetRefusedAndDropped: Stop closes the listener (a dial is refused)
// and the open connections; Start listens again on the same address;
// DropConnections closes one service's open connections and keeps
// accepting; Close ends everything for good.
func TestNetRefusedAndDropped(t *testing.T) {
	t.Parallel()
	nw, _, _ := echoNet(t)
	qa, ta := nw.Addr(faultproxy.Queue), nw.Addr(faultproxy.Table)
	open := dial(t, qa)
	echo(t, open, "before")
	nw.Stop(faultproxy.Queue)
	if _, err := net.DialTimeout("tcp", qa, 10*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial a stopped proxy: %v, want ECONNREFUSED", err)
	}
	if n, err := readErr(open, 10*time.Second); n != 0 || err != io.EOF {
		t.Fatalf("open connection of a stopped proxy: %d bytes, %v; want it closed", n, err)
	}
	echo(t, dial(t, ta), "the table service still answers")
	if err := nw.Start(faultproxy.Queue); err != nil {
		t.Fatal(err)
	}
	q, tb := dial(t, qa), dial(t, ta)
	echo(t, q, "listening again")
	echo(t, tb, "table")

	if err := nw.DropConnections(faultproxy.Queue); err != nil {
		t.Fatal(err)
	}
	if n, err := readErr(q, 10*time.Second); n != 0 || err != io.EOF {
		t.Fatalf("dropped connection: %d bytes, %v; want it closed", n, err)
	}
	echo(t, tb, "the table connection is not dropped")
	echo(t, dial(t, qa), "a new connection after the drop")

	nw.Close()
	if _, err := net.DialTimeout("tcp", qa, 10*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial a closed proxy: %v, want ECONNREFUSED", err)
	}
	if err := nw.Heal(); err == nil {
		t.Fatal("Heal after Close listened again")
	}
}

// TestAddToxicRejects: a toxic the proxy does not know is an error that
// names the fix, and nothing is installed.
func TestAddToxicRejects(t *testing.T) {
	t.Parallel()
	nw, _, _ := echoNet(t)
	for _, c := range []struct {
		tx   faultproxy.Toxic
		want string
	}{
		{faultproxy.Toxic{Type: "bandwidth"}, `unknown toxic type "bandwidth"`},
		{faultproxy.Toxic{Type: faultproxy.Timeout, Stream: "sideways"}, `unknown stream "sideways"`},
		{faultproxy.Toxic{Type: faultproxy.Timeout, Attrs: map[string]any{"latency": 5}}, `unknown attribute "latency"`},
		{faultproxy.Toxic{Type: faultproxy.Latency, Attrs: map[string]any{"latency": -1}}, `not a number of milliseconds >= 0`},
		{faultproxy.Toxic{Type: faultproxy.Latency, Attrs: map[string]any{"latency": "300ms"}}, `is not a number of milliseconds`},
		{faultproxy.Toxic{Type: faultproxy.Timeout, Toxicity: 2}, `toxicity 2 is not a share`},
	} {
		rm, err := nw.AddToxic(faultproxy.Services, c.tx)
		if err == nil || rm != nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Fatalf("AddToxic(%+v): %v; want an error with %q", c.tx, err, c.want)
		}
	}
	echo(t, dial(t, nw.Addr(faultproxy.Queue)), "nothing was installed")
}

// TestNetChangesWhileAPumpIsBlocked: the service stops reading, so the
// proxy's pump towards it blocks in a write with a full socket; adding and
// removing faults, dropping and stopping still return, and closing the
// connections frees the pump.
func TestNetChangesWhileAPumpIsBlocked(t *testing.T) {
	t.Parallel()
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := sink.Accept()
		if err == nil {
			accepted <- c // held, never read
		}
	}()
	conn := fmt.Sprintf("QueueEndpoint=http://%s/a;TableEndpoint=http://%s/a", sink.Addr(), sink.Addr())
	nw := faultproxy.NewNet(t, conn)
	c := dial(t, nw.Addr(faultproxy.Queue))
	var server net.Conn
	select {
	case server = <-accepted:
		t.Cleanup(func() { _ = server.Close() })
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not connect to the service")
	}
	// Fill every buffer between the client and the service: a write that
	// cannot finish within 200 ms means the proxy's pump is blocked too.
	chunk := make([]byte, 64<<10)
	for full := false; !full; {
		_ = c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Write(chunk); errors.Is(err, os.ErrDeadlineExceeded) {
			full = true
		} else if err != nil {
			t.Fatal(err)
		}
	}

	done := make(chan error, 1)
	go func() {
		for _, tx := range []faultproxy.Toxic{
			{Type: faultproxy.Latency, Stream: faultproxy.Upstream, Attrs: map[string]any{"latency": 100}},
			{Type: faultproxy.Latency, Stream: faultproxy.Downstream, Attrs: map[string]any{"latency": 100}},
			{Type: faultproxy.ResetPeer, Stream: faultproxy.Upstream},
			{Type: faultproxy.Timeout, Stream: faultproxy.Upstream},
		} {
			rm, err := nw.AddToxic(faultproxy.Services, tx)
			if err != nil {
				done <- err
				return
			}
			rm()
		}
		nw.BlackHole(t)
		nw.Restore(t)
		done <- nw.DropConnections(faultproxy.Services...)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("changing faults blocked behind a pump blocked on a full socket\n%s", goroutines())
	}
	// The connection was closed under the blocked pump: the client sees
	// its end (a reset: it had unread data in flight, or a close).
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("client of a dropped connection: %v, want it closed", err)
	}
}
