package cmdq

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/shared"
)

// Why a command waits (Status.Waiting; docs/lifecycle.md, "Why a command
// waits"): what the Client reads for a status that is neither running nor
// final, in order: its run-at or retry time; its queue's paused state
// (the queues' control rows, read at most once per ControlInterval, 9 s);
// whether this Client's processor holds it for a slot; and the live
// processors of its queue and their slots (the heartbeat rows, read at
// most once a minute and shared with the doorbell). A status read of a
// waiting command therefore adds at most one query per 9 s and one a
// minute per Client, however many are read; a running or final one adds
// nothing.

// controls keeps the queues' control rows for the statuses' reasons.
type controls struct {
	mu       sync.Mutex
	rows     map[string]shared.QueueControl
	readAt   time.Time     // when rows were read (zero: never)
	failedAt time.Time     // when the last read failed: not tried again for ControlInterval
	reading  chan struct{} // closed when the read in progress ends
}

// withWaiting returns st with Waiting set (nil for a running or final
// command). A read that fails leaves its part out: the reason is a hint.
func (c *Client) withWaiting(ctx context.Context, st Status) Status {
	st.Waiting = c.waiting(ctx, st)
	return st
}

func (c *Client) waiting(ctx context.Context, st Status) *Waiting {
	now := c.now()
	switch st.State {
	case StateScheduled:
		return &Waiting{Reason: WaitScheduled, Until: st.RunAt}
	case StateRetrying:
		if st.RunAt.After(now) && st.deferred {
			return &Waiting{Reason: WaitDeferred, Until: st.RunAt}
		}
		if st.RunAt.After(now) {
			return &Waiting{Reason: WaitRetrying, Until: st.RunAt}
		}
	case StatePending:
	default:
		return nil
	}
	if row, ok := c.control(ctx, st.Queue); ok && row.Paused {
		return &Waiting{Reason: WaitPaused, By: row.By, Since: row.Since}
	}
	p := c.procLive.Load()
	if p != nil {
		if _, running := p.InFlight(st.ID); running {
			return nil // its started event is not written yet (it is, lazily)
		}
	}
	if w, taken := c.waitingForTurn(ctx, st, now); taken {
		return nil // it holds a permit: a processor runs it, its started event not written yet
	} else if w != nil {
		return w
	}
	if p != nil {
		if p.Holds(st.ID) {
			return &Waiting{Reason: WaitSlot}
		}
	}
	beats, err := c.readBeats(ctx)
	if err != nil {
		return &Waiting{Reason: WaitDue}
	}
	self := ""
	polls, free := false, false
	if p != nil && c.Stats().Running && p.Polls(st.Queue) {
		self = p.InstanceID()
		polls, free = true, !p.Saturated()
	}
	for _, b := range beats {
		if b.ID == self || beatGone(b, now) || !slices.Contains(b.Queues, st.Queue) {
			continue
		}
		polls = true
		free = free || b.InFlight < b.Concurrency
	}
	switch {
	case !polls:
		return &Waiting{Reason: WaitNoProcessor}
	case !free:
		return &Waiting{Reason: WaitSlot}
	}
	return &Waiting{Reason: WaitDue}
}

// waitingForTurn says whether st waits for its order key's head (one
// query), for a permit of its limit key (a point read for its parameters
// and one query) or for a permit of its type (one query), nil when none
// (or a read failed); taken is true when st holds a permit (it runs).
func (c *Client) waitingForTurn(ctx context.Context, st Status, now time.Time) (w *Waiting, taken bool) {
	def, _ := c.reg.Lookup(st.Type)
	perKey := def != nil && def.KeyLimited() && def.GlobalConcurrencyPerKey > 0
	if st.OrderKey == "" && c.globalLimit(st.Type) == 0 && !perKey {
		return nil, false
	}
	r, err := c.reader(ctx)
	if err != nil {
		return nil, false
	}
	if st.OrderKey != "" {
		if head, ok, err := r.ReadOrderHead(ctx, st.OrderKey); err == nil && ok && head.Command != st.ID {
			return &Waiting{Reason: WaitOrder, Command: head.Command, Key: st.OrderKey}, false
		}
	}
	held := func(scope string, limit int) (*Waiting, bool) {
		perms, err := r.ReadPermits(ctx, scope)
		if err != nil {
			return nil, false
		}
		w := &Waiting{Reason: WaitPermit, Limit: limit}
		for _, pm := range perms {
			if pm.Command == st.ID {
				return nil, true
			}
			if !pm.Expired(now) {
				w.Held++
				w.HeldBy = append(w.HeldBy, pm.Worker)
			}
		}
		if w.Held >= limit {
			return w, false
		}
		return nil, false
	}
	if perKey {
		// Its key's permit is taken first: a command that waits for it
		// holds none of its type's.
		if rec, err := r.Load(ctx, st.ID); err == nil {
			if key := def.LimitKey(rec.Params); key != "" {
				if w, taken := held(shared.Scope(st.Type, key), def.GlobalConcurrencyPerKey); w != nil || taken {
					if w != nil {
						w.Key = key
					}
					return w, taken
				}
			}
		}
	}
	if limit := c.globalLimit(st.Type); limit > 0 {
		return held(st.Type, limit)
	}
	return nil, false
}

// globalLimit returns cmdType's global concurrency limit as this Client
// applies it (0: none, or a type it does not know).
func (c *Client) globalLimit(cmdType string) int {
	if n, ok := c.cfg.GlobalConcurrency[cmdType]; ok {
		return n
	}
	if def, ok := c.reg.Lookup(cmdType); ok {
		return def.GlobalConcurrency
	}
	return 0
}

// control returns queue's control row as last read, reading the rows
// again (one query, shared by every caller at a time) when they are older
// than ControlInterval; ok is false when they cannot be read.
func (c *Client) control(ctx context.Context, queue string) (shared.QueueControl, bool) {
	ct := &c.controls
	ct.mu.Lock()
	if !ct.readAt.IsZero() && time.Since(ct.readAt) < c.controlInterval() {
		row := ct.rows[queue]
		ct.mu.Unlock()
		return row, true
	}
	if time.Since(ct.failedAt) < c.controlInterval() {
		ct.mu.Unlock()
		return shared.QueueControl{}, false
	}
	wait := ct.reading
	if wait == nil {
		wait = make(chan struct{})
		ct.reading = wait
		go c.loadControls(ctx, wait)
	}
	ct.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
		return shared.QueueControl{}, false
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.readAt.IsZero() {
		return shared.QueueControl{}, false
	}
	return ct.rows[queue], true
}

// keepControl keeps a control row this Client has just written (a pause
// or resume through it).
func (c *Client) keepControl(row shared.QueueControl) {
	ct := &c.controls
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.rows == nil {
		return // not read yet: the first read finds it
	}
	ct.rows[row.Queue] = row
}

// loadControls reads the control rows (one query) and closes done.
func (c *Client) loadControls(ctx context.Context, done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var rows map[string]shared.QueueControl
	r, err := c.reader(ctx)
	if err == nil {
		rows, err = r.ReadControl(ctx)
	}
	ct := &c.controls
	ct.mu.Lock()
	if err == nil {
		ct.rows, ct.readAt = rows, time.Now()
	} else {
		ct.failedAt = time.Now()
	}
	ct.reading = nil
	ct.mu.Unlock()
	close(done)
}
