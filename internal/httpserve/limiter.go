package httpserve

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Failed authentication: logged at warn (at most once a minute per client
// address, and once a second in all) and, after a burst of failures, refused
// with 429 for a time that doubles with every further failure.

// DefaultAuthFailureBurst is how many failed authentications a client
// address may make in a row before it is refused, when the configuration
// gives 0 (10).
const DefaultAuthFailureBurst = 10

// Limiter timing.
const (
	// authFailureDecay: one counted failure is forgotten per this much
	// time without failures.
	authFailureDecay = time.Minute
	// authFirstBlock is the refusal after the first failure over the
	// burst; each further failure doubles it, up to authMaxBlock.
	authFirstBlock = time.Second
	authMaxBlock   = 5 * time.Minute
	// authLogEvery is how often one client's failures are logged.
	authLogEvery = time.Minute
	// authMaxClients bounds the memory the limiter uses.
	authMaxClients = 10000
)

// authClock tells the limiter's time; tests replace it (SetAuthClock).
var (
	authClockMu sync.Mutex
	authClock   = time.Now
)

// SetAuthClock makes every Limiter tell time by now, for tests that move
// time forward; restore puts the real clock back.
func SetAuthClock(now func() time.Time) (restore func()) {
	authClockMu.Lock()
	old := authClock
	authClock = now
	authClockMu.Unlock()
	return func() {
		authClockMu.Lock()
		authClock = old
		authClockMu.Unlock()
	}
}

// clock returns the limiters' time now.
func clock() time.Time {
	authClockMu.Lock()
	now := authClock
	authClockMu.Unlock()
	return now()
}

type authClient struct {
	failures     float64   // counted failures, decaying with time
	last         time.Time // last failure
	blockedUntil time.Time
	logged       time.Time // last warn line for this client
	unlogged     int       // failures since that line
}

// Limiter counts failed authentications per client address (ClientKey)
// and, after a burst of them in a row (a success starts the count again),
// refuses the address for a time that doubles with each further failure (1
// s up to 5 minutes); one counted failure is forgotten per minute without
// failures. It logs failures at warn, at most
// once a minute per address and once a second in all. One Limiter may
// serve several handlers (the API and the console), so that failures at
// either count together. It is safe for concurrent use.
type Limiter struct {
	burst int // failures before refusal; < 0: never refuse
	log   zerolog.Logger

	mu      sync.Mutex
	clients map[string]*authClient
	lastLog time.Time // last warn line of any client
	dropped int       // warn lines not written because of the global rate
	now     func() time.Time
}

// NewLimiter returns a Limiter that allows burst failures in a row (0 =
// DefaultAuthFailureBurst; negative: never refuse) and logs them to log
// (the zero Logger discards them).
func NewLimiter(burst int, log zerolog.Logger) *Limiter {
	if burst == 0 {
		burst = DefaultAuthFailureBurst
	}
	return &Limiter{burst: burst, log: log, clients: map[string]*authClient{}, now: clock}
}

// ClientKey is the address failures are counted under: the connection's IP
// address (an IPv6 address by its /64, which one client usually holds
// whole). Behind a reverse proxy it is the proxy's.
func ClientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}

// decay forgets the failures that time has paid off.
func (c *authClient) decay(now time.Time) {
	if c.failures > 0 && now.After(c.last) {
		c.failures -= float64(now.Sub(c.last)) / float64(authFailureDecay)
		if c.failures < 0 {
			c.failures = 0
		}
	}
}

// Blocked reports whether key is refused now, and for how long.
func (l *Limiter) Blocked(key string) (time.Duration, bool) {
	if l.burst < 0 {
		return 0, false
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.clients[key]
	if !ok || !now.Before(c.blockedUntil) {
		return 0, false
	}
	return c.blockedUntil.Sub(now), true
}

// Failed counts one failed authentication of key (why says how it failed)
// and logs it, rate-limited.
func (l *Limiter) Failed(key, why string, r *http.Request) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.clients[key]
	if !ok {
		l.makeRoom(now)
		c = &authClient{}
		l.clients[key] = c
	}
	c.decay(now)
	c.failures++
	c.last = now
	c.unlogged++
	var block time.Duration
	// The burst-th failure in a row is the last one let through: the
	// next request is refused.
	if over := int(c.failures+0.5) - l.burst + 1; l.burst >= 0 && over > 0 {
		block = authMaxBlock
		if over <= 20 {
			block = min(authFirstBlock<<(over-1), authMaxBlock)
		}
		c.blockedUntil = now.Add(block)
	}
	if !c.logged.IsZero() && now.Sub(c.logged) < authLogEvery {
		return
	}
	if now.Sub(l.lastLog) < time.Second {
		l.dropped++
		return
	}
	ev := l.log.Warn().Str("client", key).Str("method", r.Method).Str("path", r.URL.Path).Str("reason", why).
		Int("failures", c.unlogged).Float64("recent_failures", float64(int(c.failures*10))/10)
	if block > 0 {
		ev = ev.Dur("refused_for", block)
	}
	if l.dropped > 0 {
		ev = ev.Int("other_clients_lines_dropped", l.dropped)
	}
	ev.Msg("cmdq: failed authentication")
	c.logged, c.unlogged, l.lastLog, l.dropped = now, 0, now, 0
}

// Succeeded records a successful authentication of key: failures are
// counted in a row, so the count starts again (a refusal in force is not
// lifted; a refused address is not authenticated at all).
func (l *Limiter) Succeeded(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.clients[key]; ok && !l.now().Before(c.blockedUntil) {
		c.failures = 0
	}
}

// makeRoom drops clients whose failures are forgotten and who are not
// refused; if the table is still full, the one with the oldest failure.
// Called with l.mu held.
func (l *Limiter) makeRoom(now time.Time) {
	if len(l.clients) < authMaxClients {
		return
	}
	var oldest string
	var oldestAt time.Time
	for k, c := range l.clients {
		c.decay(now)
		if c.failures == 0 && !now.Before(c.blockedUntil) {
			delete(l.clients, k)
			continue
		}
		if oldest == "" || c.last.Before(oldestAt) {
			oldest, oldestAt = k, c.last
		}
	}
	if len(l.clients) >= authMaxClients {
		delete(l.clients, oldest)
	}
}
