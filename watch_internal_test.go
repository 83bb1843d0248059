package cmdq

import (
	"testing"
	"time"
)

// TestSawEventDemandsARead: a watched status older than an event read
// beside it (a change made by another process, found only by polling) is
// read again as soon as the minimum interval allows, instead of at the end
// of its backoff; a status as new as the event, a final one, or an
// unwatched command is left alone.
func TestSawEventDemandsARead(t *testing.T) {
	h := &hub{entries: map[string]*entry{}}
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	add := func(id string, st State) *entry {
		e := &entry{id: id, known: true, st: Status{ID: id, State: st, UpdatedAt: at}, wake: make(chan struct{}, 1)}
		h.entries[id] = e
		return e
	}
	pending, current, final := add("p", StatePending), add("c", StatePending), add("f", StateCompleted)
	h.sawEvent("p", at.Add(time.Second))
	h.sawEvent("c", at)
	h.sawEvent("f", at.Add(time.Second))
	h.sawEvent("unwatched", at.Add(time.Second))
	if !pending.demand || len(pending.wake) != 1 {
		t.Errorf("a status older than the event: demand %v, woken %v; want a read now", pending.demand, len(pending.wake) == 1)
	}
	for _, e := range []*entry{current, final} {
		if e.demand || len(e.wake) != 0 {
			t.Errorf("%s: demand %v, woken %v; want nothing", e.id, e.demand, len(e.wake) == 1)
		}
	}
}
