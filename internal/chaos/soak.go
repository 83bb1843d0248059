package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The soak (make soak, CMDQ_CHAOS=soak): the chaos for an hour over both
// stores at about 10 faults a minute, with steady traffic. The Azure run
// spares serve and one worker from its kills (Scenario.Spare) and samples
// their resident memory and goroutines (Scenario.Sample), so that a leak
// shows as drift over the hour; the embedded run's one process is killed
// every few seconds, so it has nothing to sample.

// InvLeak: a spared process at rest after the run (every command final,
// no traffic) has more than leakMargin goroutines more than it had at the
// start: what ran under load has not all ended.
const InvLeak = "no-leak"

// leakMargin is the goroutines a process at rest may keep beyond its
// start: its HTTP connection pools (two goroutines per keep-alive
// connection, to storage and from clients, kept 90 s idle) hold up to
// about a hundred after a busy run. A leak of one goroutine per command
// passes it within a minute of the soak's traffic.
const leakMargin = 200

// MemSample is one sample of a spared process.
type MemSample struct {
	At         time.Time
	RSSKiB     int64 // VmRSS
	Goroutines int   // go_goroutines from its /metrics; -1 when unread
}

// MemSeries is a spared role's samples, over its processes (one, unless
// it exited on its own and was restarted).
type MemSeries struct {
	Role    string
	Samples []MemSample
	// Idle is the process at rest after the run settled: the fewest
	// goroutines (and their RSS) over 10 samples a second apart (nil
	// when not sampled).
	Idle *MemSample
}

// spared reports whether the kill loop leaves role alone.
func (w *world) spared(role string) bool { return slices.Contains(w.sc.Spare, role) }

// metricsURL returns the URL of role's Prometheus metrics ("" when it
// serves none, or has not said where yet): serve's is on its address; a
// spared worker binds a free port and logs its URL ("cmdq worker:
// serving metrics").
func (w *world) metricsURL(role string) string {
	if role == "serve" {
		return "http://" + w.addr + "/metrics"
	}
	p := w.ps.current(role)
	if p == nil {
		return ""
	}
	return loggedMetricsURL(p.log)
}

// loggedMetricsURL returns the metrics URL that the worker whose log is
// the file at path logged last ("" when none).
func loggedMetricsURL(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	url := ""
	for line := range bytes.Lines(b) {
		if !bytes.Contains(line, []byte("cmdq worker: serving metrics")) {
			continue
		}
		var l struct {
			URL string `json:"url"`
		}
		if json.Unmarshal(line, &l) == nil && l.URL != "" {
			url = l.URL
		}
	}
	return url
}

// sampleLoop samples the spared roles every Scenario.Sample until ctx
// ends.
func (w *world) sampleLoop(ctx context.Context) {
	t := time.NewTicker(w.sc.Sample)
	defer t.Stop()
	for {
		w.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *world) sampleOnce(ctx context.Context) {
	for _, role := range w.sc.Spare {
		p := w.ps.current(role)
		if p == nil || !p.alive() {
			continue
		}
		s := MemSample{At: time.Now(), RSSKiB: rssKiB(p.pid), Goroutines: -1}
		if u := w.metricsURL(role); u != "" {
			s.Goroutines = goroutines(ctx, u)
		}
		w.mu.Lock()
		i := slices.IndexFunc(w.mem, func(m MemSeries) bool { return m.Role == role })
		if i < 0 {
			w.mem = append(w.mem, MemSeries{Role: role})
			i = len(w.mem) - 1
		}
		w.mem[i].Samples = append(w.mem[i].Samples, s)
		w.mu.Unlock()
	}
}

// sampleIdle samples the spared roles at rest, after the run settled:
// the fewest goroutines of 10 samples a second apart (idle connections
// and timers wind down over a few seconds).
func (w *world) sampleIdle(ctx context.Context) {
	for range 10 {
		for _, role := range w.sc.Spare {
			p := w.ps.current(role)
			u := w.metricsURL(role)
			if p == nil || !p.alive() || u == "" {
				continue
			}
			s := MemSample{At: time.Now(), RSSKiB: rssKiB(p.pid), Goroutines: goroutines(ctx, u)}
			w.mu.Lock()
			for i := range w.mem {
				if m := &w.mem[i]; m.Role == role && s.Goroutines >= 0 && (m.Idle == nil || s.Goroutines < m.Idle.Goroutines) {
					m.Idle = &s
				}
			}
			w.mu.Unlock()
		}
		if !waitCtx(ctx, time.Second) {
			return
		}
	}
}

// rssKiB reads a process's VmRSS (0 when unreadable).
func rssKiB(pid int) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// goroutines reads go_goroutines from a Prometheus text page (-1 when
// unread).
func goroutines(ctx context.Context, url string) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(f)
			}
		}
	}
	return -1
}

// drift returns the medians of the second and the last tenth (at least
// one sample each) of f over ss: the first tenth is the warm-up (the
// processes start before the traffic does).
func drift(ss []MemSample, f func(MemSample) int64) (first, last int64) {
	n := max(1, len(ss)/10)
	from := ss[:n]
	if len(ss) >= 20 {
		from = ss[n : 2*n]
	}
	med := func(part []MemSample) int64 {
		var vs []int64
		for _, s := range part {
			if v := f(s); v >= 0 {
				vs = append(vs, v)
			}
		}
		if len(vs) == 0 {
			return -1
		}
		slices.Sort(vs)
		return vs[len(vs)/2]
	}
	return med(from), med(ss[len(ss)-n:])
}

// memFigures is the report's lines on the sampled roles, and the leaks
// found.
func memFigures(series []MemSeries) (lines []string, leaks []string) {
	for _, m := range series {
		if len(m.Samples) == 0 {
			continue
		}
		r0, r1 := drift(m.Samples, func(s MemSample) int64 { return s.RSSKiB })
		g0, g1 := drift(m.Samples, func(s MemSample) int64 { return int64(s.Goroutines) })
		span := m.Samples[len(m.Samples)-1].At.Sub(m.Samples[0].At).Round(time.Second)
		line := fmt.Sprintf("%s over %s (%d samples, medians of the second and last tenth): RSS %.1f → %.1f MiB (%+.1f), goroutines %d → %d (%+d)",
			m.Role, span, len(m.Samples), float64(r0)/1024, float64(r1)/1024, float64(r1-r0)/1024, g0, g1, g1-g0)
		if first, idle := m.Samples[0], m.Idle; idle != nil && first.Goroutines >= 0 {
			line += fmt.Sprintf("; at rest: goroutines %d at the start, %d after the settle, RSS %.1f MiB", first.Goroutines, idle.Goroutines, float64(idle.RSSKiB)/1024)
			if idle.Goroutines-first.Goroutines > leakMargin {
				leaks = append(leaks, fmt.Sprintf("%s: %d goroutines at rest after the run, %d at its start", m.Role, idle.Goroutines, first.Goroutines))
			}
		}
		lines = append(lines, line)
	}
	return lines, leaks
}
