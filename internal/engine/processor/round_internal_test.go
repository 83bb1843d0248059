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
		{named: []int{0, 2}, want: []int{0, 2}, size: 2},
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

// TestRoundWokenMidwayKeepsItsShards: a wake-up that arrives while a round
// is under way adds its shard to the round and cuts off none of the shards
// the round has still to visit. (A new round for the newly named shard
// alone left shard 2's message, whose wake-up the round's start had
// spent, to the idle poll: TestShardsWakeUp failed under load.)
func TestRoundWokenMidwayKeepsItsShards(t *testing.T) {
	qr := &queueRunner{shards: 3}
	qr.hint.Or(1<<1 | 1<<2)
	var r round
	var seen []int
	seen = append(seen, r.next(qr, true))
	if _, more := r.done(qr, nil, 1, 32); !more {
		t.Fatalf("round ended after shard %v, want it to go on", seen)
	}
	qr.hint.Or(1 << 0) // issued to shard 0 meanwhile: a wake-up naming it
	woke := true
	for {
		seen = append(seen, r.next(qr, woke))
		woke = false
		if _, more := r.done(qr, nil, 1, 32); !more {
			break
		}
	}
	for _, w := range []int{0, 1, 2} {
		if !slices.Contains(seen, w) {
			t.Errorf("round %v does not dequeue shard %d", seen, w)
		}
	}
	if len(seen) != 3 {
		t.Errorf("round %v, want 3 dequeues", seen)
	}
}
