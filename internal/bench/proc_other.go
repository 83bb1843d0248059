//go:build !linux

package bench

// maxRSSMiB is not measured on this platform (0).
func maxRSSMiB() float64 { return 0 }

// rssNow is not measured on this platform (0, 0).
func rssNow() (total, anon float64) { return 0, 0 }
