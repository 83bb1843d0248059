package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCheckFlowControl: the flow-control checks find what breaks them and
// pass what does not: three demo.sleep runs at once over a limit of 2 (a
// run with no end line lasting until its process's kill), and two
// commands of one order key whose runs overlap, the later place first.
func TestCheckFlowControl(t *testing.T) {
	ps := fakeProcs{procs: map[string]*proc{}}
	sleep := func(id, worker string, begin, end int) (*command, *execution) {
		x := run(worker, 1, 1, begin, end, "")
		x.ID = id
		return acceptedCmd(id, "demo.sleep", `{"ms":1}`, false), x
	}
	limited := func(limit int, spans ...[2]int) []string {
		r := &Report{}
		var cmds []*command
		j := &journal{byID: map[string][]*execution{}}
		for i, s := range spans {
			id := string(rune('a' + i))
			c, x := sleep(id, "w", s[0], s[1])
			cmds = append(cmds, c)
			j.byID[id] = []*execution{x}
		}
		var inv []string
		checkLimit(r, func(i, _, _ string, _ ...any) { inv = append(inv, i) }, limit, cmds, j, ps)
		return inv
	}
	if got := limited(2, [2]int{0, 10}, [2]int{5, 15}, [2]int{10, 20}); len(got) != 0 {
		t.Errorf("two at a time (one ending as the third begins) under a limit of 2: %v", got)
	}
	if got := limited(2, [2]int{0, 10}, [2]int{5, 15}, [2]int{9, 20}); !slices.Contains(got, InvLimit) {
		t.Errorf("three at once under a limit of 2 not found: %v", got)
	}

	ordered := func(aSpan, bSpan [2]int) []string {
		a, xa := sleep("a", "w1", aSpan[0], aSpan[1])
		b, xb := sleep("b", "w2", bSpan[0], bSpan[1])
		a.OrderKey, b.OrderKey = "k", "k"
		snap := &snapshot{cmds: map[string]*history{
			"a": {ID: "a", Found: true, OrderKey: "k", OrderSeq: 1},
			"b": {ID: "b", Found: true, OrderKey: "k", OrderSeq: 2},
		}}
		j := &journal{byID: map[string][]*execution{"a": {xa}, "b": {xb}}}
		var inv []string
		checkOrder(&Report{}, func(i, _, _ string, _ ...any) { inv = append(inv, i) }, []*command{b, a}, snap, j, ps)
		return inv
	}
	if got := ordered([2]int{0, 10}, [2]int{10, 20}); len(got) != 0 {
		t.Errorf("one after the other in their places: %v", got)
	}
	if got := ordered([2]int{0, 10}, [2]int{5, 20}); !slices.Contains(got, InvOrder) {
		t.Errorf("overlapping runs of one key not found: %v", got)
	}
	if got := ordered([2]int{10, 20}, [2]int{0, 5}); !slices.Contains(got, InvOrder) {
		t.Errorf("the later place running first not found: %v", got)
	}
}

// TestMemFigures: the soak's drift compares the second tenth of the
// samples (after the warm-up) with the last, and a leak is a process that,
// at rest after the run, has more than leakMargin goroutines beyond its
// start — not one whose goroutines follow the load.
func TestMemFigures(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	series := func(g func(i int) int, idle int) MemSeries {
		m := MemSeries{Role: "w3", Idle: &MemSample{At: t0.Add(time.Hour), RSSKiB: 40 << 10, Goroutines: idle}}
		for i := range 100 {
			m.Samples = append(m.Samples, MemSample{At: t0.Add(time.Duration(i) * 30 * time.Second), RSSKiB: 40 << 10, Goroutines: g(i)})
		}
		return m
	}
	underLoad := series(func(i int) int { return 30 + 2*i }, 34)
	leak := series(func(i int) int { return 30 + 2*i }, 30+leakMargin+1)
	if lines, leaks := memFigures([]MemSeries{underLoad}); len(leaks) != 0 || len(lines) != 1 || !strings.Contains(lines[0], "at rest: goroutines 30 at the start, 34 after the settle") {
		t.Fatalf("goroutines that follow the load and return: leaks %v (%v)", leaks, lines)
	}
	if _, leaks := memFigures([]MemSeries{leak}); len(leaks) != 1 {
		t.Fatalf("%d goroutines at rest after starting with 30: leaks %v, want one", 30+leakMargin+1, leaks)
	}
}
