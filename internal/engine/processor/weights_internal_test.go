package processor

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// sixThreeOne is the scheduler of queues critical, default and low
// weighing 6, 3 and 1, with slots handler slots (indexes 0, 1, 2: the
// queues sorted by name).
func sixThreeOne(slots int) *weighted {
	return newWeighted([]string{"critical", "default", "low"}, map[string]int{"critical": 6, "default": 3, "low": 1}, slots)
}

// step gives one slot to a waiting message and frees it at once: the
// queue that started, or -1.
func (w *weighted) step() int {
	chans := make([]chan struct{}, len(w.qs))
	for i, q := range w.qs {
		if len(q.waiting) > 0 {
			chans[i] = q.waiting[0]
		}
	}
	if !w.grant() {
		return -1
	}
	for i, ch := range chans {
		select {
		case <-ch:
			if ch != nil {
				w.free(i)
				return i
			}
		default:
		}
	}
	panic("a grant went to no queue's first waiting message")
}

// keepWaiting gives queue i a waiting message when it has none.
func (w *weighted) keepWaiting(i int) {
	if len(w.qs[i].waiting) == 0 {
		w.qs[i].waiting = append(w.qs[i].waiting, make(chan struct{}))
	}
}

// TestWeightedSharesSaturated: with a message always waiting on each of
// three queues weighing 6:3:1, every 10 starts are exactly 6, 3 and 1,
// and the longest run of other queues' starts between two of a queue's
// is within gapBound (20 for low, 11 for default, 6 for critical).
func TestWeightedSharesSaturated(t *testing.T) {
	w := sixThreeOne(1)
	if got := []int{w.gapBound(0), w.gapBound(1), w.gapBound(2)}; got[0] != 6 || got[1] != 11 || got[2] != 20 {
		t.Fatalf("gap bounds %v, want [6 11 20]", got)
	}
	counts := make([]int, 3)
	last := []int{-1, -1, -1}
	gaps := make([]int, 3)
	for n := range 10_000 {
		for i := range w.qs {
			w.keepWaiting(i)
		}
		i := w.step()
		counts[i]++
		for j := range last {
			if j == i {
				gaps[j] = max(gaps[j], n-last[j]-1)
				last[j] = n
			}
		}
		if (n+1)%10 == 0 && (counts[0] != (n+1)*6/10 || counts[1] != (n+1)*3/10 || counts[2] != (n+1)/10) {
			t.Fatalf("after %d starts: %v, want exactly 6:3:1", n+1, counts)
		}
	}
	for i := range gaps {
		if gaps[i] > w.gapBound(i) {
			t.Errorf("queue %s: %d starts of the others between two of its own, over the bound %d", w.qs[i].name, gaps[i], w.gapBound(i))
		}
	}
	t.Logf("starts %v, longest gaps %v", counts, gaps)
}

// TestWeightedLendsAndBounds: queues come and go at random. A queue with
// no waiting message lends its turns (every grant goes to a waiting
// message while there is one), and whenever a queue had a message
// waiting from one of its starts (or its arrival) to the next, the other
// queues started at most gapBound in between: also right after another
// queue came back from an absence with its credit.
func TestWeightedLendsAndBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, weights := range []map[string]int{
		{"critical": 6, "default": 3, "low": 1},
		{"critical": 100, "default": 10, "low": 1},
		{"a": 1, "b": 1, "c": 1, "d": 7},
	} {
		names := slices.Sorted(maps.Keys(weights))
		w := newWeighted(names, weights, 1)
		present := make([]bool, len(names))
		since := make([]int, len(names)) // the step from which queue i has waited continuously (-1: not)
		for i := range since {
			since[i] = -1
		}
		gaps := make([]int, len(names))  // starts of the others since then
		worst := make([]int, len(names)) // the longest such run seen
		for n := range 50_000 {
			anyPresent := false
			for i := range present {
				if rng.IntN(50) == 0 {
					present[i] = !present[i]
					if !present[i] {
						w.qs[i].waiting = nil
						since[i] = -1
					}
				}
				if present[i] {
					if since[i] < 0 {
						since[i], gaps[i] = n, 0
					}
					w.keepWaiting(i)
					anyPresent = true
				}
			}
			i := w.step()
			if (i < 0) == anyPresent {
				t.Fatalf("%v step %d: grant to %d with queues present %v", weights, n, i, present)
			}
			if i < 0 {
				continue
			}
			for j := range names {
				if j != i && since[j] >= 0 {
					gaps[j]++
					worst[j] = max(worst[j], gaps[j])
					if gaps[j] > w.gapBound(j) {
						t.Fatalf("%v: queue %s waited through %d starts of the others, over the bound %d", weights, names[j], gaps[j], w.gapBound(j))
					}
				}
			}
			since[i], gaps[i] = n, 0
		}
		t.Logf("%v: longest waits %v (bounds %v)", weights, worst, func() (b []int) {
			for i := range names {
				b = append(b, w.gapBound(i))
			}
			return b
		}())
	}
}

// TestWeightedPlacesWithoutPrefetch: without a prefetch, the queues
// dequeue only for free slots, in stride order: 4 free slots and three
// queues waiting to dequeue go to critical 2, default 1, low 1 (the
// order of the next 4 starts), and none more until a slot frees.
func TestWeightedPlacesWithoutPrefetch(t *testing.T) {
	w := sixThreeOne(4)
	for _, q := range w.qs {
		q.wanting = true
	}
	want := []int{2, 1, 1}
	for i := range w.qs {
		n := w.places(i, 0, 4, 32)
		if n != want[i] {
			t.Fatalf("places of %s: %d, want %d", w.qs[i].name, n, want[i])
		}
		w.qs[i].held += n
		w.qs[i].wanting = false
	}
	for i := range w.qs {
		if n := w.places(i, 0, 4, 32); n != 0 {
			t.Fatalf("places of %s with every slot's message in hand: %d, want 0", w.qs[i].name, n)
		}
	}

	// At the start of a session every poller is about to look: the first
	// to look (low) takes its turn of the free slots only, not all 4.
	w = sixThreeOne(4)
	for _, q := range w.qs {
		q.fresh = true
	}
	w.qs[2].fresh = false
	if n := w.places(2, 0, 4, 32); n != 1 {
		t.Fatalf("places of low, first to look in a session: %d, want 1", n)
	}
	// Alone (the others' pollers gone to wait), it takes every free slot.
	w.qs[0].fresh, w.qs[1].fresh = false, false
	if n := w.places(2, 0, 4, 32); n != 4 {
		t.Fatalf("places of low, the only queue looking: %d, want 4", n)
	}
}

// TestWeightedPlacesPrefetchShares: with a prefetch, a queue with no
// message waiting fetches its share of it (prefetch × weight / the weights
// of the queues with ready work), as one batch; a queue whose share is
// under one message fetches one when it would get the next slot; a queue
// alone with ready work gets the whole prefetch.
func TestWeightedPlacesPrefetchShares(t *testing.T) {
	w := sixThreeOne(4)
	for i, q := range w.qs { // every slot busy
		q.held, q.started = []int{2, 1, 1}[i], []int{2, 1, 1}[i]
	}
	w.slots = 0
	for i, want := range []int{19, 9, 3} { // 32 × 6/10, 3/10, 1/10
		if n := w.places(i, 32, 4, 32); n != want {
			t.Fatalf("places of %s with a prefetch of 32: %d, want %d", w.qs[i].name, n, want)
		}
	}
	if n := w.places(0, 32, 4, 8); n != 8 {
		t.Fatalf("places of critical with batches of 8: %d, want 8", n)
	}
	// A prefetch of 4: critical's share is 2, default's 1, low's 0.
	w.qs[0].held += 2 // critical holds its share
	w.qs[1].held++    // default too
	if n := w.places(0, 4, 4, 32); n != 0 {
		t.Fatalf("places of critical holding its share: %d, want 0", n)
	}
	// Low's turn comes after critical's and default's held messages:
	// passes 0 (critical: ties go to the heavier), 0 default, 0 low.
	w.qs[2].wanting = true
	if n := w.places(2, 4, 4, 32); n != 0 {
		t.Fatalf("places of low behind critical's and default's messages: %d, want 0", n)
	}
	// Once they started (critical twice, default once), low's pass (0) is
	// the lowest: it fetches one message for the next slot to free.
	w.start(0)
	w.start(0)
	w.start(1)
	if n := w.places(2, 4, 4, 32); n != 1 {
		t.Fatalf("places of low whose turn is next: %d, want 1", n)
	}
	// Alone with ready work, low gets the whole prefetch.
	w.qs[0].ready, w.qs[1].ready = false, false
	if n := w.places(2, 4, 4, 32); n != 4 {
		t.Fatalf("places of low, alone with ready work: %d, want 4", n)
	}
}

// TestWeightsConfig: Validate reports every bad weight at once (0,
// negative, over the most, a bad queue name); New refuses weights for
// queues no type routes to; no weights (nil or empty), or one queue
// polled, leave the processor without a scheduler: the default paths of
// reserve and takeSlot, exactly as before weights existed.
func TestWeightsConfig(t *testing.T) {
	err := Config{QueueWeights: map[string]int{"low": 0, "mid": -2, "high": 1001, "Bad_Name": 3, "ok": 5}}.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate: %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{`QueueWeights["low"] = 0 is outside 1..1000`, `QueueWeights["mid"] = -2`, `QueueWeights["high"] = 1001`, `queue "Bad_Name"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v\nwant it to say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), `"ok"`) {
		t.Errorf("Validate complains about a good weight: %v", err)
	}
	if err := (Config{QueueWeights: map[string]int{"critical": 6, "low": 1}}).Validate(); err != nil {
		t.Fatalf("Validate good weights: %v", err)
	}

	st, err := embedded.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reg := registry.NewRegistry()
	if err := registry.Register(reg, func(context.Context, critCmd, *registry.Attempt) error { return nil }, registry.Options{Queue: "critical"}); err != nil {
		t.Fatal(err)
	}
	if err := registry.Register(reg, func(context.Context, lowCmd, *registry.Attempt) error { return nil }, registry.Options{Queue: "low"}); err != nil {
		t.Fatal(err)
	}
	_, err = New(st, reg, Config{QueueWeights: map[string]int{"critical": 6, "urgent": 9, "bulk": 1}})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "weights for unknown queues bulk, urgent") || !strings.Contains(err.Error(), "critical, low") {
		t.Fatalf("New with weights for unknown queues: %v", err)
	}
	p, err := New(st, reg, Config{})
	if err != nil || p.w != nil || p.Weights() != nil {
		t.Fatalf("New without weights: scheduler %v, %v", p.w, err)
	}
	p, err = New(st, reg, Config{QueueWeights: map[string]int{"critical": 6}})
	if err != nil || p.w == nil {
		t.Fatalf("New with weights: %v", err)
	}
	if got := p.Weights(); got["critical"] != 6 || got["low"] != 1 || len(got) != 2 {
		t.Fatalf("Weights %v, want critical 6 and low 1 (left out)", got)
	}
	if p, err = New(st, reg, Config{QueueWeights: map[string]int{}}); err != nil || p.w != nil {
		t.Fatalf("New with empty weights: scheduler %v, %v", p.w, err)
	}
	one := registry.NewRegistry()
	if err := registry.Register(one, func(context.Context, critCmd, *registry.Attempt) error { return nil }, registry.Options{Queue: "critical"}); err != nil {
		t.Fatal(err)
	}
	if p, err = New(st, one, Config{QueueWeights: map[string]int{"critical": 6}}); err != nil || p.w != nil {
		t.Fatalf("New with weights and one queue: scheduler %v, %v", p.w, err)
	}
}

type critCmd struct{}

func (critCmd) CommandType() string { return "t.critical" }

type lowCmd struct{}

func (lowCmd) CommandType() string { return "t.low" }

// TestWeightedRebase: passes near the overflow guard are moved back
// together, and the starts go on 6:3:1 exactly across it.
func TestWeightedRebase(t *testing.T) {
	w := sixThreeOne(1)
	w.vt = rebaseAt - 3*w.round
	for i, q := range w.qs {
		q.pass = w.vt + int64(i)
	}
	counts := make([]int, 3)
	for range 100 {
		for i := range w.qs {
			w.keepWaiting(i)
		}
		counts[w.step()]++
	}
	if w.vt > rebaseAt || counts[0] != 60 || counts[1] != 30 || counts[2] != 10 {
		t.Fatalf("after 100 starts: vt %d (guard %d), starts %v, want 60 30 10", w.vt, int64(rebaseAt), counts)
	}
}
