//go:build !linux

package bench

import "time"

// maxRSSMiB is not measured on this platform (0).
func maxRSSMiB() float64 { return 0 }

// rssNow is not measured on this platform (0, 0).
func rssNow() (total, anon float64) { return 0, 0 }

// cpuTime is not measured on this platform (0).
func cpuTime() time.Duration { return 0 }
