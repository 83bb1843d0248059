package processor

import (
	"slices"
	"testing"
)

// visitRound runs one round of qr's poller state after a wake-up and
// returns the shards it dequeues, every dequeue finding nothing.
func visitRound(qr *queueRunner) []int {
	var r round
	var seen []int
	woke := true
	for {
		seen = append(seen, r.next(qr, woke))
		woke = false
		if _, more := r.done(qr, nil, 0, 32); !more {
			return seen
		}
	}
}

// TestRoundVisitsEveryNamedShard: wake-ups that named several shards
// before the poller looked (their tokens coalesced into one) make a round
// that dequeues each of them at once; one named shard is a round of its
// own; a wake-up naming none visits every shard. (The poller remembered
// only the last shard named: a burst of issues to shards 0 and 2 dequeued
// shard 2, and shard 0's message waited for the idle poll, 10 minutes in
// TestShardsWakeUp.)
func TestRoundVisitsEveryNamedShard(t *testing.T) {
	for _, c := range []struct {
		named []int
		want  []int // shards that must be in the round
		size  int
	}{
		{named: []int{2}, want: []int{2}, size: 1},
		{named: []int{0, 2}, want: []int{0, 2}, size: 3},
		{named: []int{1, 2, 0}, want: []int{0, 1, 2}, size: 3},
		{named: nil, want: []int{0, 1, 2}, size: 3},
	} {
		qr := &queueRunner{shards: 3}
		for _, i := range c.named {
			qr.hint.Or(1 << i)
		}
		got := visitRound(qr)
		if len(got) != c.size {
			t.Errorf("named %v: round %v, want %d dequeues", c.named, got, c.size)
		}
		for _, w := range c.want {
			if !slices.Contains(got, w) {
				t.Errorf("named %v: round %v does not dequeue shard %d", c.named, got, w)
			}
		}
		if qr.hint.Load() != 0 {
			t.Errorf("named %v: hint %b left after the round", c.named, qr.hint.Load())
		}
	}
}
