package doorbell

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Peer is a processor that can be rung: its Bell's address and the
// logical queues it polls.
type Peer struct {
	// Addr is its Bell's address (host:port).
	Addr string
	// Queues are the logical queues it polls.
	Queues []string
}

// PeerSource lists the processors of the deployment (their heartbeat
// rows: one storage query).
type PeerSource func(ctx context.Context) ([]Peer, error)

// Defaults of RingerOptions.
const (
	// DefaultRefresh is RingerOptions.Refresh's default: the peer list
	// is read again when it is older than a minute and a ring needs it.
	DefaultRefresh = time.Minute
	// DefaultThrottle is RingerOptions.Throttle's default: 20 ms.
	DefaultThrottle = 20 * time.Millisecond
	// DefaultAckTimeout is RingerOptions.AckTimeout's default: 1 s.
	DefaultAckTimeout = time.Second
	// DefaultRetry is RingerOptions.Retry's default: 250 ms.
	DefaultRetry = 250 * time.Millisecond
	// IdleClose: a Ringer that sent nothing for this long closes its
	// socket (and its ack reader), and opens one again at its next wake:
	// one that is dropped without Close holds nothing for long.
	IdleClose = time.Minute
)

// RingerOptions tunes a Ringer; zero fields take the defaults.
type RingerOptions struct {
	// Refresh is how old the peer list may be before a ring reads it
	// again (in the background: the ring uses the list it has). The
	// list is read only when a ring needs it, so a process that does not
	// ring reads nothing. Default DefaultRefresh.
	Refresh time.Duration
	// Throttle bounds the wakes of one name to one peer: one at once,
	// then at most one per Throttle (the last of those that came in
	// between is sent at its end). Default DefaultThrottle.
	Throttle time.Duration
	// AckTimeout: a peer that acked none of its last two or more wakes,
	// the first of them sent over AckTimeout ago, is unreachable.
	// Default DefaultAckTimeout.
	AckTimeout time.Duration
	// Retry: a wake Ring sent to one peer that is not acked within Retry
	// is sent to the next peer of the queue (each peer once). Default
	// DefaultRetry.
	Retry time.Duration
	// Self is this process's own Bell's address, never rung (its
	// processor is woken in-process). Default "".
	Self string
	// Logf, if set, receives a line when the peer list cannot be read.
	Logf func(format string, args ...any)
}

// PeerStatus is what a Ringer knows of one peer's reachability.
type PeerStatus struct {
	// Addr is the peer's Bell's address.
	Addr string
	// LastRing and LastAck are when a wake was last sent to it and when it
	// last acked one (zero: never).
	LastRing, LastAck time.Time
	// Unreachable is true when its last wakes (two or more, the first
	// over AckTimeout ago) got no ack.
	Unreachable bool
}

// Ringer sends wakes to the processors of a queue: the sending side, in
// any process that makes work due. It is safe for concurrent use.
type Ringer struct {
	seal    sealer
	sender  uint64
	counter atomic.Uint64
	src     PeerSource
	opts    RingerOptions
	now     func() time.Time

	mu       sync.Mutex
	peers    []Peer
	loadedAt time.Time
	loading  chan struct{}  // closed when the load in progress ends
	turn     map[string]int // logical queue → the next peer Ring tries
	slots    map[slotKey]*slot
	status   map[string]*peerState
	pending  map[uint64]*sent // wakes not acked yet, by counter
	closed   bool
	conn     *net.UDPConn  // nil while idle (IdleClose)
	connDone chan struct{} // closed when conn's ack reader ends
	lastSend time.Time
	idle     *time.Timer
	nsent    atomic.Uint64 // datagrams sent
}

type slotKey struct {
	addr, name string
	at         int64 // due time in 100 ms steps (0: now)
	kind       byte  // kindWake, kindControl or kindPermit: one kind does not replace another
}

// slot throttles the wakes of one key.
type slot struct {
	sent     time.Time // the last wake sent
	trailing bool      // one is scheduled at sent + Throttle
	wake     Wake
	to       *net.UDPAddr
	addr     string
	retry    *retry // the trailing wake's, when Ring sent it
}

// retry is what a wake Ring sent to one peer needs to go to the next
// when it is not acked.
type retry struct {
	logical string
	tried   []string
}

// sent is a wake not acked yet.
type sent struct {
	addr  string
	wake  Wake
	retry *retry // nil: no retry (RingAll)
}

type peerState struct {
	lastRing, lastAck time.Time
	unacked           int
	firstUnacked      time.Time
}

// NewRinger returns a Ringer with the deployment's key, listing peers
// with src. Close it when done.
func NewRinger(key []byte, src PeerSource, opts RingerOptions) (*Ringer, error) {
	return newRingerWith(key, src, opts, time.Now)
}

// newRingerWith is NewRinger with a clock.
func newRingerWith(key []byte, src PeerSource, opts RingerOptions, now func() time.Time) (*Ringer, error) {
	if len(key) == 0 {
		return nil, errors.New("doorbell: a ringer needs the deployment's key")
	}
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.Throttle <= 0 {
		opts.Throttle = DefaultThrottle
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	if opts.Retry <= 0 {
		opts.Retry = DefaultRetry
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	r := &Ringer{seal: sealer{key: key}, sender: binary.BigEndian.Uint64(id[:]), src: src, opts: opts, now: now,
		turn: map[string]int{}, slots: map[slotKey]*slot{}, status: map[string]*peerState{}, pending: map[uint64]*sent{}}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.openLocked(); err != nil {
		return nil, err
	}
	return r, nil
}

// openLocked opens the socket wakes are sent from and acks read on, and
// its reader. Caller holds r.mu.
func (r *Ringer) openLocked() error {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{})
	if err != nil {
		return err
	}
	r.conn, r.connDone = conn, make(chan struct{})
	go r.readAcks(conn, r.connDone)
	r.lastSend = r.now()
	r.idle = time.AfterFunc(IdleClose, r.closeIfIdle)
	return nil
}

// closeIfIdle closes the socket when nothing was sent for IdleClose.
func (r *Ringer) closeIfIdle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil || r.closed {
		return
	}
	if left := IdleClose - r.now().Sub(r.lastSend); left > 0 {
		r.idle.Reset(left)
		return
	}
	_ = r.conn.Close()
	r.conn = nil
}

// Close stops the Ringer: wakes still throttled are not sent.
func (r *Ringer) Close() error {
	r.mu.Lock()
	r.closed = true
	conn, done := r.conn, r.connDone
	r.conn = nil
	if r.idle != nil {
		r.idle.Stop()
	}
	r.mu.Unlock()
	if conn == nil {
		return nil
	}
	err := conn.Close()
	<-done
	return err
}

// Ring wakes one peer that polls logical queue (never Self) with w: the
// peers in turn, those found unreachable last; when the peer does not ack
// within Retry, the next one (each peer once). One wake per issue keeps a
// command at one dequeue, as without a doorbell; a processor that has more
// work than it can start rings the others itself (RingAll). The wake goes
// at once, or at the end of the throttle of w's name to that peer. The
// first ring of a Ringer reads the peer list (within ctx); later ones use
// the list they have and read it again in the background when it is older
// than Refresh. A datagram sent at once is sent before Ring returns (a
// short-lived process may exit right after). It reports whether a peer
// was rung (false: none polls the queue).
func (r *Ringer) Ring(ctx context.Context, logical string, w Wake) bool {
	peers := r.peersOf(ctx, logical)
	if len(peers) == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ringNext(logical, w, peers, &retry{logical: logical})
	return true
}

// RingAll wakes every peer that polls logical queue (never Self) with w,
// as Ring does one, and returns how many it rang.
func (r *Ringer) RingAll(ctx context.Context, logical string, w Wake) int {
	peers := r.peersOf(ctx, logical)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range peers {
		r.ringPeer(p.Addr, w, nil)
	}
	return len(peers)
}

// ringNext rings the next peer in turn that rt has not tried, preferring
// reachable ones. Caller holds r.mu.
func (r *Ringer) ringNext(logical string, w Wake, peers []Peer, rt *retry) {
	start := r.turn[logical]
	pick := -1
	for pass := 0; pass < 2 && pick < 0; pass++ {
		for i := range peers {
			j := (start + i) % len(peers)
			addr := peers[j].Addr
			if slices.Contains(rt.tried, addr) {
				continue
			}
			if ps := r.status[addr]; pass == 0 && ps != nil && r.statusOf(addr, ps).Unreachable {
				continue
			}
			pick = j
			break
		}
	}
	if pick < 0 {
		return
	}
	r.turn[logical] = pick + 1
	rt.tried = append(rt.tried, peers[pick].Addr)
	r.ringPeer(peers[pick].Addr, w, rt)
}

// Sent returns how many wakes the Ringer has sent.
func (r *Ringer) Sent() uint64 { return r.nsent.Load() }

// Peers returns the peer list as last read (nil before the first ring).
func (r *Ringer) Peers() []Peer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.peers)
}

// Status returns what the Ringer knows of the peer at addr (ok false: it
// never rang it).
func (r *Ringer) Status(addr string) (PeerStatus, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ps, ok := r.status[addr]
	if !ok {
		return PeerStatus{Addr: addr}, false
	}
	return r.statusOf(addr, ps), true
}

// Statuses returns the status of every peer the Ringer rang.
func (r *Ringer) Statuses() []PeerStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]PeerStatus, 0, len(r.status))
	for addr, ps := range r.status {
		out = append(out, r.statusOf(addr, ps))
	}
	slices.SortFunc(out, func(a, b PeerStatus) int {
		switch {
		case a.Addr < b.Addr:
			return -1
		case a.Addr > b.Addr:
			return 1
		}
		return 0
	})
	return out
}

func (r *Ringer) statusOf(addr string, ps *peerState) PeerStatus {
	return PeerStatus{Addr: addr, LastRing: ps.lastRing, LastAck: ps.lastAck,
		Unreachable: ps.unacked >= 2 && r.now().Sub(ps.firstUnacked) > r.opts.AckTimeout}
}

// peersOf returns the peers that poll logical (but Self), reading the
// list first when the Ringer has none, and in the background when it is
// stale.
func (r *Ringer) peersOf(ctx context.Context, logical string) []Peer {
	r.mu.Lock()
	if r.loadedAt.IsZero() {
		wait := r.startLoad()
		r.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		r.mu.Lock()
	} else if r.now().Sub(r.loadedAt) > r.opts.Refresh {
		r.startLoad()
	}
	defer r.mu.Unlock()
	return r.peersLocked(logical)
}

// peersLocked returns the peers of logical as listed. Caller holds r.mu.
func (r *Ringer) peersLocked(logical string) []Peer {
	var out []Peer
	for _, p := range r.peers {
		if p.Addr != "" && p.Addr != r.opts.Self && slices.Contains(p.Queues, logical) {
			out = append(out, p)
		}
	}
	return out
}

// startLoad starts reading the peer list unless a read is in progress,
// and returns the channel closed when it ends. Caller holds r.mu.
func (r *Ringer) startLoad() chan struct{} {
	if r.loading != nil {
		return r.loading
	}
	ch := make(chan struct{})
	r.loading = ch
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		peers, err := r.src(ctx)
		cancel()
		r.mu.Lock()
		if err == nil {
			r.peers = peers
		} else if r.opts.Logf != nil {
			r.opts.Logf("cmdq doorbell: the processors' list could not be read (%v); wakes go to the processors known, and processors still poll", err)
		}
		// A failed read is not retried before Refresh either: the
		// processors' poll bound holds without wakes.
		r.loadedAt = r.now()
		r.loading = nil
		r.mu.Unlock()
		close(ch)
	}()
	return ch
}

// ringPeer sends w to the Bell at addr now, or once its name's throttle
// to that peer ends; rt (nil for RingAll) lets an unacked wake go to the
// next peer. Caller holds r.mu.
func (r *Ringer) ringPeer(addr string, w Wake, rt *retry) {
	if r.closed {
		return
	}
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return
	}
	k := slotKey{addr: addr, name: w.Name, kind: kindWake}
	switch {
	case w.Control:
		k.kind = kindControl
	case w.Permit:
		k.kind = kindPermit
	}
	if !w.At.IsZero() {
		k.at = w.At.UnixMilli()/100 + 1
	}
	now := r.now()
	s := r.slots[k]
	if s == nil {
		if len(r.slots) > 10000 {
			r.sweepSlots(now)
		}
		s = &slot{}
		r.slots[k] = s
	}
	s.wake, s.to, s.addr = w, to, addr
	if wait := s.sent.Add(r.opts.Throttle).Sub(now); wait > 0 {
		s.retry = rt
		if !s.trailing {
			s.trailing = true
			time.AfterFunc(wait, func() { r.trail(s) })
		}
		return
	}
	s.sent = now
	r.send(addr, to, w, rt, now)
}

// trail sends a slot's throttled wake.
func (r *Ringer) trail(s *slot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.trailing = false
	if r.closed {
		return
	}
	now := r.now()
	s.sent = now
	r.send(s.addr, s.to, s.wake, s.retry, now)
	s.retry = nil
}

// sweepSlots forgets the slots idle for over a second. Caller holds r.mu.
func (r *Ringer) sweepSlots(now time.Time) {
	for k, s := range r.slots {
		if !s.trailing && now.Sub(s.sent) > time.Second {
			delete(r.slots, k)
		}
	}
}

// send sends one wake; with rt, one not acked within Retry goes to the
// next peer. Caller holds r.mu.
func (r *Ringer) send(addr string, to *net.UDPAddr, w Wake, rt *retry, now time.Time) {
	c := r.counter.Add(1)
	b, err := r.seal.encodeWake(header{sender: r.sender, counter: c}, now, w)
	if err != nil {
		return
	}
	ps := r.status[addr]
	if ps == nil {
		ps = &peerState{}
		r.status[addr] = ps
	}
	ps.lastRing = now
	if ps.unacked == 0 {
		ps.firstUnacked = now
	}
	ps.unacked++
	if len(r.pending) > 10000 {
		clear(r.pending) // acks of these are then ignored: reachability is a hint too
	}
	r.pending[c] = &sent{addr: addr, wake: w, retry: rt}
	if rt != nil {
		time.AfterFunc(r.opts.Retry, func() { r.unacked(c) })
	}
	if r.conn == nil {
		if err := r.openLocked(); err != nil {
			return
		}
	}
	r.lastSend = now
	r.nsent.Add(1)
	_, _ = r.conn.WriteToUDP(b, to)
}

// unacked sends wake c to the next peer when it is still not acked.
func (r *Ringer) unacked(c uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending[c]
	if p == nil || p.retry == nil || r.closed {
		return
	}
	rt := p.retry
	p.retry = nil // handed on once
	r.ringNext(rt.logical, p.wake, r.peersLocked(rt.logical), rt)
}

func (r *Ringer) readAcks(conn *net.UDPConn, done chan struct{}) {
	defer close(done)
	buf := make([]byte, 128)
	for {
		n, _, err := conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		h, err := r.seal.decodeAck(buf[:n])
		if err != nil || h.sender != r.sender {
			continue
		}
		r.mu.Lock()
		if p, ok := r.pending[h.counter]; ok {
			delete(r.pending, h.counter)
			if ps := r.status[p.addr]; ps != nil {
				ps.lastAck, ps.unacked = r.now(), 0
			}
		}
		r.mu.Unlock()
	}
}
