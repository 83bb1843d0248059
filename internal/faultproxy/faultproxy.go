// Package faultproxy breaks the network between a test's code and a real
// Azure Storage endpoint (Azurite) in the ways production networks break:
//
//   - Net puts an in-process toxiproxy (github.com/Shopify/toxiproxy/v2) in
//     front of the queue and table endpoints: Refuse stops listening
//     (connections refused), BlackHole accepts connections and never answers,
//     Restore undoes both.
//   - HTTP is a reverse proxy that applies rules to chosen requests: Refuse
//     resets the connection before the request reaches the service (the
//     request is lost), LoseAnswer forwards the request, lets the service
//     apply it, and resets the connection instead of answering (the client's
//     transport retry then meets the effect of its own first try).
//
// Both rewrite a connection string so that a real driver (storage/azure)
// talks through them. Nothing is mocked: every request that gets through
// reaches the real service, and every fault is a real TCP reset, refusal or
// silence the client's real transport sees.
package faultproxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

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

// Net is a pair of toxiproxy proxies in front of an account's queue and
// table endpoints.
type Net struct {
	// ConnectionString reaches the account through the proxies.
	ConnectionString string

	queue, table *toxiproxy.Proxy
	mu           sync.Mutex
	state        string // "", "refused", "blackhole"
}

// NewNet starts proxies in front of the endpoints of conn (a connection
// string with QueueEndpoint and TableEndpoint, as Azurite's). They stop when
// the test ends.
func NewNet(t testing.TB, conn string) *Net {
	t.Helper()
	q, tb, err := endpoints(conn)
	if err != nil {
		t.Fatal(err)
	}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	n := &Net{}
	n.queue = toxiproxy.NewProxy(srv, "queue", "127.0.0.1:0", q.Host)
	n.table = toxiproxy.NewProxy(srv, "table", "127.0.0.1:0", tb.Host)
	for _, p := range []*toxiproxy.Proxy{n.queue, n.table} {
		if err := p.Start(); err != nil {
			t.Fatalf("faultproxy: start toxiproxy: %v", err)
		}
		t.Cleanup(p.Stop)
	}
	n.ConnectionString = rewrite(conn, n.queue.Listen, n.table.Listen)
	return n
}

// Refuse closes the proxies' listeners and every open connection: new
// connections are refused, as when the storage service is down.
func (n *Net) Refuse(t testing.TB) {
	t.Helper()
	n.Restore(t)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.queue.Stop()
	n.table.Stop()
	n.state = "refused"
}

// BlackHole makes the proxies accept connections and forward nothing in
// either direction (a hung endpoint, a black-holed network): calls hang
// until their own timeouts.
func (n *Net) BlackHole(t testing.TB) {
	t.Helper()
	n.Restore(t)
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range []*toxiproxy.Proxy{n.queue, n.table} {
		for _, dir := range []string{"upstream", "downstream"} {
			js := fmt.Sprintf(`{"name":"blackhole_%s","type":"timeout","stream":%q,"attributes":{"timeout":0}}`, dir, dir)
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
				t.Fatalf("faultproxy: add black hole: %v", err)
			}
		}
	}
	n.state = "blackhole"
}

// Restore ends Refuse or BlackHole: the proxies forward again (connections
// held by a black hole are closed).
func (n *Net) Restore(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	switch n.state {
	case "refused":
		for _, p := range []*toxiproxy.Proxy{n.queue, n.table} {
			if err := p.Start(); err != nil {
				t.Fatalf("faultproxy: restart toxiproxy on %s: %v", p.Listen, err)
			}
		}
	case "blackhole":
		for _, p := range []*toxiproxy.Proxy{n.queue, n.table} {
			for _, dir := range []string{"upstream", "downstream"} {
				if err := p.Toxics.RemoveToxic(context.Background(), "blackhole_"+dir); err != nil {
					t.Fatalf("faultproxy: remove black hole: %v", err)
				}
			}
		}
	}
	n.state = ""
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
)

// Match selects requests. Empty fields match anything.
type Match struct {
	// Method is the HTTP method ("DELETE", "PUT", "POST", …).
	Method string
	// Path must occur in the unescaped URL path.
	Path string
	// Body must occur in the request body.
	Body string
	// Query must occur in the raw query string.
	Query string
}

func (m Match) matches(r *http.Request, body []byte) bool {
	return (m.Method == "" || r.Method == m.Method) &&
		(m.Path == "" || strings.Contains(r.URL.Path, m.Path)) &&
		(m.Query == "" || strings.Contains(r.URL.RawQuery, m.Query)) &&
		(m.Body == "" || bytes.Contains(body, []byte(m.Body)))
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
// LoseAnswer withheld, in order.
func (r *Rule) Answers() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.status...)
}

// take reports whether the rule applies to one more request.
func (r *Rule) take(req *http.Request, body []byte) bool {
	if !r.match.matches(req, body) {
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
// endpoints that applies rules to matching requests.
type HTTP struct {
	// ConnectionString reaches the account through the proxy.
	ConnectionString string

	mu        sync.Mutex
	rules     []*Rule
	transport *http.Transport
}

// NewHTTP starts a proxy in front of the endpoints of conn; it stops when the
// test ends.
func NewHTTP(t testing.TB, conn string) *HTTP {
	t.Helper()
	q, tb, err := endpoints(conn)
	if err != nil {
		t.Fatal(err)
	}
	h := &HTTP{transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}
	t.Cleanup(h.transport.CloseIdleConnections)
	listen := func(upstream string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("faultproxy: listen: %v", err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, upstream) })}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	}
	h.ConnectionString = rewrite(conn, listen(q.Host), listen(tb.Host))
	return h
}

// Add installs a rule that applies action to the next times requests
// matching m (times < 0: every one).
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

func (h *HTTP) rule(r *http.Request, body []byte) *Rule {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.rules {
		if x.take(r, body) {
			return x
		}
	}
	return nil
}

// reset closes the client's connection with a TCP reset.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("faultproxy: response writer cannot be hijacked")
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

func (h *HTTP) serve(w http.ResponseWriter, r *http.Request, upstream string) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		reset(w)
		return
	}
	rule := h.rule(r, body)
	if rule != nil && rule.action == Refuse {
		reset(w)
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
		reset(w)
		return
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil || rule != nil {
		if rule != nil {
			rule.mu.Lock()
			rule.status = append(rule.status, resp.StatusCode)
			rule.mu.Unlock()
		}
		reset(w)
		return
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}
