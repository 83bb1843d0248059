package cmdq

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/doorbell"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/storage"
)

// The Client's side of the wake-ups between processes (Config.Doorbell;
// docs/processor.md, "Wake-ups"): what makes work due on a queue here
// (an issue, a requeue, a run-now, a scheduled command's enqueue, a
// periodic tick) wakes this Client's processor in process, as before, and,
// when this process has no processor on that queue or its processor has
// no free slot, rings one processor of the queue in another process. A
// pause or resume rings them all. The processors are those of the
// heartbeat rows (one query, at most once a minute, read only while this
// Client rings); its own processor listens while it runs (processor's
// doorbell.go).

// beatsTTL is how old the heartbeat rows this Client keeps may be before a
// ring, or a status that says why a command waits, reads them again (in
// the background: the stale rows serve meanwhile). One query a minute at
// most: 60 an hour.
const beatsTTL = time.Minute

// bell is the Client's doorbell state.
type bell struct {
	key []byte // the deployment's key; nil: no wake-ups between processes

	once   sync.Once
	ringer atomic.Pointer[doorbell.Ringer] // made on first use (theRinger)

	mu      sync.Mutex
	beats   []shared.Beat
	readAt  time.Time     // when beats were read (zero: never)
	reading chan struct{} // closed when the read in progress ends
}

// bellKey returns the deployment's doorbell key for cfg on st: nil when
// the doorbell is off, the store is the process's own (the embedded
// store), or there is no secret (logged).
func bellKey(st storage.Store, cfg Config) []byte {
	if cfg.Doorbell.Off || storage.IsExclusive(st) {
		return nil
	}
	secret := cfg.Doorbell.Secret
	if len(secret) == 0 {
		secret = storage.SharedSecret(st)
	}
	if len(secret) == 0 {
		cfg.Logger.Warn().Msg("cmdq: no secret for wake-ups between processes (the store has no shared key, and Config.Doorbell.Secret is empty): " +
			"commands issued here start on other processes' processors at their next poll; give every process the same Doorbell.Secret (cmdq --doorbell-secret)")
		return nil
	}
	return doorbell.Key(secret, cfg.Prefix)
}

// processorDoorbell is the processor's doorbell configuration.
func (c *Client) processorDoorbell() processor.Doorbell {
	if c.bell.key == nil {
		return processor.Doorbell{}
	}
	return processor.Doorbell{Key: c.bell.key, Listen: c.cfg.Doorbell.Listen, Advertise: c.cfg.Doorbell.Advertise,
		Ring:       func(logical string) { c.ring(logical, doorbell.Wake{Name: logical}, true) },
		RingPermit: func(logical string) { c.ring(logical, doorbell.Wake{Name: logical, Permit: true}, true) }}
}

// theRinger returns the Client's Ringer, made on first use (nil without a
// key, or when it cannot open a socket: logged).
func (c *Client) theRinger() *doorbell.Ringer {
	if c.bell.key == nil {
		return nil
	}
	c.bell.once.Do(func() {
		r, err := doorbell.NewRinger(c.bell.key, c.peers, doorbell.RingerOptions{
			Refresh: time.Second, // the heartbeat rows have their own minute (beatsTTL)
			Logf: func(format string, args ...any) {
				c.cfg.Logger.Warn().Msgf(format, args...)
			}})
		if err != nil {
			c.cfg.Logger.Warn().Err(err).Msg("cmdq: wake-ups between processes cannot be sent; other processes' processors find commands issued here at their next poll")
			return
		}
		c.bell.ringer.Store(r)
	})
	return c.bell.ringer.Load()
}

// ring rings the processors of the queue of wake name w.Name (a logical
// queue, or one shard's storage name) in other processes: one in turn, or
// every one (all).
func (c *Client) ring(logical string, w doorbell.Wake, all bool) {
	r := c.theRinger()
	if r == nil {
		return
	}
	// The first ring waits for the processors' list (one query): a short-
	// lived process (cmdq send) may exit right after its issue.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rang := false
	if all {
		rang = r.RingAll(ctx, logical, w) > 0
	} else {
		rang = r.Ring(ctx, logical, w)
	}
	if rang {
		c.observe(model.Observation{Kind: model.ObservedRing, Queue: logical})
	}
}

// ringFor rings for a message put on a queue (wake name name, due at at;
// zero: now), unless this Client's processor polls that queue and has a
// free slot: it takes the message itself, woken in process.
func (c *Client) ringFor(name string, at time.Time) {
	if c.bell.key == nil {
		return
	}
	if p := c.procLive.Load(); p != nil && p.Polls(name) && !p.Saturated() {
		return
	}
	c.ring(c.logicalOf(name), doorbell.Wake{Name: name, At: at}, false)
}

// logicalOf returns the logical queue of wake name name: a logical queue
// is its own; a shard's storage name "<prefix>-<queue>-sN" is <queue>'s.
func (c *Client) logicalOf(name string) string {
	for q := range c.cfg.Shards {
		if strings.HasPrefix(name, c.names.Queue(q)+"-s") {
			return q
		}
	}
	return strings.TrimPrefix(name, c.cfg.Prefix+"-")
}

// observe passes one observation to the Client's observers (those the
// processor has are the same).
func (c *Client) observe(o model.Observation) {
	if len(c.cfg.Observers) == 0 {
		return
	}
	if o.Time.IsZero() {
		o.Time = time.Now()
	}
	o.Worker = c.cfg.Worker
	observers(c.cfg.Observers).Observe(o)
}

// peers lists the processors the Ringer may ring: those of the heartbeat
// rows that listen for wake-ups and are not gone, but this Client's own
// processor, and a loopback address only when its host is this one.
func (c *Client) peers(ctx context.Context) ([]doorbell.Peer, error) {
	beats, err := c.readBeats(ctx)
	if err != nil {
		return nil, err
	}
	self := ""
	if p := c.procLive.Load(); p != nil {
		self = p.InstanceID()
	}
	host, _ := os.Hostname()
	now := time.Now()
	var out []doorbell.Peer
	for _, b := range beats {
		if b.Wake == "" || b.ID == self || beatGone(b, now) {
			continue
		}
		if h, _, err := net.SplitHostPort(b.Wake); err == nil {
			if ip := net.ParseIP(h); (ip != nil && ip.IsLoopback()) && b.Host != host {
				continue // another machine's loopback
			}
		}
		out = append(out, doorbell.Peer{Addr: b.Wake, Queues: slices.Clone(b.Queues)})
	}
	return out, nil
}

// beatGone reports whether b's processor stopped without deleting its row
// (no heartbeat for ProcessorGoneAfter intervals): Processors reports it
// gone, the doorbell does not ring it, and it polls no queue for
// Status.Waiting.
func beatGone(b shared.Beat, now time.Time) bool {
	every := b.Every
	if every <= 0 {
		every = model.DefaultHeartbeatInterval
	}
	return now.Sub(b.Seen) > time.Duration(model.ProcessorGoneAfter)*every
}

// readBeats returns the heartbeat rows: those kept, read again in the
// background when older than beatsTTL; the first call reads them (one
// query), as does a call while the last read failed.
func (c *Client) readBeats(ctx context.Context) ([]shared.Beat, error) {
	b := &c.bell
	b.mu.Lock()
	if !b.readAt.IsZero() {
		beats := b.beats
		if time.Since(b.readAt) > beatsTTL && b.reading == nil {
			b.reading = make(chan struct{})
			go c.loadBeats(context.Background())
		}
		b.mu.Unlock()
		return beats, nil
	}
	wait := b.reading
	if wait == nil {
		wait = make(chan struct{})
		b.reading = wait
		go c.loadBeats(ctx)
	}
	b.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.readAt.IsZero() {
		return nil, errBeatsUnread
	}
	return b.beats, nil
}

// errBeatsUnread: the heartbeat rows could not be read (the read's error
// surfaces in Processors).
var errBeatsUnread = errors.New("cmdq: the processors' heartbeat rows could not be read")

// loadBeats reads the heartbeat rows (one query) and keeps them.
func (c *Client) loadBeats(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var beats []shared.Beat
	r, err := c.reader(ctx)
	if err == nil {
		beats, err = r.ReadBeats(ctx)
	}
	b := &c.bell
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.beats, b.readAt = beats, time.Now()
	}
	close(b.reading)
	b.reading = nil
}

// keepBeats keeps heartbeat rows read elsewhere (Processors).
func (c *Client) keepBeats(beats []shared.Beat) {
	b := &c.bell
	b.mu.Lock()
	b.beats, b.readAt = beats, time.Now()
	b.mu.Unlock()
}

// unreachable returns the wake addresses of the processors this Client
// rang that did not ack their last wakes.
func (c *Client) unreachable() []string {
	r := c.bell.ringer.Load()
	if r == nil {
		return nil
	}
	var out []string
	for _, s := range r.Statuses() {
		if s.Unreachable {
			out = append(out, s.Addr)
		}
	}
	return out
}

// wakeStatus returns what this Client knows of the doorbell at addr:
// whether it rang it and whether it is unreachable.
func (c *Client) wakeStatus(addr string) (rung, unreachable bool) {
	r := c.bell.ringer.Load()
	if addr == "" || r == nil {
		return false, false
	}
	s, ok := r.Status(addr)
	return ok, s.Unreachable
}
