package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq/storage/azure"
)

// Services of Azure Storage the processors use.
const (
	svcQueue = "queue"
	svcTable = "table"
)

// faultNet sits between the cmdq processes and Azurite. Each process role
// (serve, w1, …) gets its own toxiproxy proxy per service, so faults can hit
// every process or one; behind them one HTTP fault proxy per service
// answers bursts of 503 (toxiproxy works on TCP streams and cannot make an
// HTTP status):
//
//	cmdq process → toxiproxy (role, service) → httpFault (service) → Azurite
//
// The harness reads storage directly from Azurite, never through faultNet.
type faultNet struct {
	server  *toxiproxy.ApiServer
	account string

	mu      sync.Mutex
	proxies map[string]*toxiproxy.Proxy // role/service
	http    map[string]*httpFault       // service
	toxicN  int
}

// newFaultNet starts the HTTP fault proxies in front of Azurite's queue and
// table endpoints (host:port).
func newFaultNet(queueAddr, tableAddr string, seed uint64) (*faultNet, error) {
	f := &faultNet{
		server:  toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		account: azure.DevAccountName,
		proxies: map[string]*toxiproxy.Proxy{},
		http:    map[string]*httpFault{},
	}
	for i, s := range []struct{ svc, addr string }{{svcQueue, queueAddr}, {svcTable, tableAddr}} {
		h, err := newHTTPFault(s.svc, s.addr, seed+uint64(i))
		if err != nil {
			f.close()
			return nil, err
		}
		f.http[s.svc] = h
	}
	return f, nil
}

// connString returns the connection string through role's proxies,
// creating them on first use.
func (f *faultNet) connString(role string) (string, error) {
	addrs := map[string]string{}
	for _, svc := range []string{svcQueue, svcTable} {
		p, err := f.proxy(role, svc)
		if err != nil {
			return "", err
		}
		addrs[svc] = p.Listen
	}
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;QueueEndpoint=http://%s/%s;TableEndpoint=http://%s/%s;",
		f.account, azure.DevAccountKey, addrs[svcQueue], f.account, addrs[svcTable], f.account), nil
}

func (f *faultNet) proxy(role, svc string) (*toxiproxy.Proxy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := role + "/" + svc
	if p := f.proxies[key]; p != nil {
		return p, nil
	}
	p := toxiproxy.NewProxy(f.server, key, "127.0.0.1:0", f.http[svc].addr())
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("toxiproxy %s: %w", key, err)
	}
	f.proxies[key] = p
	return p, nil
}

// selected returns the proxies of the given roles (nil: all) and services.
func (f *faultNet) selected(roles, svcs []string) []*toxiproxy.Proxy {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*toxiproxy.Proxy
	keys := make([]string, 0, len(f.proxies))
	for k := range f.proxies {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := f.proxies[k]
		role, svc, _ := strings.Cut(k, "/")
		if (roles == nil || slices.Contains(roles, role)) && slices.Contains(svcs, svc) {
			out = append(out, p)
		}
	}
	return out
}

// toxic is one toxiproxy toxic to add.
type toxic struct {
	Type     string         `json:"type"`
	Stream   string         `json:"stream"` // upstream (to Azurite) or downstream
	Toxicity float32        `json:"toxicity"`
	Attrs    map[string]any `json:"attributes"`
}

// addToxic adds t to the selected proxies and returns a function that
// removes it again.
func (f *faultNet) addToxic(roles, svcs []string, t toxic) (remove func(), err error) {
	f.mu.Lock()
	f.toxicN++
	name := fmt.Sprintf("%s-%d", t.Type, f.toxicN)
	f.mu.Unlock()
	body, err := json.Marshal(struct {
		Name string `json:"name"`
		toxic
	}{name, t})
	if err != nil {
		return nil, err
	}
	var added []*toxiproxy.Proxy
	for _, p := range f.selected(roles, svcs) {
		if _, err := p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
			return nil, fmt.Errorf("toxic %s on %s: %w", t.Type, p.Name, err)
		}
		added = append(added, p)
	}
	return func() {
		for _, p := range added {
			_ = p.Toxics.RemoveToxic(context.Background(), name)
		}
	}, nil
}

// refuse closes the selected proxies' listeners and connections (new
// connections are refused) and returns the function that reopens them.
func (f *faultNet) refuse(roles, svcs []string) func() error {
	ps := f.selected(roles, svcs)
	for _, p := range ps {
		p.Stop()
	}
	return func() error {
		var first error
		for _, p := range ps {
			if err := p.Start(); err != nil && err != toxiproxy.ErrProxyAlreadyStarted && first == nil {
				first = fmt.Errorf("reopen %s on %s: %w", p.Name, p.Listen, err)
			}
		}
		return first
	}
}

// dropConnections closes the selected proxies' open connections (requests in
// flight fail at once) and keeps accepting new ones.
func (f *faultNet) dropConnections(roles, svcs []string) error {
	return f.refuse(roles, svcs)()
}

// heal removes every toxic, reopens every proxy and ends 503 bursts.
func (f *faultNet) heal() error {
	var first error
	for _, p := range f.selected(nil, []string{svcQueue, svcTable}) {
		p.Toxics.ResetToxics(context.Background())
		if err := p.Start(); err != nil && err != toxiproxy.ErrProxyAlreadyStarted && first == nil {
			first = err
		}
	}
	for _, h := range f.http {
		h.set(0, 0)
	}
	return first
}

// burst503 makes the HTTP fault proxies answer 503 ServerBusy: before is the
// fraction of requests refused before they reach Azurite, after the
// fraction forwarded (so the operation is applied) whose answer is replaced
// by a 503 (a response lost after the write landed).
func (f *faultNet) burst503(before, after float64) {
	for _, h := range f.http {
		h.set(before, after)
	}
}

// injected503 returns how many 503 answers the HTTP proxies made.
func (f *faultNet) injected503() int64 {
	var n int64
	for _, h := range f.http {
		n += h.injected.Load()
	}
	return n
}

func (f *faultNet) close() {
	for _, p := range f.selected(nil, []string{svcQueue, svcTable}) {
		p.Stop()
	}
	for _, h := range f.http {
		h.close()
	}
}

// httpFault is a reverse proxy in front of one Azurite service that can
// answer 503 Server Busy, the way Azure Storage does when it throttles or
// times out internally, and that drops the client's connection (no answer)
// while Azurite is down.
type httpFault struct {
	svc    string
	target string
	ln     net.Listener
	srv    *http.Server
	tr     *http.Transport
	rp     *httputil.ReverseProxy

	before, after atomic.Uint64 // math.Float64bits
	injected      atomic.Int64

	mu    sync.Mutex
	rng   *rand.Rand
	rules []*rule // failNext
}

// rule answers the next n requests that match with 503.
type rule struct {
	match func(*http.Request) bool
	n     int
	after bool // apply the request first (the answer is lost, the write landed)
}

// failNext makes the HTTP fault proxy of svc answer the next n requests for
// which match is true with 503 Server Busy; with after, each is forwarded
// first, so the operation is applied and only its answer is lost. A retry
// is a new request and counts against n.
func (f *faultNet) failNext(svc string, n int, after bool, match func(*http.Request) bool) {
	h := f.http[svc]
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rules = append(h.rules, &rule{match: match, n: n, after: after})
}

// take returns whether a rule claims r, and whether it is an "after" rule.
func (h *httpFault) take(r *http.Request) (hit, after bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ru := range h.rules {
		if ru.n > 0 && ru.match(r) {
			ru.n--
			return true, ru.after
		}
	}
	return false, false
}

func newHTTPFault(svc, target string, seed uint64) (*httpFault, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &url.URL{Scheme: "http", Host: target}
	h := &httpFault{svc: svc, target: target, ln: ln, rng: rand.New(rand.NewPCG(seed, 0x503))}
	h.tr = &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	h.rp = httputil.NewSingleHostReverseProxy(u)
	h.rp.Transport = h.tr
	h.rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) { hangUp(w) }
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	go func() { _ = h.srv.Serve(ln) }()
	return h, nil
}

func (h *httpFault) addr() string { return h.ln.Addr().String() }

func (h *httpFault) set(before, after float64) {
	h.before.Store(math.Float64bits(before))
	h.after.Store(math.Float64bits(after))
}

func (h *httpFault) roll() float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rng.Float64()
}

// hangUp closes the client's connection without an answer, as a dead
// service would.
func hangUp(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
			return
		}
	}
	w.WriteHeader(http.StatusBadGateway)
}

func (h *httpFault) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if hit, after := h.take(r); hit {
		if after {
			h.applyThenBusy(w, r)
		} else {
			_, _ = io.Copy(io.Discard, r.Body)
			h.busy(w)
		}
		return
	}
	before := math.Float64frombits(h.before.Load())
	after := math.Float64frombits(h.after.Load())
	if before == 0 && after == 0 {
		h.rp.ServeHTTP(w, r)
		return
	}
	u := h.roll()
	switch {
	case u < before:
		_, _ = io.Copy(io.Discard, r.Body)
		h.busy(w)
	case u < before+after:
		h.applyThenBusy(w, r)
	default:
		h.rp.ServeHTTP(w, r)
	}
}

// applyThenBusy forwards r to the service and answers 503 whatever it said.
func (h *httpFault) applyThenBusy(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = "http", h.target
	resp, err := h.tr.RoundTrip(out)
	if err != nil {
		hangUp(w)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	h.busy(w)
}

// busy answers 503 ServerBusy in the service's error format.
func (h *httpFault) busy(w http.ResponseWriter) {
	h.injected.Add(1)
	w.Header().Set("x-ms-error-code", "ServerBusy")
	const msg = "The server is busy. (injected by the cmdq reliability suite)"
	if h.svc == svcTable {
		w.Header().Set("Content-Type", "application/json;odata=minimalmetadata")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, `{"odata.error":{"code":"ServerBusy","message":{"lang":"en-US","value":%q}}}`, msg)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code><Message>%s</Message></Error>`, msg)
}

func (h *httpFault) close() {
	_ = h.srv.Close()
	h.tr.CloseIdleConnections()
}
