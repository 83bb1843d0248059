package faultproxy

import (
	"testing"
	"time"
)

// TestLatencyJitter: each chunk's delay is latency plus a fresh uniform
// draw in [−jitter, +jitter), and latency toxics on one stream add up.
func TestLatencyJitter(t *testing.T) {
	f, err := parse(Toxic{Type: Latency, Attrs: map[string]any{"latency": 100, "jitter": 50}})
	if err != nil {
		t.Fatal(err)
	}
	s := &streamState{latency: []*fault{f}}
	lo, hi := time.Hour, time.Duration(0)
	for range 1000 {
		d := s.delay()
		if d < 50*time.Millisecond || d >= 150*time.Millisecond {
			t.Fatalf("latency 100 ms ± 50 ms drew %s", d)
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	// 1000 uniform draws all missing a tenth of the range at one end:
	// a chance of 0.9^1000.
	if lo > 60*time.Millisecond || hi < 140*time.Millisecond {
		t.Fatalf("1000 draws of 100 ms ± 50 ms spread over [%s, %s] only", lo, hi)
	}
	g, err := parse(Toxic{Type: Latency, Attrs: map[string]any{"latency": 20.5}})
	if err != nil {
		t.Fatal(err)
	}
	s.latency = append(s.latency, g)
	if d := s.delay(); d < 70500*time.Microsecond || d >= 170500*time.Microsecond {
		t.Fatalf("100 ms ± 50 ms plus 20.5 ms drew %s", d)
	}
}
