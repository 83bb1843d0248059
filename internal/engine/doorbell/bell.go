package doorbell

import (
	"container/list"
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// Result says what a Bell did with one datagram.
type Result string

// The results of a received datagram.
const (
	// Accepted: a wake of this deployment, new: handled and acked.
	Accepted Result = "accepted"
	// Forged: not a datagram of this deployment (layout or MAC wrong: a
	// stranger, another deployment or prefix, a corrupted packet).
	Forged Result = "forged"
	// Replayed: a sender's counter that is not above the last one seen
	// from it (a replay, a duplicate or a reordered datagram).
	Replayed Result = "replayed"
	// Stale: sent further from this machine's clock than
	// BellOptions.Window.
	Stale Result = "stale"
	// Limited: over BellOptions.MaxRate, dropped unread.
	Limited Result = "limited"
)

// Defaults of BellOptions.
const (
	// DefaultWindow is BellOptions.Window's default: 15 minutes, wider
	// than any clock skew cmdq tolerates between machines.
	DefaultWindow = 15 * time.Minute
	// DefaultMaxRate is BellOptions.MaxRate's default: 2,000 datagrams a
	// second.
	DefaultMaxRate = 2000
	// DefaultSenders is BellOptions.Senders' default: 4,096.
	DefaultSenders = 4096
)

// BellOptions tunes a Bell; zero fields take the defaults.
type BellOptions struct {
	// Window is how far a wake's send time may be from this machine's
	// clock (either way); a wake outside is Stale. Default DefaultWindow.
	Window time.Duration
	// MaxRate bounds the datagrams read and checked per second; more are
	// Limited (dropped unread). Default DefaultMaxRate.
	MaxRate int
	// Senders is how many senders' last counters are kept (the least
	// recently heard of is forgotten first). Default DefaultSenders.
	Senders int
	// Observe, if set, is told the result of every datagram (and the wake,
	// for Accepted and the others whose MAC held). It runs on the
	// listener's goroutine: keep it fast.
	Observe func(r Result, w Wake)
}

// Bell listens for wakes on one UDP socket: a processor's side.
type Bell struct {
	conn   *net.UDPConn
	seal   sealer
	handle func(Wake)
	opts   BellOptions
	now    func() time.Time

	seen    map[uint64]*list.Element // sender → its element in order
	order   *list.List               // of *senderSeen, most recent first
	tokens  float64
	tokenAt time.Time

	counts [5]atomic.Uint64
	done   chan struct{}
}

type senderSeen struct {
	sender, counter uint64
}

// Listen opens a Bell on addr (host:port; port 0 picks one) with the
// deployment's key. handle is called for every accepted wake, on the
// listener's goroutine: it must not block (a processor's Notify does
// not).
func Listen(addr string, key []byte, handle func(Wake), opts BellOptions) (*Bell, error) {
	return listenWith(addr, key, handle, opts, time.Now)
}

// listenWith is Listen with a clock.
func listenWith(addr string, key []byte, handle func(Wake), opts BellOptions, now func() time.Time) (*Bell, error) {
	if len(key) == 0 {
		return nil, errors.New("doorbell: a bell needs the deployment's key")
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, err
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.MaxRate <= 0 {
		opts.MaxRate = DefaultMaxRate
	}
	if opts.Senders <= 0 {
		opts.Senders = DefaultSenders
	}
	b := &Bell{conn: conn, seal: sealer{key: key}, handle: handle, opts: opts, now: now,
		seen: map[uint64]*list.Element{}, order: list.New(), tokens: float64(opts.MaxRate) / 10, done: make(chan struct{})}
	b.tokenAt = b.now()
	go b.serve()
	return b, nil
}

// Addr returns the address the Bell listens on.
func (b *Bell) Addr() *net.UDPAddr { return b.conn.LocalAddr().(*net.UDPAddr) }

// Close stops the Bell and waits for its listener to end.
func (b *Bell) Close() error {
	err := b.conn.Close()
	<-b.done
	return err
}

// Counts returns how many datagrams had each result so far.
func (b *Bell) Counts() map[Result]uint64 {
	out := map[Result]uint64{}
	for i, r := range results {
		out[r] = b.counts[i].Load()
	}
	return out
}

var results = [...]Result{Accepted, Forged, Replayed, Stale, Limited}

func (b *Bell) count(r Result, w Wake) {
	for i, x := range results {
		if x == r {
			b.counts[i].Add(1)
		}
	}
	if b.opts.Observe != nil {
		b.opts.Observe(r, w)
	}
}

func (b *Bell) serve() {
	defer close(b.done)
	buf := make([]byte, 512)
	for {
		n, from, err := b.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient read error (an ICMP error on some systems)
		}
		if !b.take() {
			b.count(Limited, Wake{})
			continue
		}
		b.receive(buf[:n], from)
	}
}

// take spends one token of the rate limit, refilled at MaxRate a second
// up to a tenth of a second's worth.
func (b *Bell) take() bool {
	now := b.now()
	rate := float64(b.opts.MaxRate)
	b.tokens = min(b.tokens+max(now.Sub(b.tokenAt), 0).Seconds()*rate, rate/10)
	b.tokenAt = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (b *Bell) receive(d []byte, from *net.UDPAddr) {
	h, sent, w, err := b.seal.decodeWake(d)
	if err != nil {
		b.count(Forged, Wake{})
		return
	}
	if skew := b.now().Sub(sent); skew > b.opts.Window || skew < -b.opts.Window {
		b.count(Stale, w)
		return
	}
	if !b.fresh(h) {
		b.count(Replayed, w)
		return
	}
	b.count(Accepted, w)
	b.handle(w)
	_, _ = b.conn.WriteToUDP(b.seal.encodeAck(h), from)
}

// fresh records h's counter and reports whether it is above the last one
// seen from its sender.
func (b *Bell) fresh(h header) bool {
	if e, ok := b.seen[h.sender]; ok {
		s := e.Value.(*senderSeen)
		if h.counter <= s.counter {
			return false
		}
		s.counter = h.counter
		b.order.MoveToFront(e)
		return true
	}
	b.seen[h.sender] = b.order.PushFront(&senderSeen{sender: h.sender, counter: h.counter})
	if b.order.Len() > b.opts.Senders {
		last := b.order.Back()
		b.order.Remove(last)
		delete(b.seen, last.Value.(*senderSeen).sender)
	}
	return true
}
