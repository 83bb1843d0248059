package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"
)

// Flow control in the chaos runs. With Scenario.Limit, demo.sleep is
// capped across every process (--global-concurrency demo.sleep=N on
// serve and every worker), and the checker holds the journal to it: no
// more than N demo.sleep handlers ran at once, whatever kills and faults
// did. With Scenario.Ordered, a share of the commands that are due at
// once (demo.echo, demo.sleep, demo.steps) carry one of orderKeys order
// keys, and the checker holds each key's commands to running one at a
// time, in the order they joined the key (their rows' OrderSeq).

// orderKeys is how many order keys the ordered commands share.
const orderKeys = 4

// limitedType is the demo type Scenario.Limit caps.
const limitedType = "demo.sleep"

// Invariants of flow control.
const (
	// InvLimit: no more handlers of the limited type ran at once, as the
	// journal records them, than its global concurrency limit.
	InvLimit = "global-limit"
	// InvOrder: the commands of one order key never ran at once, and ran
	// in the order they joined the key.
	InvOrder = "order-key"
)

// order gives a share (0..1) of cmds an order key: the ones due at once of
// the kinds that complete without a planned failure.
func order(rng *rand.Rand, cmds []*command, share float64) {
	for _, c := range cmds {
		if share <= 0 || c.Delay > 0 || (c.Type != "demo.echo" && c.Type != "demo.sleep" && c.Type != "demo.steps") || rng.Float64() >= share {
			continue
		}
		c.OrderKey = fmt.Sprintf("aggregate-%d", rng.IntN(orderKeys))
		c.body, _ = json.Marshal(map[string]any{"id": c.ID, "type": c.Type, "params": json.RawMessage(c.Params), "orderKey": c.OrderKey})
	}
}

// span is one execution as an interval of the journal's clock: from its
// begin line to its end line or, when it has none, its process's kill.
type span struct {
	x          *execution
	from, to   time.Time
	unfinished bool // no end line and no kill: it may still run
}

// spanOf returns x's interval.
func spanOf(x *execution, ps procInfo) span {
	s := span{x: x, from: x.BeginT, to: x.EndT}
	if x.End < 0 {
		if k := killedAt(ps.byWorker(x.Worker)); !k.IsZero() {
			s.to = k
		} else {
			s.to, s.unfinished = time.Now().Add(time.Hour), true
		}
	}
	return s
}

// checkLimit holds the executions of limitedType to limit at once.
func checkLimit(r *Report, add func(inv, id, format string, args ...any), limit int, cmds []*command, j *journal, ps procInfo) {
	if limit <= 0 {
		return
	}
	type edge struct {
		at    time.Time
		delta int
		s     span
	}
	var edges []edge
	for _, c := range cmds {
		if c.Type != limitedType || !c.isAccepted() {
			continue
		}
		for _, x := range j.byID[c.ID] {
			s := spanOf(x, ps)
			edges = append(edges, edge{s.from, +1, s}, edge{s.to, -1, s})
		}
	}
	// Ends before begins at the same instant: [from, to) intervals.
	sort.Slice(edges, func(i, k int) bool {
		if !edges[i].at.Equal(edges[k].at) {
			return edges[i].at.Before(edges[k].at)
		}
		return edges[i].delta < edges[k].delta
	})
	running := map[*execution]bool{}
	for _, e := range edges {
		if e.delta < 0 {
			delete(running, e.s.x)
			continue
		}
		running[e.s.x] = true
		if n := len(running); n > r.LimitPeak {
			r.LimitPeak = n
		}
		if len(running) > limit {
			var who []string
			for x := range running {
				who = append(who, x.String())
			}
			sort.Strings(who)
			add(InvLimit, e.s.x.ID, "%d handlers of %s ran at once at %s, over the limit of %d: %v", len(running), limitedType, e.at.Format("15:04:05.000"), limit, who)
		}
	}
}

// checkOrder holds each order key's commands to one at a time, in the
// order of their places (OrderSeq).
func checkOrder(r *Report, add func(inv, id, format string, args ...any), cmds []*command, snap *snapshot, j *journal, ps procInfo) {
	byKey := map[string][]*command{}
	for _, c := range cmds {
		if c.OrderKey == "" || !c.isAccepted() {
			continue
		}
		h := snap.cmds[c.ID]
		if h == nil || !h.Found {
			continue // lost: checked elsewhere
		}
		if h.OrderKey != c.OrderKey || h.OrderSeq <= 0 {
			add(InvOrder, c.ID, "issued with order key %q, stored with key %q at place %d", c.OrderKey, h.OrderKey, h.OrderSeq)
			continue
		}
		r.Ordered++
		byKey[c.OrderKey] = append(byKey[c.OrderKey], c)
	}
	for key, cs := range byKey {
		sort.Slice(cs, func(i, k int) bool { return snap.cmds[cs[i].ID].OrderSeq < snap.cmds[cs[k].ID].OrderSeq })
		for i, a := range cs {
			for _, b := range cs[i+1:] {
				for _, xa := range j.byID[a.ID] {
					sa := spanOf(xa, ps)
					for _, xb := range j.byID[b.ID] {
						if sb := spanOf(xb, ps); sb.from.Before(sa.to) {
							add(InvOrder, b.ID, "key %s: %s (place %d) began at %s, before %s (place %d) ended at %s: %s / %s", key,
								b.ID, snap.cmds[b.ID].OrderSeq, sb.from.Format("15:04:05.000"), a.ID, snap.cmds[a.ID].OrderSeq, sa.to.Format("15:04:05.000"), xb, xa)
						}
					}
				}
			}
		}
	}
}
