package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The toxic types a Net injects (Toxic.Type). The names and attributes are
// toxiproxy's, so that a fault schedule reads the same as before the
// project wrote its own proxy.
const (
	// Latency delays each chunk of the stream by the attribute "latency"
	// plus or minus a uniform draw from "jitter" (both milliseconds; the
	// jitter is drawn again for every chunk). Removing it forwards a
	// delayed chunk at once.
	Latency = "latency"
	// ResetPeer takes the next chunk of the stream off the wire (it is
	// never forwarded), waits the attribute "timeout" (milliseconds, 0: at
	// once) and resets both connections (SO_LINGER 0, then close: the
	// client sees ECONNRESET).
	ResetPeer = "reset_peer"
	// Timeout drops every byte of the stream while the connection stays
	// open. With the attribute "timeout" > 0 (milliseconds) the connection
	// is closed that long after the toxic met it; with 0 it is held until
	// the toxic is removed. Removing it closes every connection it held,
	// so a request swallowed by it never arrives late.
	Timeout = "timeout"
)

// The streams of a connection (Toxic.Stream).
const (
	// Upstream is the stream from the client towards the service.
	Upstream = "upstream"
	// Downstream is the stream from the service back to the client.
	Downstream = "downstream"
)

// Toxic is one fault on the TCP streams of a Net: a type, the stream it
// breaks, the share of connections it breaks and the type's attributes.
type Toxic struct {
	// Type is Latency, ResetPeer or Timeout.
	Type string `json:"type"`
	// Stream is Upstream or Downstream ("" counts as Downstream).
	Stream string `json:"stream"`
	// Toxicity is the share of connections it applies to, drawn once per
	// connection (0 counts as 1).
	Toxicity float32 `json:"toxicity"`
	// Attrs are the type's attributes, numbers in milliseconds, e.g.
	// {"latency": 300, "jitter": 100} or {"timeout": 0} (never). A missing
	// attribute is 0; an unknown one is an error.
	Attrs map[string]any `json:"attributes"`
}

// stream indices of a link.
const (
	up   = 0
	down = 1
)

// fault is a parsed Toxic installed on one proxy.
type fault struct {
	kind     string
	stream   int
	toxicity float32
	latency  time.Duration // Latency
	jitter   time.Duration // Latency
	timeout  time.Duration // ResetPeer, Timeout
}

// attrsOf lists the attributes each type takes.
var attrsOf = map[string][]string{
	Latency:   {"latency", "jitter"},
	ResetPeer: {"timeout"},
	Timeout:   {"timeout"},
}

// parse checks t and turns it into a fault.
func parse(t Toxic) (*fault, error) {
	names, ok := attrsOf[t.Type]
	if !ok {
		return nil, fmt.Errorf("faultproxy: unknown toxic type %q (use %q, %q or %q)", t.Type, Latency, ResetPeer, Timeout)
	}
	f := &fault{kind: t.Type, toxicity: t.Toxicity}
	switch t.Stream {
	case "", Downstream:
		f.stream = down
	case Upstream:
		f.stream = up
	default:
		return nil, fmt.Errorf("faultproxy: toxic %s: unknown stream %q (use %q or %q)", t.Type, t.Stream, Upstream, Downstream)
	}
	if f.toxicity == 0 {
		f.toxicity = 1
	}
	if f.toxicity < 0 || f.toxicity > 1 || math.IsNaN(float64(f.toxicity)) {
		return nil, fmt.Errorf("faultproxy: toxic %s: toxicity %v is not a share between 0 and 1", t.Type, t.Toxicity)
	}
	for k, v := range t.Attrs {
		if !slices.Contains(names, k) {
			return nil, fmt.Errorf("faultproxy: toxic %s: unknown attribute %q (it takes %v)", t.Type, k, names)
		}
		ms, err := millis(v)
		if err != nil {
			return nil, fmt.Errorf("faultproxy: toxic %s: attribute %q: %w", t.Type, k, err)
		}
		switch k {
		case "latency":
			f.latency = ms
		case "jitter":
			f.jitter = ms
		case "timeout":
			f.timeout = ms
		}
	}
	return f, nil
}

// millis reads a non-negative number of milliseconds of any Go number
// type (a schedule written in Go or decoded from JSON).
func millis(v any) (time.Duration, error) {
	var ms float64
	switch n := v.(type) {
	case int:
		ms = float64(n)
	case int32:
		ms = float64(n)
	case int64:
		ms = float64(n)
	case uint:
		ms = float64(n)
	case uint32:
		ms = float64(n)
	case uint64:
		ms = float64(n)
	case float32:
		ms = float64(n)
	case float64:
		ms = n
	default:
		return 0, fmt.Errorf("%v (%T) is not a number of milliseconds", v, v)
	}
	if ms < 0 || math.IsNaN(ms) || ms > float64(math.MaxInt64/int64(time.Millisecond)) {
		return 0, fmt.Errorf("%v is not a number of milliseconds >= 0", v)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// Net is a pair of TCP proxies, written for this project, in front of an
// account's queue and table endpoints. Its methods are safe for concurrent
// use and never wait for traffic: a change of faults is a swap of the
// configuration each connection's pumps read, and a connection is ended by
// closing its sockets. Faults of different kinds may overlap: toxics
// stack, and a service refused twice (Stop) opens again only once both are
// undone (Start).
type Net struct {
	// ConnectionString reaches the account through the proxies.
	ConnectionString string

	proxies map[string]*tcpProxy // by service

	mu      sync.Mutex
	refused map[string]int // Stop calls not undone, by service
	state   string         // Refuse/BlackHole/Restore: "", "refused", "blackhole"
	hole    []func()
}

// StartNet starts proxies in front of the endpoints of conn (a connection
// string with QueueEndpoint and TableEndpoint, as Azurite's) on free
// loopback ports. Close stops them.
func StartNet(conn string) (*Net, error) {
	q, tb, err := endpoints(conn)
	if err != nil {
		return nil, err
	}
	n := &Net{proxies: map[string]*tcpProxy{}, refused: map[string]int{}}
	for svc, host := range map[string]string{Queue: q.Host, Table: tb.Host} {
		p, err := startTCP(svc, host)
		if err != nil {
			n.Close()
			return nil, err
		}
		n.proxies[svc] = p
	}
	n.ConnectionString = rewrite(conn, n.proxies[Queue].addr, n.proxies[Table].addr)
	return n, nil
}

// NewNet is StartNet for a test: it fails t on error and closes the
// proxies when the test ends.
func NewNet(t testing.TB, conn string) *Net {
	t.Helper()
	n, err := StartNet(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// Addr returns the address (host:port) the proxy of svc listens on; it
// stays the same across Stop and Start.
func (n *Net) Addr(svc string) string { return n.proxies[svc].addr }

// Close stops the proxies and closes their connections. It does not wait
// for anything.
func (n *Net) Close() {
	for _, p := range n.proxies {
		p.close()
	}
}

func (n *Net) selected(svcs []string) []*tcpProxy {
	var out []*tcpProxy
	for _, svc := range Services {
		if slices.Contains(svcs, svc) && n.proxies[svc] != nil {
			out = append(out, n.proxies[svc])
		}
	}
	return out
}

// AddToxic adds t to the proxies of the given services, for the
// connections open now and those to come, and returns the function that
// removes it again (calling it twice is harmless). An unknown type,
// stream or attribute is an error and adds nothing.
func (n *Net) AddToxic(svcs []string, t Toxic) (remove func(), err error) {
	f, err := parse(t)
	if err != nil {
		return nil, err
	}
	ps := n.selected(svcs)
	for _, p := range ps {
		p.add(f)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, p := range ps {
				p.remove(f)
			}
		})
	}, nil
}

// Stop closes the listeners of the given services' proxies and their open
// connections: new connections are refused, as when the service is down.
// Each Stop is undone by one Start.
func (n *Net) Stop(svcs ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.selected(svcs) {
		n.refused[p.svc]++
		p.stop()
	}
}

// Start undoes one Stop of the given services: a proxy listens again, on
// the same address, once every Stop of it is undone.
func (n *Net) Start(svcs ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, p := range n.selected(svcs) {
		if n.refused[p.svc] > 0 {
			n.refused[p.svc]--
		}
		if n.refused[p.svc] == 0 {
			errs = append(errs, p.start())
		}
	}
	return errors.Join(errs...)
}

// DropConnections closes the given services' open connections (requests in
// flight fail at once) and keeps accepting new ones; a refused service
// stays refused.
func (n *Net) DropConnections(svcs ...string) error {
	for _, p := range n.selected(svcs) {
		p.drop()
	}
	return nil
}

// Heal removes every toxic, undoes every Stop and listens again.
func (n *Net) Heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, p := range n.proxies {
		p.removeAll()
		n.refused[p.svc] = 0
		errs = append(errs, p.start())
	}
	n.state, n.hole = "", nil
	return errors.Join(errs...)
}

// Refuse refuses connections to both services (see Stop) until Restore.
func (n *Net) Refuse(t testing.TB) {
	t.Helper()
	n.Restore(t)
	n.Stop(Services...)
	n.mu.Lock()
	n.state = "refused"
	n.mu.Unlock()
}

// BlackHole makes both services accept connections and forward nothing in
// either direction (a hung endpoint, a black-holed network) until Restore:
// calls hang until their own timeouts.
func (n *Net) BlackHole(t testing.TB) {
	t.Helper()
	n.Restore(t)
	var rms []func()
	for _, dir := range []string{Upstream, Downstream} {
		rm, err := n.AddToxic(Services, Toxic{Type: Timeout, Stream: dir})
		if err != nil {
			t.Fatal(err)
		}
		rms = append(rms, rm)
	}
	n.mu.Lock()
	n.state, n.hole = "blackhole", rms
	n.mu.Unlock()
}

// Restore ends Refuse or BlackHole: the proxies forward again (connections
// held by a black hole are closed).
func (n *Net) Restore(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	state, hole := n.state, n.hole
	n.state, n.hole = "", nil
	n.mu.Unlock()
	switch state {
	case "refused":
		if err := n.Start(Services...); err != nil {
			t.Fatal(err)
		}
	case "blackhole":
		for _, rm := range hole {
			rm()
		}
	}
}

// tcpProxy forwards the connections it accepts on addr to upstream,
// through the faults installed on it.
//
// Locking: p.mu guards the listener, the set of links, the faults and each
// link's drawn faults. It is held only for bookkeeping and for closing
// sockets, which does not block; the pumps that move bytes never take it.
// A link's own lock (l.mu) is taken under p.mu, never the other way.
type tcpProxy struct {
	svc      string
	upstream string
	addr     string

	mu     sync.Mutex
	ln     net.Listener // nil while stopped
	closed bool
	links  map[*link]struct{}
	faults []*fault
}

func startTCP(svc, upstream string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen for the %s service: %w", svc, err)
	}
	p := &tcpProxy{svc: svc, upstream: upstream, addr: ln.Addr().String(), ln: ln, links: map[*link]struct{}{}}
	go p.accept(ln)
	return p, nil
}

// accept serves ln until it is closed.
func (p *tcpProxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // out of descriptors or the like: try again, as net/http does
			continue
		}
		l := newLink(p, c)
		p.mu.Lock()
		if p.ln != ln {
			p.mu.Unlock()
			_ = c.Close() // accepted just as the proxy stopped
			continue
		}
		p.links[l] = struct{}{}
		for _, f := range p.faults {
			l.draw(f)
		}
		l.publish()
		p.mu.Unlock()
		go l.run()
	}
}

// start listens again on the proxy's address (a no-op while listening).
func (p *tcpProxy) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("faultproxy: the %s proxy is closed", p.svc)
	}
	if p.ln != nil {
		return nil
	}
	var ln net.Listener
	var err error
	// The port was ours a moment ago; a bind can still meet the kernel's
	// bookkeeping of the closed listener, so try for a second.
	for try := 0; try < 100; try++ {
		if ln, err = net.Listen("tcp", p.addr); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("faultproxy: listen again for the %s service on %s: %w", p.svc, p.addr, err)
	}
	p.ln = ln
	go p.accept(ln)
	return nil
}

// stop closes the listener and every open connection.
func (p *tcpProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for l := range p.links {
		l.close()
	}
}

// drop closes every open connection.
func (p *tcpProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.close()
	}
}

func (p *tcpProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.stop()
	p.removeAll()
}

// add installs f on the open connections and those to come.
func (p *tcpProxy) add(f *fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = append(p.faults, f)
	for l := range p.links {
		l.draw(f)
		l.publish()
	}
}

// remove uninstalls f; the connections a Timeout held are closed.
func (p *tcpProxy) remove(f *fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.removeLocked(f)
}

func (p *tcpProxy) removeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.faults) > 0 {
		p.removeLocked(p.faults[0])
	}
}

func (p *tcpProxy) removeLocked(f *fault) {
	i := slices.Index(p.faults, f)
	if i < 0 {
		return
	}
	p.faults = slices.Delete(p.faults, i, i+1)
	for l := range p.links {
		timer, ok := l.active[f]
		if !ok {
			continue
		}
		delete(l.active, f)
		if timer != nil {
			timer.Stop()
		}
		if f.kind == Timeout {
			l.close() // as toxiproxy: what a timeout swallowed must not arrive late
			continue
		}
		l.publish()
	}
}

// forget removes an ended link.
func (p *tcpProxy) forget(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.links, l)
	for f, timer := range l.active {
		if timer != nil {
			timer.Stop()
		}
		delete(l.active, f)
	}
}

// streamState is what the pump of one stream of a link reads for each
// chunk: an immutable value, replaced (never changed) when the faults
// change, and changed is closed then to wake a pump that waits.
type streamState struct {
	drop       bool          // a Timeout applies
	reset      bool          // a ResetPeer applies
	resetAfter time.Duration // the shortest of their timeouts
	latency    []*fault
	changed    chan struct{}
}

// delay draws the latency of one chunk.
func (s *streamState) delay() time.Duration {
	var d time.Duration
	for _, f := range s.latency {
		d += f.latency
		if f.jitter > 0 {
			d += time.Duration(rand.Int64N(int64(2*f.jitter))) - f.jitter
		}
	}
	return max(d, 0)
}

// link is one proxied connection: the client's and the one to the
// service, and a pump per stream.
type link struct {
	p      *tcpProxy
	client net.Conn
	ctx    context.Context // ends when the link closes (the dial to the service)
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	state  [2]atomic.Pointer[streamState]

	active map[*fault]*time.Timer // faults drawn to apply, guarded by p.mu; a Timeout's closing timer

	mu       sync.Mutex // guards server and closed
	server   net.Conn
	isClosed bool
}

func newLink(p *tcpProxy, c net.Conn) *link {
	ctx, cancel := context.WithCancel(context.Background())
	l := &link{p: p, client: c, ctx: ctx, cancel: cancel, done: make(chan struct{}), active: map[*fault]*time.Timer{}}
	for i := range l.state {
		l.state[i].Store(&streamState{changed: make(chan struct{})})
	}
	return l
}

// draw decides, with the fault's toxicity, whether f applies to the link
// (p.mu held).
func (l *link) draw(f *fault) {
	if f.toxicity < 1 && rand.Float32() >= f.toxicity {
		return
	}
	var timer *time.Timer
	if f.kind == Timeout && f.timeout > 0 {
		timer = time.AfterFunc(f.timeout, l.close)
	}
	l.active[f] = timer
}

// publish replaces the state of both streams with one built from the
// faults that apply now and wakes the pumps (p.mu held).
func (l *link) publish() {
	var next [2]*streamState
	for i := range next {
		next[i] = &streamState{changed: make(chan struct{})}
	}
	for f := range l.active {
		s := next[f.stream]
		switch f.kind {
		case Latency:
			s.latency = append(s.latency, f)
		case Timeout:
			s.drop = true
		case ResetPeer:
			if !s.reset || f.timeout < s.resetAfter {
				s.resetAfter = f.timeout
			}
			s.reset = true
		}
	}
	for i := range next {
		close(l.state[i].Swap(next[i]).changed)
	}
}

// run connects to the service and pumps both streams until either ends,
// then closes both connections.
func (l *link) run() {
	defer l.p.forget(l)
	defer l.close()
	var d net.Dialer
	server, err := d.DialContext(l.ctx, "tcp", l.p.upstream)
	if err != nil {
		return // the client sees its connection closed, as from a service that is down
	}
	l.mu.Lock()
	if l.isClosed {
		l.mu.Unlock()
		_ = server.Close()
		return
	}
	l.server = server
	l.mu.Unlock()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		l.pump(up, l.client, server)
		l.close()
	}()
	l.pump(down, server, l.client)
	l.close()
	<-finished // closed sockets end the pump at once
}

// pump moves one stream's chunks from src to dst through the faults.
func (l *link) pump(stream int, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.forward(stream, dst, buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}

// forward applies the stream's faults to one chunk read now and writes it
// on unless a fault swallows it. It re-reads the faults whenever they
// change while it waits. It reports whether the stream goes on.
func (l *link) forward(stream int, dst net.Conn, chunk []byte) bool {
	read := time.Now()
	var drawn *streamState
	var delay time.Duration
	for {
		s := l.state[stream].Load()
		var wait time.Duration
		switch {
		case s.drop:
			return true
		case s.reset:
			if wait = time.Until(read.Add(s.resetAfter)); wait <= 0 {
				l.reset()
				return false
			}
		default:
			if s != drawn {
				drawn, delay = s, s.delay()
			}
			if wait = time.Until(read.Add(delay)); wait <= 0 {
				_, err := dst.Write(chunk)
				return err == nil
			}
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-s.changed:
			timer.Stop()
		case <-l.done:
			timer.Stop()
			return false
		}
	}
}

// close closes both connections; the pumps blocked on them return. It
// never waits.
func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		l.cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		l.isClosed = true
		_ = l.client.Close()
		if l.server != nil {
			_ = l.server.Close()
		}
	})
}

// reset closes both connections with a TCP reset.
func (l *link) reset() {
	l.mu.Lock()
	for _, c := range []net.Conn{l.client, l.server} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	l.mu.Unlock()
	l.close()
}
