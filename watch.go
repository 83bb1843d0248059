package cmdq

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// Watching commands: the one mechanism behind Wait, the HTTP API's
// long-polls and event streams, and the operator page's live command page.
//
//   - Changes this Client stores (its processor's outcomes, steps and
//     starts; requeues and discards through it) are pushed to the watchers
//     of the command as they land (record.Options.Changed and
//     Config.Changes): no storage call, no delay.
//   - Changes made by other processes are found by reading storage: once per
//     interval per watched command, for all its watchers together
//     (Config.WaitPollInterval, 1 s, doubling while nothing changes up to
//     WaitMaxPollInterval, 5 s; back to 1 s after a change).
//   - Completed and discarded statuses never change again: they are kept
//     (Config.FinalCache of them), and reading or watching them again costs
//     no storage call.

// DefaultFinalCache is Config.FinalCache's default: how many completed or
// discarded statuses a Client keeps in memory (10,000).
const DefaultFinalCache = 10000

// watchReadTimeout bounds one storage read made for watchers; each try of
// it has a quarter of it and is retried at most twice (the HTTP API's
// budget for a request's storage calls).
const watchReadTimeout = 10 * time.Second

// immutable reports whether a command in state s never changes again:
// completed, discarded and cancelled (a poisoned one waits for an operator).
func immutable(s State) bool {
	return s == StateCompleted || s == StateDiscarded || s == StateCancelled
}

// ETag returns the entity tag of a status, as HTTP writes it (a quoted
// string): it changes whenever anything in the status changes, and two
// equal statuses have the same one. The HTTP API sends it in the ETag
// header of a status and compares If-None-Match with it; Watch.Next takes
// it. It covers the stored status: Waiting, which the Client works out
// when it reads the status, is not part of it.
func ETag(st Status) string {
	st.Waiting = nil
	b, _ := json.Marshal(st) // a Status always encodes
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:12]) + `"`
}

// hub holds the watched commands and the cache of final statuses.
type hub struct {
	c      *Client
	min    time.Duration // Config.WaitPollInterval
	max    time.Duration // Config.WaitMaxPollInterval
	linger time.Duration // an unwatched entry is kept this long (its status may serve the next watch)

	mu      sync.Mutex
	entries map[string]*entry
	final   *finalCache
}

func newHub(c *Client, size int) *hub {
	return &hub{c: c, min: c.cfg.WaitPollInterval, max: c.cfg.WaitMaxPollInterval, linger: c.cfg.WaitMaxPollInterval,
		entries: map[string]*entry{}, final: newFinalCache(size)}
}

// entry is one watched command. Its fields are guarded by hub.mu; one
// goroutine (hub.run) reads storage for it while it is watched.
type entry struct {
	id   string
	refs int // open Watches

	known bool // st holds the status (read or pushed)
	st    Status
	etag  string
	ver   uint64 // bumped on every change of st
	err   error  // the last read's error, nil after a success
	reads uint64 // read attempts finished

	readAt   time.Time     // the last read (or push): st was current then
	interval time.Duration // the wait after readAt before the next read
	demand   bool          // read as soon as the minimum interval allows
	idleAt   time.Time     // when refs dropped to 0
	changed  chan struct{} // closed at the next change (status, error, in-flight)
	wake     chan struct{} // wakes hub.run (capacity 1)

	// The events, for streams: read once per change and shared.
	evs    []Event
	evVer  uint64        // ver they are current for
	evOK   bool          // evs was read at least once
	evLoad chan struct{} // closed when a read in progress ends
}

// signal closes e's changed channel: every watcher looks again.
func (e *entry) signal() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// poke wakes hub.run without blocking.
func (e *entry) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// set makes st e's status. Caller holds hub.mu.
func (h *hub) set(e *entry, st Status) {
	e.st, e.etag, e.known = st, ETag(st), true
	e.ver++
	e.signal()
	if immutable(st.State) {
		h.final.put(st)
	}
}

// watch opens a Watch of command id.
func (h *hub) watch(id string) *Watch {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st, ok := h.final.get(id); ok {
		return &Watch{h: h, id: id, fixed: &st}
	}
	e := h.entries[id]
	if e == nil {
		e = &entry{id: id, interval: h.min, changed: make(chan struct{}), wake: make(chan struct{}, 1)}
		h.entries[id] = e
		go h.run(e)
	}
	e.refs++
	// A status not read within the minimum interval is read again now
	// (once for everyone), unless its poller keeps it current already.
	if !e.known || e.refs == 1 && time.Since(e.readAt) >= h.min {
		e.demand = true
	}
	if e.demand || e.refs == 1 {
		e.poke() // from lingering to polling
	}
	return &Watch{h: h, id: id, e: e, since: e.reads}
}

// run reads storage for e while it is watched, and forgets e once it has
// been unwatched for the linger time (or at once when it is final).
func (h *hub) run(e *entry) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		h.mu.Lock()
		var wait time.Duration
		read := false
		switch {
		case e.refs == 0:
			idle := time.Since(e.idleAt)
			if idle >= h.linger || e.known && immutable(e.st.State) {
				if h.entries[e.id] == e {
					delete(h.entries, e.id)
				}
				h.mu.Unlock()
				return
			}
			wait = h.linger - idle
		case e.known && immutable(e.st.State):
			wait = -1 // nothing will change: sleep until unwatched
		default:
			due := e.readAt.Add(e.interval)
			if e.demand {
				due = e.readAt.Add(h.min)
			}
			if e.known && e.st.State == StateScheduled && e.st.RunAt.Before(due) {
				// It becomes pending then, with no write to find: read
				// it at that time.
				due = e.st.RunAt
			}
			wait = time.Until(due)
			read = wait <= 0
		}
		h.mu.Unlock()
		switch {
		case read:
			h.read(e)
		case wait < 0:
			<-e.wake
		default:
			t.Reset(wait)
			select {
			case <-t.C:
			case <-e.wake:
			}
		}
	}
}

// read reads e's status from storage (one point read) for all its
// watchers.
func (h *hub) read(e *entry) {
	h.mu.Lock()
	ver := e.ver
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), watchReadTimeout)
	st, err := h.c.readStatus(storage.WithCallBudget(ctx, watchReadTimeout/4, 2), e.id)
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	e.reads++
	e.readAt = time.Now()
	e.demand = false
	backoff := func() { e.interval = min(2*e.interval, h.max) }
	switch {
	case err == nil:
		e.err = nil
		switch {
		case e.ver != ver:
			// A change was pushed while this read ran: the push is at
			// least as new.
		case !e.known || ETag(st) != e.etag:
			h.set(e, st)
			e.interval = h.min
		default:
			backoff()
		}
	case errors.Is(err, model.ErrNotFound):
		e.err, e.known = err, false
		e.ver++
		e.signal()
		backoff()
	default:
		e.err = err
		if !e.known {
			e.signal() // the first watchers learn of the failure
		}
		backoff()
	}
}

// push records a change this Client stored (the change feed): st is the
// command's status after it, events the events written (nil: unknown).
func (h *hub) push(ms model.Status, mevents []model.Event) {
	st := statusOut(ms).AsOf(h.c.now())
	h.mu.Lock()
	defer h.mu.Unlock()
	if immutable(st.State) {
		h.final.put(st)
	}
	e := h.entries[st.ID]
	if e == nil {
		return
	}
	if e.known && (ETag(st) == e.etag || st.UpdatedAt.Before(e.st.UpdatedAt)) {
		return // known already, or older than what a read found
	}
	// The pushed events continue the shared list when it was current
	// (converted only for a watched command).
	events := eventsOut(mevents)
	appendEvents := e.evOK && e.evVer == e.ver && len(events) > 0 && events[0].Seq == lastSeq(e.evs)+1
	h.set(e, st)
	e.err = nil
	e.readAt, e.interval = time.Now(), h.min
	if appendEvents {
		e.evs = append(e.evs, events...)
		e.evVer = e.ver
	}
}

// sawEvent tells the watchers of id that an event of time at was read: a
// watched status older than it (a change made by another process, which
// the watch finds by polling) is read again as soon as the minimum
// interval allows, so that a status and the events read beside it agree
// (a command shows running once its started event can be read).
func (h *hub) sawEvent(id string, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.entries[id]
	if e == nil || !e.known || !e.st.UpdatedAt.Before(at) || immutable(e.st.State) {
		return
	}
	e.demand = true
	e.poke()
}

// inFlightChanged wakes the watchers of id: a handler started or ended on
// this Client's processor (Client.Running changed; the status did not).
func (h *hub) inFlightChanged(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.entries[id]; e != nil {
		e.signal()
	}
}

func lastSeq(evs []Event) int64 {
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

// Watch follows one command's status (Client.Watch). It is safe for
// concurrent use; Close it when done.
type Watch struct {
	h     *hub
	id    string
	e     *entry  // nil for a final status from the cache
	fixed *Status // the final status, when e is nil
	since uint64  // e.reads when the Watch opened

	closeOnce sync.Once
}

// Watch starts following command id's status. A change this Client stores
// (its processor's work, a requeue or discard through it) reaches the
// watch at once; a change made by another process is found by reading
// storage, once per Config.WaitPollInterval (1 s) at most for all the
// watches of the command together, less often while nothing changes (up
// to WaitMaxPollInterval, 5 s). A completed, discarded or cancelled command costs no
// further storage call. Watch does no I/O itself; Close the Watch when
// done.
func (c *Client) Watch(id string) *Watch { return c.hub.watch(id) }

// Current returns the command's status as now known, its ETag, and a
// channel that is closed at the next change (of the status, or of
// Client.InFlight for it). The first call of a new Watch waits for a read
// of storage unless the status is known already. Unknown command → an
// error wrapping ErrNotFound; a storage failure before the status was ever
// read → that error; ctx ending first → ctx's error.
func (w *Watch) Current(ctx context.Context) (Status, string, <-chan struct{}, error) {
	st, tag, ch, err := w.current(ctx)
	if err == nil {
		st = w.h.c.withWaiting(ctx, st)
	}
	return st, tag, ch, err
}

// current is Current without Status.Waiting (Wait, which returns final
// statuses only, needs no reason).
func (w *Watch) current(ctx context.Context) (Status, string, <-chan struct{}, error) {
	if w.fixed != nil {
		return *w.fixed, ETag(*w.fixed), nil, nil
	}
	h, e := w.h, w.e
	for {
		h.mu.Lock()
		if e.known {
			st, tag, ch := e.st, e.etag, e.changed
			h.mu.Unlock()
			return st, tag, ch, nil
		}
		if e.reads > w.since && e.err != nil {
			err := e.err
			h.mu.Unlock()
			return Status{}, "", nil, err
		}
		ch := e.changed
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Status{}, "", nil, fmt.Errorf("cmdq: status of %s: %w", w.id, ctx.Err())
		}
	}
}

// Next returns the command's status and ETag as soon as its ETag is not
// etag ("" matches none: the current status at once). When ctx ends
// first it returns the current status with an error wrapping ctx's.
// Other errors as Current.
func (w *Watch) Next(ctx context.Context, etag string) (Status, string, error) {
	for {
		st, tag, ch, err := w.Current(ctx)
		if err != nil || tag != etag {
			return st, tag, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st, tag, fmt.Errorf("cmdq: watch %s (still %s): %w", w.id, st.State, ctx.Err())
		}
	}
}

// Events returns the command's events with a sequence number above after,
// oldest first. Watches of the same command share one read of storage per
// change (one query per 1000 events), and changes this Client stores add
// their events without any. For a final command from the cache it is one
// query each time.
func (w *Watch) Events(ctx context.Context, after int64) ([]Event, error) {
	if w.e == nil {
		evs, err := w.h.c.Events(ctx, w.id)
		return since(evs, after), err
	}
	h, e := w.h, w.e
	for {
		h.mu.Lock()
		if e.evOK && e.evVer == e.ver {
			out := since(e.evs, after)
			h.mu.Unlock()
			return out, nil
		}
		if wait := e.evLoad; wait != nil {
			h.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("cmdq: events of %s: %w", w.id, ctx.Err())
			}
		}
		ver := e.ver
		done := make(chan struct{})
		e.evLoad = done
		h.mu.Unlock()

		evs, err := h.c.Events(ctx, w.id)

		h.mu.Lock()
		e.evLoad = nil
		close(done)
		if err == nil {
			// Read after the status of ver: they cover it (and maybe more).
			e.evs, e.evVer, e.evOK = evs, ver, true
		}
		h.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return since(evs, after), nil
	}
}

// since returns the events of evs numbered above after (a new slice).
func since(evs []Event, after int64) []Event {
	var out []Event
	for _, ev := range evs {
		if ev.Seq > after {
			out = append(out, ev)
		}
	}
	return out
}

// Close ends the watch. Its command's shared reads stop when no watch of
// it is left.
func (w *Watch) Close() {
	if w.e == nil {
		return
	}
	w.closeOnce.Do(func() {
		h, e := w.h, w.e
		h.mu.Lock()
		defer h.mu.Unlock()
		e.refs--
		if e.refs == 0 {
			e.idleAt = time.Now()
			e.poke()
		}
	})
}

// finalCache keeps the statuses of completed, discarded and cancelled commands, the
// least recently used dropped first.
type finalCache struct {
	size int
	// maxAge: a status last changed longer ago than this may have been
	// removed by retention, so it is not served from the cache (0: no
	// limit).
	maxAge time.Duration
	order  *list.List // of Status, most recent first
	byID   map[string]*list.Element
}

func newFinalCache(size int) *finalCache {
	return &finalCache{size: size, order: list.New(), byID: map[string]*list.Element{}}
}

func (f *finalCache) get(id string) (Status, bool) {
	el, ok := f.byID[id]
	if !ok {
		return Status{}, false
	}
	st := el.Value.(Status)
	if f.maxAge > 0 && time.Since(st.UpdatedAt) > f.maxAge {
		delete(f.byID, id)
		f.order.Remove(el)
		return Status{}, false
	}
	f.order.MoveToFront(el)
	return st, true
}

// maxCachedOutput is the largest recorded output (bytes) of a status the
// final cache keeps: 10,000 statuses stay within about 10 MiB however
// large the outputs (up to MaxOutputBytes each); a status with a larger
// one is read again (one point read).
const maxCachedOutput = 1024

func (f *finalCache) put(st Status) {
	if f.size <= 0 {
		return
	}
	if len(st.Output) > maxCachedOutput {
		if el, ok := f.byID[st.ID]; ok {
			delete(f.byID, st.ID)
			f.order.Remove(el)
		}
		return
	}
	if el, ok := f.byID[st.ID]; ok {
		el.Value = st
		f.order.MoveToFront(el)
		return
	}
	f.byID[st.ID] = f.order.PushFront(st)
	for f.order.Len() > f.size {
		last := f.order.Back()
		delete(f.byID, last.Value.(Status).ID)
		f.order.Remove(last)
	}
}

func (f *finalCache) clear() {
	f.order.Init()
	clear(f.byID)
}

// cachedFinal returns a completed, discarded or cancelled status kept in memory.
func (c *Client) cachedFinal(id string) (Status, bool) {
	c.hub.mu.Lock()
	defer c.hub.mu.Unlock()
	return c.hub.final.get(id)
}

// readStatus reads a command's status from storage (one point read) and
// keeps it when it is final.
func (c *Client) readStatus(ctx context.Context, id string) (Status, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return Status{}, err
	}
	ms, err := r.Get(ctx, id)
	st := statusOut(ms)
	if err == nil && immutable(st.State) {
		c.hub.mu.Lock()
		c.hub.final.put(st)
		c.hub.mu.Unlock()
	}
	return st, err
}

// Running reports whether this Client's processor runs a handler of
// command id now: the command is running, although its started event may
// not be written yet (the processor writes it lazily, after about 1 s, or
// with the outcome). It makes no storage call; a processor in another
// process is not seen.
func (c *Client) Running(id string) (RunningCommand, bool) {
	if p := c.procLive.Load(); p != nil {
		r, ok := p.InFlight(id)
		return RunningCommand(r), ok
	}
	return RunningCommand{}, false
}

// Wait returns a command's status once it is final (completed, poisoned,
// discarded or cancelled), or ctx's error with the last status known. It
// watches the command (see Watch): an outcome recorded by this Client's
// processor, or a requeue, discard or cancel through it, ends the wait at
// once; a change made by
// another process is found by a storage read shared with every other
// watcher of the command, at most once per Config.WaitPollInterval (1 s),
// backing off to WaitMaxPollInterval (5 s) while nothing changes. A
// poisoned command is final until an operator requeues it.
func (c *Client) Wait(ctx context.Context, id string) (Status, error) {
	w := c.Watch(id)
	defer w.Close()
	for {
		st, _, changed, err := w.current(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return st, fmt.Errorf("cmdq: wait for %s: %w", id, ctx.Err())
		case err != nil:
			return st, err
		case st.State.Final():
			return st, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return st, fmt.Errorf("cmdq: wait for %s (still %s): %w", id, st.State, ctx.Err())
		}
	}
}
