package faultproxy_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/faultproxy"
)

// echoServer is a TCP server that writes back every byte it reads, on a
// free loopback port. It counts the bytes it received.
type echoServer struct {
	ln       net.Listener
	received atomic.Int64
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

func startEcho(t testing.TB) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, conns: map[net.Conn]struct{}{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns[c] = struct{}{}
			e.mu.Unlock()
			go func() {
				defer func() {
					e.mu.Lock()
					delete(e.conns, c)
					e.mu.Unlock()
					_ = c.Close()
				}()
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						e.received.Add(int64(n))
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		e.mu.Lock()
		for c := range e.conns {
			_ = c.Close()
		}
		e.mu.Unlock()
	})
	return e
}

// echoNet starts two echo servers and a Net in front of them, as if they
// were an account's queue and table endpoints.
func echoNet(t testing.TB) (nw *faultproxy.Net, queue, table *echoServer) {
	t.Helper()
	queue, table = startEcho(t), startEcho(t)
	conn := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=echo;QueueEndpoint=http://%s/echo;TableEndpoint=http://%s/echo",
		queue.ln.Addr(), table.ln.Addr())
	return faultproxy.NewNet(t, conn), queue, table
}

// goroutines returns every goroutine's stack, for a test that found the
// proxy hung.
func goroutines() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// TestNetChurnNeverBlocks has the shape of toxiproxy's deadlock
// (Shopify/toxiproxy#558, #427), which hung a long reliability run:
// faults are added and removed over and over while many connections push
// data both ways and die (resets, stalls closed, dropped connections,
// clients that give up). Every change of faults must return, the whole
// schedule must finish within its deadline, and afterwards the proxy
// must still accept and forward.
func TestNetChurnNeverBlocks(t *testing.T) {
	t.Parallel()
	nw, _, _ := echoNet(t)
	addrs := map[string]string{}
	for _, svc := range faultproxy.Services {
		addrs[svc] = nw.Addr(svc)
	}

	stop := make(chan struct{})
	var clients sync.WaitGroup
	var echoed, dials atomic.Int64
	// Each client dials, then writes and reads at once (a writer and a
	// reader goroutine) until its connection fails or it gives up after a
	// while, and dials again.
	for i := 0; i < 24; i++ {
		addr := addrs[faultproxy.Services[i%2]]
		clients.Add(1)
		go func() {
			defer clients.Done()
			chunk := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i*700)
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					time.Sleep(5 * time.Millisecond) // refused: the proxy is stopped; try again
					continue
				}
				dials.Add(1)
				_ = c.SetDeadline(time.Now().Add(time.Duration(50+i*10) * time.Millisecond))
				done := make(chan struct{})
				go func() {
					defer close(done)
					buf := make([]byte, 64<<10)
					for {
						n, err := c.Read(buf)
						echoed.Add(int64(n))
						if err != nil {
							return
						}
					}
				}()
				for {
					if _, err := c.Write(chunk); err != nil {
						break
					}
				}
				if i%3 == 0 {
					if tc, ok := c.(*net.TCPConn); ok {
						_ = tc.SetLinger(0) // some clients die with a reset
					}
				}
				_ = c.Close()
				<-done
			}
		}()
	}

	toxics := []faultproxy.Toxic{
		{Type: "latency", Stream: "downstream", Attrs: map[string]any{"latency": 20, "jitter": 10}},
		{Type: "latency", Stream: "upstream", Attrs: map[string]any{"latency": 5}},
		{Type: "reset_peer", Stream: "upstream", Toxicity: 0.3, Attrs: map[string]any{"timeout": 10}},
		{Type: "reset_peer", Stream: "downstream", Toxicity: 0.3, Attrs: map[string]any{"timeout": 0}},
		{Type: "timeout", Stream: "upstream", Attrs: map[string]any{"timeout": 30}},
		{Type: "timeout", Stream: "downstream", Attrs: map[string]any{"timeout": 0}},
	}
	schedule := make(chan error, 1)
	var changes atomic.Int64
	go func() {
		var rms []func()
		for round := 0; round < 300; round++ {
			tx := toxics[round%len(toxics)]
			rm, err := nw.AddToxic(faultproxy.Services, tx)
			if err != nil {
				schedule <- err
				return
			}
			rms = append(rms, rm)
			changes.Add(1)
			if len(rms) > 3 {
				rms[0]()
				rms = rms[1:]
				changes.Add(1)
			}
			switch round % 25 {
			case 7:
				if err := nw.DropConnections(faultproxy.Services...); err != nil {
					schedule <- err
					return
				}
			case 17:
				nw.Stop(faultproxy.Queue)
				time.Sleep(2 * time.Millisecond) // let clients meet the refusal
				if err := nw.Start(faultproxy.Queue); err != nil {
					schedule <- err
					return
				}
			}
			time.Sleep(time.Millisecond) // let traffic flow under this set of faults
		}
		for _, rm := range rms {
			rm()
		}
		schedule <- nw.Heal()
	}()

	select {
	case err := <-schedule:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the fault schedule did not finish in 60 s after %d changes: a change of faults is blocked\n%s", changes.Load(), goroutines())
	}
	close(stop)
	clientsDone := make(chan struct{})
	go func() { clients.Wait(); close(clientsDone) }()
	select {
	case <-clientsDone:
	case <-time.After(30 * time.Second):
		t.Fatalf("clients still blocked 30 s after the faults healed\n%s", goroutines())
	}
	if echoed.Load() == 0 || dials.Load() < 24 {
		t.Fatalf("no traffic went through during the churn (%d bytes echoed, %d dials): the test proves nothing", echoed.Load(), dials.Load())
	}
	t.Logf("%d fault changes, %d connections, %d bytes echoed", changes.Load(), dials.Load(), echoed.Load())

	// The proxy still accepts and forwards on both services.
	for _, svc := range faultproxy.Services {
		roundTrip(t, nw.Addr(svc), []byte("after the churn "+svc))
	}
}

// roundTrip writes msg through a new connection to addr and reads it back.
func roundTrip(t *testing.T, addr string, msg []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("write through %s: %v", addr, err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo through %s: %q, %v; want %q", addr, got, err, msg)
	}
}
