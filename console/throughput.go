package console

import (
	"context"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// The overview's "throughput now": the commands' completed, failed and
// poisoned events of the last few minutes, from the commands tables (the
// same events the Commands page charts), so a processor's restart does
// not reset it. One read of the recent tables serves every viewer for
// throughputMaxAge; the page says how old it is.

const (
	// throughputSpan is how far back the overview counts: 5 min, from
	// the start of that minute (so 5 to 6 min).
	throughputSpan = 5 * time.Minute
	// throughputMaxAge is how long one read serves the overview (10 s):
	// at most six reads a minute, whoever watches (what one tab of the
	// Commands page's 1 h range costs).
	throughputMaxAge = 10 * time.Second
)

// throughput is one read of the recent outcomes.
type throughput struct {
	Counts  cmdq.OutcomeCounts
	From    time.Time // the counts are of events at or after From …
	At      time.Time // … up to At, when they were read
	Partial bool      // the read stopped at maxScannedRows
	Err     error
}

// throughputCache holds the last read (dashboard.tput).
type throughputCache struct {
	mu   sync.Mutex
	last throughput
	busy chan struct{} // closed when the read in flight ends; nil when none
}

// throughput returns the outcomes of the last throughputSpan, read at
// most once per throughputMaxAge (concurrent views share one read).
func (d *dashboard) throughput(ctx context.Context) throughput {
	c := &d.tput
	for {
		c.mu.Lock()
		now := d.now()
		if !c.last.At.IsZero() && now.Sub(c.last.At) < throughputMaxAge && c.last.Err == nil {
			t := c.last
			c.mu.Unlock()
			return t
		}
		if c.busy == nil {
			break
		}
		busy := c.busy
		c.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return throughput{Err: ctx.Err()}
		}
	}
	c.busy = make(chan struct{})
	c.mu.Unlock()
	now := d.now().UTC()
	from := now.Add(-throughputSpan).Truncate(time.Minute) // the summary's intervals are whole minutes
	t := throughput{From: from, At: now}
	page, err := d.src.Commands(ctx, cmdq.CommandQuery{Since: from, IssuedSince: from.Add(-issuedSlack), Summary: true, Newest: true,
		Limit: 1, ScanLimit: maxScannedRows})
	if err != nil {
		t.Err = err
	} else if s := page.Summary; s != nil {
		t.Partial = s.Partial
		for _, iv := range s.Intervals {
			t.Counts.Completed += int64(iv.Completed)
			t.Counts.Failed += int64(iv.Failed)
			t.Counts.Poisoned += int64(iv.Poisoned)
		}
	}
	c.mu.Lock()
	c.last = t
	close(c.busy)
	c.busy = nil
	c.mu.Unlock()
	return t
}
