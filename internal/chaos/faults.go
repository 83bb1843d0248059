package chaos

import (
	"errors"
	"net/http"
	"slices"
	"sort"
	"sync"

	"github.com/cmdq-dev/cmdq/internal/faultproxy"
)

// Services of Azure Storage the processors use.
const (
	svcQueue = faultproxy.Queue
	svcTable = faultproxy.Table
)

// toxic is a fault on the TCP streams (see faultproxy.Toxic).
type toxic = faultproxy.Toxic

// faultNet sits between the cmdq processes and Azurite, built from the
// project's fault proxies (internal/faultproxy). Each process role (serve,
// w1, …) gets its own pair of TCP proxies (a faultproxy.Net), so faults can
// hit every process or one; behind them one HTTP fault proxy answers 503s
// (a TCP proxy works on byte streams and cannot make an HTTP status):
//
//	cmdq process → faultproxy.Net (role) → faultproxy.HTTP → Azurite
//
// The harness reads storage directly from Azurite, never through faultNet.
type faultNet struct {
	http *faultproxy.HTTP

	mu   sync.Mutex
	nets map[string]*faultproxy.Net // by role
}

// newFaultNet starts the HTTP fault proxy in front of Azurite (its
// connection string); seed replays the draws of 503 bursts.
func newFaultNet(azureConn string, seed uint64) (*faultNet, error) {
	h, err := faultproxy.StartHTTP(azureConn, faultproxy.HTTPOptions{Seed: seed | 1})
	if err != nil {
		return nil, err
	}
	return &faultNet{http: h, nets: map[string]*faultproxy.Net{}}, nil
}

// connString returns the connection string through role's proxies,
// creating them on first use.
func (f *faultNet) connString(role string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.nets[role]; n != nil {
		return n.ConnectionString, nil
	}
	n, err := faultproxy.StartNet(f.http.ConnectionString)
	if err != nil {
		return "", err
	}
	f.nets[role] = n
	return n.ConnectionString, nil
}

// selected returns the proxies of the given roles (nil: all), by role name.
func (f *faultNet) selected(roles []string) []*faultproxy.Net {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.nets))
	for r := range f.nets {
		if roles == nil || slices.Contains(roles, r) {
			names = append(names, r)
		}
	}
	sort.Strings(names)
	out := make([]*faultproxy.Net, 0, len(names))
	for _, r := range names {
		out = append(out, f.nets[r])
	}
	return out
}

// addToxic adds t to the selected proxies and returns a function that
// removes it again.
func (f *faultNet) addToxic(roles, svcs []string, t toxic) (remove func(), err error) {
	var rms []func()
	remove = func() {
		for _, rm := range rms {
			rm()
		}
	}
	for _, n := range f.selected(roles) {
		rm, err := n.AddToxic(svcs, t)
		if err != nil {
			remove()
			return nil, err
		}
		rms = append(rms, rm)
	}
	return remove, nil
}

// refuse refuses new connections to the selected proxies and closes their
// open ones, and returns the function that undoes it (refusals overlap:
// each is undone on its own).
func (f *faultNet) refuse(roles, svcs []string) func() error {
	ns := f.selected(roles)
	for _, n := range ns {
		n.Stop(svcs...)
	}
	return func() error {
		var errs []error
		for _, n := range ns {
			errs = append(errs, n.Start(svcs...))
		}
		return errors.Join(errs...)
	}
}

// dropConnections closes the selected proxies' open connections (requests in
// flight fail at once) and keeps accepting new ones.
func (f *faultNet) dropConnections(roles, svcs []string) error {
	var errs []error
	for _, n := range f.selected(roles) {
		errs = append(errs, n.DropConnections(svcs...))
	}
	return errors.Join(errs...)
}

// heal removes every toxic, reopens every proxy and ends 503 bursts.
func (f *faultNet) heal() error {
	var errs []error
	for _, n := range f.selected(nil) {
		errs = append(errs, n.Heal())
	}
	f.http.SetBurst(0, 0)
	return errors.Join(errs...)
}

// burst503 makes the HTTP fault proxy answer 503 ServerBusy: before is the
// fraction of requests refused before they reach Azurite, after the
// fraction forwarded (so the operation is applied) whose answer is replaced
// by a 503 (a response lost after the write landed).
func (f *faultNet) burst503(before, after float64) { f.http.SetBurst(before, after) }

// injected503 returns how many 503 answers the HTTP proxy made.
func (f *faultNet) injected503() int64 { return f.http.Busy503() }

// failNext makes the HTTP fault proxy answer the next n requests to svc for
// which match is true with 503 Server Busy; with after, each is forwarded
// first, so the operation is applied and only its answer is lost. A retry
// is a new request and counts against n.
func (f *faultNet) failNext(svc string, n int, after bool, match func(*http.Request) bool) {
	action := faultproxy.Busy
	if after {
		action = faultproxy.BusyAfter
	}
	f.http.Add(faultproxy.Match{Service: svc, Func: func(r *http.Request, _ []byte) bool { return match(r) }}, action, n)
}

func (f *faultNet) close() {
	for _, n := range f.selected(nil) {
		n.Close()
	}
	f.http.Close()
}
