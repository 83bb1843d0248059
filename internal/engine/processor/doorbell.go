package processor

import (
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/doorbell"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// The doorbell (docs/processor.md, "Wake-ups"): while a run takes work,
// the processor listens for wake-ups from other processes (doorbell.Bell)
// and publishes the address in its heartbeat row, so that a process that
// makes work due on one of its queues wakes its poller at once instead of
// leaving it to its poll backoff. A wake does what an in-process one does
// (Notify, WakeAt); a control wake (a pause or resume elsewhere) makes the
// processor read its queues' control rows again. And a processor that has
// more work than it can start rings its peers of that queue (Doorbell.Ring).
// Nothing here makes a storage call.

// Doorbell configures the processor's side of the wake-ups between
// processes (Config.Doorbell).
type Doorbell struct {
	// Key is the deployment's key (doorbell.Key). Nil: no listener (the
	// embedded store, the doorbell off, no secret).
	Key []byte
	// Listen is the UDP address each run listens on (host:port; port 0
	// picks one). Default "127.0.0.1:0".
	Listen string
	// Advertise is the address published in the heartbeat row. Default:
	// the address listened on, an unspecified host (0.0.0.0, ::) replaced
	// by this machine's first non-loopback address.
	Advertise string
	// Ring, if set, rings every other processor of logical queue: the
	// processor calls it when it dequeued a full batch while its handler
	// slots are all taken (at most once per ringEvery per queue).
	Ring func(logical string)
	// RingPermit, if set, sends a permit wake to every other processor of
	// logical queue: the processor calls it when it gave back a permit of
	// a globally limited type (permits.go) that no message here waits for.
	RingPermit func(logical string)
}

// ringEvery bounds how often a processor rings its peers of one queue when
// it has more work than it can start.
const ringEvery = 250 * time.Millisecond

// controlWakeEvery bounds the control-row reads control wakes cause.
const controlWakeEvery = time.Second

// bellState is the doorbell of the running session.
type bellState struct {
	mu      sync.Mutex
	addr    string               // advertised, while a run listens
	rang    map[string]time.Time // logical queue → when its peers were last rung
	control time.Time            // the last control wake acted on
}

// WakeAddr returns the address the running processor's doorbell is
// advertised at ("" when it listens on none).
func (p *Processor) WakeAddr() string {
	p.bell.mu.Lock()
	defer p.bell.mu.Unlock()
	return p.bell.addr
}

// openBell starts the session's doorbell, if it has a key, and returns
// what closes it. A doorbell that cannot listen is logged: the processor
// then finds work by polling only.
func (p *Processor) openBell() func() {
	d := p.cfg.Doorbell
	if len(d.Key) == 0 {
		return func() {}
	}
	listen := d.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	b, err := doorbell.Listen(listen, d.Key, p.woken, doorbell.BellOptions{Observe: p.heard})
	if err != nil {
		p.cfg.Logger.Warn().Err(err).Str("listen", listen).Msg("cmdq processor: the doorbell cannot listen; other processes' wake-ups are not heard, and the poll bound holds (MaxPollInterval)")
		return func() {}
	}
	addr := Advertised(b.Addr(), d.Advertise)
	p.bell.mu.Lock()
	p.bell.addr = addr
	p.bell.mu.Unlock()
	p.cfg.Logger.Info().Str("listen", b.Addr().String()).Str("advertise", addr).Msg("cmdq processor: listening for wake-ups from other processes")
	return func() {
		p.bell.mu.Lock()
		p.bell.addr = ""
		p.bell.mu.Unlock()
		_ = b.Close()
	}
}

// Advertised returns the address to publish for a doorbell bound to
// bound: adv when set, else bound, its unspecified host replaced by this
// machine's first non-loopback address (IPv4 first).
func Advertised(bound *net.UDPAddr, adv string) string {
	if adv != "" {
		return adv
	}
	if !bound.IP.IsUnspecified() {
		return bound.String()
	}
	addrs, _ := net.InterfaceAddrs()
	var v6 net.IP
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
			continue
		}
		if n.IP.To4() != nil {
			return net.JoinHostPort(n.IP.String(), strconv.Itoa(bound.Port))
		}
		if v6 == nil {
			v6 = n.IP
		}
	}
	if v6 != nil {
		return net.JoinHostPort(v6.String(), strconv.Itoa(bound.Port))
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(bound.Port))
}

// woken handles one accepted wake: it does what an in-process wake does.
func (p *Processor) woken(w doorbell.Wake) {
	qr := p.byName[w.Name]
	if qr == nil {
		return // a queue this processor does not poll
	}
	switch {
	case w.Control:
		p.controlWoken(qr)
	case w.Permit:
		p.permitWoken(qr.name)
	case !w.At.IsZero():
		p.WakeAt(w.Name, w.At)
	default:
		p.Notify(w.Name)
	}
}

// controlWoken acts on a control wake of qr (its queue paused or resumed
// elsewhere): a paused poller reads the control rows at once, and any
// other start reads them first, at most once per controlWakeEvery.
func (p *Processor) controlWoken(qr *queueRunner) {
	p.bell.mu.Lock()
	if time.Since(p.bell.control) < controlWakeEvery {
		p.bell.mu.Unlock()
		return
	}
	p.bell.control = time.Now()
	p.bell.mu.Unlock()
	p.ctl.mu.Lock()
	p.ctl.sent = time.Time{} // stale: the next start reads them
	p.ctl.mu.Unlock()
	select {
	case qr.ctlWake <- struct{}{}:
	default:
	}
	p.Notify(qr.name)
}

// heard reports each datagram the doorbell got to the observers.
func (p *Processor) heard(r doorbell.Result, w doorbell.Wake) {
	o := model.Observation{Kind: model.ObservedWake, Reason: string(r)}
	if r != doorbell.Forged && r != doorbell.Limited {
		o.Queue = w.Name
	}
	p.emit(o)
}

// ringPeers rings the other processors of qr when its peers were not rung
// within ringEvery: this one dequeued a full batch and has no free slot.
func (p *Processor) ringPeers(qr *queueRunner) {
	if p.cfg.Doorbell.Ring == nil {
		return
	}
	p.bell.mu.Lock()
	now := time.Now()
	if p.bell.rang == nil {
		p.bell.rang = map[string]time.Time{}
	}
	if now.Sub(p.bell.rang[qr.name]) < ringEvery {
		p.bell.mu.Unlock()
		return
	}
	p.bell.rang[qr.name] = now
	p.bell.mu.Unlock()
	p.cfg.Doorbell.Ring(qr.name)
}

// saturated reports whether every handler slot is taken.
func (p *Processor) saturated() bool {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	return p.busy >= p.cfg.Concurrency
}

// Polls reports whether the processor polls the queue of wake name name (a
// logical queue, or one shard's storage name).
func (p *Processor) Polls(name string) bool { return p.byName[name] != nil }

// Saturated reports whether every handler slot is taken: a message woken
// here would wait for one.
func (p *Processor) Saturated() bool { return p.saturated() }
