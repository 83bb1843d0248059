package azure

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// The service's clock (storage.ServerClock): every response carries a
// Date header, the service's time in whole seconds. A response sent at
// local time s and received at r, dated D, bounds the offset o (service
// minus local) to [D − r, D + 1 s − s]: the service dated it at some
// instant between s and r by the local clock, and D is that instant cut
// to the second. The estimator keeps the intersection of the bounds seen
// (it narrows to about a round trip), starts again from the latest sample
// when a sample does not meet it (either clock stepped), and answers its
// middle.

// serverClock estimates the service's clock offset.
type serverClock struct {
	mu     sync.Mutex
	lo, hi time.Duration // the offset's bounds so far
	ok     bool

	// The answer, kept for offset without the lock: a Client reads it at
	// every Now.
	mid, half atomic.Int64
	known     atomic.Bool
}

// sample notes a response dated date, sent at sent and received at recv
// (local clock).
func (c *serverClock) sample(date, sent, recv time.Time) {
	lo, hi := date.Sub(recv), date.Add(time.Second).Sub(sent)
	if hi < lo {
		return // a clock stepped back during the call: says nothing
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok || lo > c.hi || hi < c.lo {
		c.lo, c.hi, c.ok = lo, hi, true
	} else {
		c.lo, c.hi = max(c.lo, lo), min(c.hi, hi)
	}
	c.mid.Store(int64((c.lo + c.hi) / 2))
	c.half.Store(int64((c.hi - c.lo) / 2))
	c.known.Store(true)
}

// offset returns the middle of the bounds and half their width.
func (c *serverClock) offset() (offset, uncertainty time.Duration, ok bool) {
	if !c.known.Load() {
		return 0, 0, false
	}
	return time.Duration(c.mid.Load()), time.Duration(c.half.Load()), true
}

// clockPolicy samples the Date header of every try (a per-retry policy:
// the times are taken right around the wire).
type clockPolicy struct{ c *serverClock }

func (p clockPolicy) Do(req *policy.Request) (*http.Response, error) {
	sent := time.Now()
	resp, err := req.Next()
	if err == nil && resp != nil {
		if d := resp.Header.Get("Date"); d != "" {
			if date, perr := http.ParseTime(d); perr == nil {
				p.c.sample(date, sent, time.Now())
			}
		}
	}
	return resp, err
}

// ClockOffset estimates how far the service's clock is ahead of this
// machine's (storage.ServerClock), from the Date headers of the responses
// seen so far; ok is false before the first.
func (s *Store) ClockOffset() (offset, uncertainty time.Duration, ok bool) {
	return s.clock.offset()
}
