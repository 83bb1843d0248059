//go:build linux

package bench

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// maxRSSMiB returns the process's peak resident set size in MiB (getrusage
// ru_maxrss, which Linux reports in KiB).
func maxRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024
}

// cpuTime returns the process's CPU time so far (user + system, every
// thread: the engine's background flushes and compactions included).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssNow returns the resident set size and its anonymous part (heap,
// stacks; the rest is file pages such as the embedded store's mmap), MiB,
// from /proc/self/status.
func rssNow() (total, anon float64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			total = kb / 1024
		case "RssAnon:":
			anon = kb / 1024
		}
	}
	return total, anon
}
