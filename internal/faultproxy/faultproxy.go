// Package faultproxy breaks the network between a test's code and a real
// Azure Storage endpoint (Azurite) in the ways production networks and
// services break. It is the one fault proxy of the project's tests: the
// unit tests of the packages above storage and the reliability suite
// (internal/chaos) both use it.
//
//   - Net puts a TCP proxy of its own in front of the queue and table
//     endpoints and breaks the byte streams: latency with jitter, resets
//     (RST), stalls and a black hole (bytes swallowed, connections held
//     open), in either direction and on a share of the connections
//     (AddToxic, with toxiproxy's names for the faults), connections
//     refused (Stop, Start: the listener is closed), open connections
//     dropped; Refuse, BlackHole and Restore are the common cases for a
//     test. A change of faults never waits for traffic: each connection's
//     pumps read the faults as one value that a change replaces, and a
//     connection is ended by closing its sockets. (The project used
//     toxiproxy here until its RemoveToxic deadlock, Shopify/toxiproxy#558,
//     hung a long reliability run; TestNetChurnNeverBlocks has that
//     deadlock's shape.)
//   - HTTP is a reverse proxy that applies rules to chosen requests: Refuse
//     resets the connection before the request reaches the service (the
//     request is lost), LoseAnswer forwards the request, lets the service
//     apply it, and resets the connection instead of answering (the
//     client's transport retry then meets the effect of its own first try),
//     Busy answers 503 Server Busy before the request reaches the service,
//     BusyAfter answers it after the service applied the request (the
//     answer is lost, the write landed). SetBurst answers 503 to a random
//     share of all requests, before or after applying them, as Azure does
//     when it throttles. A request it cannot forward (the service is down)
//     gets its connection reset.
//
// Both rewrite a connection string so that a real driver (storage/azure)
// talks through them, and can be chained (processes → Net per process →
// one HTTP → Azurite). Nothing is mocked: every request that gets through
// reaches the real service, and every fault is a real TCP reset, refusal,
// silence or HTTP answer the client's real transport sees.
package faultproxy

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The Azure Storage services a proxy stands in front of.
const (
	// Queue is the queue service (QueueEndpoint).
	Queue = "queue"
	// Table is the table service (TableEndpoint).
	Table = "table"
)

// Services lists both services.
var Services = []string{Queue, Table}

// endpoints returns the queue and table endpoint URLs of an account
// connection string with explicit endpoints (as Azurite's).
func endpoints(conn string) (queue, table *url.URL, err error) {
	for _, kv := range strings.Split(conn, ";") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		switch k {
		case "QueueEndpoint":
			queue, err = url.Parse(v)
		case "TableEndpoint":
			table, err = url.Parse(v)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	if queue == nil || table == nil {
		return nil, nil, fmt.Errorf("faultproxy: connection string has no QueueEndpoint and TableEndpoint: %q", conn)
	}
	return queue, table, nil
}

// rewrite replaces the hosts of the queue and table endpoints in conn.
func rewrite(conn, queueHost, tableHost string) string {
	parts := strings.Split(conn, ";")
	for i, kv := range parts {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		u, err := url.Parse(v)
		if err != nil {
			continue
		}
		switch k {
		case "QueueEndpoint":
			u.Host = queueHost
		case "TableEndpoint":
			u.Host = tableHost
		default:
			continue
		}
		parts[i] = k + "=" + u.String()
	}
	return strings.Join(parts, ";")
}

// Action is what an HTTP rule does to a matching request.
type Action int

const (
	// Refuse resets the client's connection without forwarding the request:
	// the service never sees it.
	Refuse Action = iota
	// LoseAnswer forwards the request, waits for the service's answer (so
	// the request took effect), then resets the client's connection instead
	// of answering.
	LoseAnswer
	// Busy answers 503 Server Busy (in the service's error format) without
	// forwarding the request.
	Busy
	// BusyAfter forwards the request, waits for the service's answer (so
	// the request took effect), then answers 503 Server Busy instead.
	BusyAfter
)

// Match selects requests. Empty fields match anything.
type Match struct {
	// Service is Queue or Table.
	Service string
	// Method is the HTTP method ("DELETE", "PUT", "POST", …).
	Method string
	// Path must occur in the unescaped URL path.
	Path string
	// Body must occur in the request body.
	Body string
	// Query must occur in the raw query string.
	Query string
	// Func, if set, must also return true.
	Func func(r *http.Request, body []byte) bool
}

func (m Match) matches(svc string, r *http.Request, body []byte) bool {
	return (m.Service == "" || m.Service == svc) &&
		(m.Method == "" || r.Method == m.Method) &&
		(m.Path == "" || strings.Contains(r.URL.Path, m.Path)) &&
		(m.Query == "" || strings.Contains(r.URL.RawQuery, m.Query)) &&
		(m.Body == "" || bytes.Contains(body, []byte(m.Body))) &&
		(m.Func == nil || m.Func(r, body))
}

// Rule is an installed HTTP rule.
type Rule struct {
	match  Match
	action Action
	mu     sync.Mutex
	left   int // applications left; < 0 = unlimited
	hits   int
	status []int // the service's answers to forwarded requests it hid
}

// Hits returns how many requests the rule has applied to.
func (r *Rule) Hits() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits
}

// Answers returns the status codes of the service's answers that
// LoseAnswer and BusyAfter withheld, in order.
func (r *Rule) Answers() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.status...)
}

// take reports whether the rule applies to one more request.
func (r *Rule) take(svc string, req *http.Request, body []byte) bool {
	if !r.match.matches(svc, req, body) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.left == 0 {
		return false
	}
	if r.left > 0 {
		r.left--
	}
	r.hits++
	return true
}

// HTTP is a reverse proxy in front of an account's queue and table
// endpoints that applies rules to matching requests and answers bursts of
// 503. Its methods are safe for concurrent use.
type HTTP struct {
	// ConnectionString reaches the account through the proxy.
	ConnectionString string

	mu        sync.Mutex
	rules     []*Rule
	rng       *rand.Rand
	transport *http.Transport
	servers   []*http.Server

	before, after atomic.Uint64 // SetBurst's shares, as math.Float64bits
	busy          atomic.Int64
}

// HTTPOptions configures StartHTTP. The zero value works.
type HTTPOptions struct {
	// Seed seeds the draws of SetBurst (0: a random seed), so that a
	// schedule can be replayed.
	Seed uint64
}

// StartHTTP starts a proxy in front of the endpoints of conn. Close stops
// it.
func StartHTTP(conn string, opts HTTPOptions) (*HTTP, error) {
	q, tb, err := endpoints(conn)
	if err != nil {
		return nil, err
	}
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	h := &HTTP{rng: rand.New(rand.NewPCG(seed, 0x503)), transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}
	listen := func(svc, upstream string) (string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("faultproxy: listen: %w", err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, svc, upstream) }), ReadHeaderTimeout: time.Minute}
		h.mu.Lock()
		h.servers = append(h.servers, srv)
		h.mu.Unlock()
		go func() { _ = srv.Serve(ln) }()
		return ln.Addr().String(), nil
	}
	qa, err := listen(Queue, q.Host)
	if err != nil {
		return nil, err
	}
	ta, err := listen(Table, tb.Host)
	if err != nil {
		h.Close()
		return nil, err
	}
	h.ConnectionString = rewrite(conn, qa, ta)
	return h, nil
}

// NewHTTP is StartHTTP for a test: it fails t on error and stops the proxy
// when the test ends.
func NewHTTP(t testing.TB, conn string) *HTTP {
	t.Helper()
	h, err := StartHTTP(conn, HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// Close stops the proxy.
func (h *HTTP) Close() {
	h.mu.Lock()
	srvs := h.servers
	h.mu.Unlock()
	for _, s := range srvs {
		_ = s.Close()
	}
	h.transport.CloseIdleConnections()
}

// Add installs a rule that applies action to the next times requests
// matching m (times < 0: every one). Rules are tried in the order they were
// added; the first that applies wins.
func (h *HTTP) Add(m Match, action Action, times int) *Rule {
	r := &Rule{match: m, action: action, left: times}
	h.mu.Lock()
	h.rules = append(h.rules, r)
	h.mu.Unlock()
	return r
}

// Remove uninstalls a rule.
func (h *HTTP) Remove(r *Rule) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, x := range h.rules {
		if x == r {
			h.rules = append(h.rules[:i], h.rules[i+1:]...)
			return
		}
	}
}

// SetBurst makes the proxy answer 503 Server Busy to a share before of the
// requests no rule applies to without forwarding them, and to a share after
// of them after the service applied them (the write landed, its answer is
// lost); SetBurst(0, 0) ends it.
func (h *HTTP) SetBurst(before, after float64) {
	h.before.Store(floatBits(before))
	h.after.Store(floatBits(after))
}

func floatBits(f float64) uint64 { return math.Float64bits(f) }
func floatFrom(b uint64) float64 { return math.Float64frombits(b) }

// Busy503 returns how many 503 answers the proxy made (rules and bursts).
func (h *HTTP) Busy503() int64 { return h.busy.Load() }

func (h *HTTP) rule(svc string, r *http.Request, body []byte) *Rule {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.rules {
		if x.take(svc, r, body) {
			return x
		}
	}
	return nil
}

// draw returns the burst's decision for one request: refuse before, apply
// then answer 503, or neither.
func (h *HTTP) draw() (before, after bool) {
	b, a := floatFrom(h.before.Load()), floatFrom(h.after.Load())
	if b == 0 && a == 0 {
		return false, false
	}
	h.mu.Lock()
	u := h.rng.Float64()
	h.mu.Unlock()
	return u < b, u >= b && u < b+a
}

// reset closes the client's connection with a TCP reset.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	c, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// writeBusy answers 503 ServerBusy in the service's error format.
func (h *HTTP) writeBusy(w http.ResponseWriter, svc string) {
	h.busy.Add(1)
	w.Header().Set("x-ms-error-code", "ServerBusy")
	const msg = "The server is busy. (injected by internal/faultproxy)"
	if svc == Table {
		w.Header().Set("Content-Type", "application/json;odata=minimalmetadata")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, `{"odata.error":{"code":"ServerBusy","message":{"lang":"en-US","value":%q}}}`, msg)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code><Message>%s</Message></Error>`, msg)
}

func (h *HTTP) serve(w http.ResponseWriter, r *http.Request, svc, upstream string) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		reset(w)
		return
	}
	action := Action(-1)
	rule := h.rule(svc, r, body)
	if rule != nil {
		action = rule.action
	} else if before, after := h.draw(); before {
		action = Busy
	} else if after {
		action = BusyAfter
	}
	switch action {
	case Refuse:
		reset(w)
		return
	case Busy:
		h.writeBusy(w, svc)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		reset(w)
		return
	}
	out.Header = r.Header.Clone()
	out.Host = r.Host
	out.ContentLength = int64(len(body))
	resp, err := h.transport.RoundTrip(out)
	if err != nil {
		reset(w) // the service is down or gone: no answer, as a dead service gives
		return
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if rule != nil && (action == LoseAnswer || action == BusyAfter) {
		rule.mu.Lock()
		rule.status = append(rule.status, resp.StatusCode)
		rule.mu.Unlock()
	}
	switch {
	case err != nil || action == LoseAnswer:
		reset(w)
		return
	case action == BusyAfter:
		h.writeBusy(w, svc)
		return
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}
