package console

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// The recent commands page (GET /ui/commands): over a chosen range (1 h,
// 6 h, 24 h, 7 d) the commands changed in it, counted per state, charts of
// the outcomes and of the latency from issue to start per interval, the
// same per type and per queue, and the commands themselves, filtered by a
// type prefix, an ID prefix, a correlation ID and a state. One view is one
// read of the commands tables of the range (ListCommands with a summary:
// every row, events included, at most maxScannedRows); docs/dashboard.md
// states the cost.

// timeRange is one range the page offers.
type timeRange struct {
	Key      string        // the ?range= value
	Label    string        // "1 h"
	Span     time.Duration // how far back
	Interval time.Duration // one bar of the charts
	Refresh  int           // the page's refresh, seconds
}

// timeRanges are the ranges, shortest first; the first is the default.
var timeRanges = []timeRange{
	{"1h", "1 h", time.Hour, time.Minute, 10},
	{"6h", "6 h", 6 * time.Hour, 5 * time.Minute, 30},
	{"24h", "24 h", 24 * time.Hour, 15 * time.Minute, 60},
	{"7d", "7 d", 7 * 24 * time.Hour, 2 * time.Hour, 300},
}

// issuedSlack is how long before a range's start a command may have been
// issued and still be listed: the listing reads the day tables of the
// range and of the day before it (docs/dashboard.md, "Limits").
const issuedSlack = 24 * time.Hour

// listPreview is how much of each listed command's parameters the list
// shows (bytes).
const listPreview = 96

// chartAxis is one chart's y-axis: its top value and tick labels (top,
// middle, 0).
type chartAxis struct {
	Top   float64
	Ticks []string
}

// latencyChart is the chart of the latency from issue to start: a p95 bar
// behind a p50 bar per interval.
type latencyChart struct {
	Axis    chartAxis
	P95     []chartBar
	P50     []chartBar
	Samples int
	P50All  time.Duration
	P95All  time.Duration
}

type commandsBody struct {
	Range    timeRange
	Ranges   []rangeLink
	Type     string // type prefix
	IDPrefix string
	Corr     string
	State    cmdq.State
	Filtered bool // a type, ID or correlation filter is set
	Tabs     []stateTab
	Total    int
	Charts   []chart
	Latency  latencyChart
	ByType   []groupRow
	ByQueue  []groupRow
	From     time.Time // the range's first interval
	Mid      time.Time
	Rows     []commandRow
	NextURL  string
	FirstURL string
	Paged    bool
	Partial  bool
	Scanned  int
	Refresh  int
	Width    int
}

// rangeLink is one range choice with its link.
type rangeLink struct {
	timeRange
	URL string
	On  bool
}

// groupRow is one type's or queue's line of the breakdown.
type groupRow struct {
	cmdq.GroupCounts
	URL string // filters the page by it ("" for queues)
}

// commandsQuery is what the page's URL asks for.
type commandsQuery struct {
	rng                 timeRange
	typ, id, corr, cont string
	state               cmdq.State
	rangeSet            bool
}

// url returns the page's URL for q with the continuation cont.
func (d *dashboard) commandsPageURL(q commandsQuery, state cmdq.State, cont string) string {
	v := url.Values{}
	if q.rangeSet {
		v.Set("range", q.rng.Key)
	}
	if q.typ != "" {
		v.Set("type", q.typ)
	}
	if q.id != "" {
		v.Set("id", q.id)
	}
	if q.corr != "" {
		v.Set("correlation", q.corr)
	}
	if state != "" {
		v.Set("state", string(state))
	}
	if cont != "" {
		v.Set("continuation", cont)
	}
	if len(v) == 0 {
		return d.base + "/commands"
	}
	return d.base + "/commands?" + v.Encode()
}

// validIDPrefix reports whether s can start a command ID: hex digits and
// hyphens, at most 36.
func validIDPrefix(s string) bool {
	if s == "" || len(s) > 36 {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F' || r == '-') {
			return false
		}
	}
	return true
}

// commands answers GET /ui/commands.
func (d *dashboard) commands(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleReader)
	if !ok {
		return
	}
	qv := r.URL.Query()
	q := commandsQuery{rng: timeRanges[0], typ: strings.TrimSpace(qv.Get("type")), id: strings.TrimSpace(qv.Get("id")),
		corr: strings.TrimSpace(qv.Get("correlation")), state: cmdq.State(qv.Get("state")), cont: qv.Get("continuation")}
	if k := qv.Get("range"); k != "" {
		found := false
		for _, tr := range timeRanges {
			if tr.Key == k {
				q.rng, q.rangeSet, found = tr, true, true
			}
		}
		if !found {
			d.errorPage(w, r, v, http.StatusBadRequest, "Invalid range", fmt.Sprintf("%s is not a range of this page.", httpserve.QuoteClip(k)), "Use 1h, 6h, 24h or 7d (the range links of the page).")
			return
		}
	}
	if q.state != "" && !validState(q.state) {
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid state", fmt.Sprintf("%s is not a command state.", httpserve.QuoteClip(string(q.state))),
			"Use the state links of the page (pending, running, retrying, completed, poisoned, discarded, cancelled).")
		return
	}
	if q.typ != "" && (len(q.typ) > 128 || strings.ContainsAny(q.typ, "<>\"'&/\\ \t\r\n") || !utf8Printable(q.typ)) {
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid command type", fmt.Sprintf("%s is not a command type name or the start of one.", httpserve.QuoteClip(q.typ)),
			"Type names start with a letter, then letters, digits, '.', '_' or '-'; give the start of one, in any case.")
		return
	}
	if q.id != "" && !validIDPrefix(q.id) {
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid ID prefix", fmt.Sprintf("%s cannot start a command ID.", httpserve.QuoteClip(q.id)),
			"Command IDs are hexadecimal digits and hyphens (a UUID); give its first few characters.")
		return
	}
	if len(q.corr) > 256 {
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid correlation ID", "A correlation ID is at most 256 bytes.", "Paste the correlation ID exactly as it was issued.")
		return
	}
	now := d.now().UTC()
	from := now.Add(-q.rng.Span).Truncate(q.rng.Interval)
	page, err := d.src.Commands(r.Context(), cmdq.CommandQuery{TypePrefix: q.typ, IDPrefix: q.id, CorrelationID: q.corr, State: q.state,
		Since: from, IssuedSince: from.Add(-issuedSlack), Interval: q.rng.Interval, Newest: true, Summary: true,
		Limit: recentPageSize, Continuation: q.cont, ScanLimit: maxScannedRows, ParamsPreview: listPreview})
	if err != nil {
		d.fail(w, r, v, err)
		return
	}
	b := commandsBody{Range: q.rng, Type: q.typ, IDPrefix: q.id, Corr: q.corr, State: q.state, From: from, Mid: from.Add(now.Sub(from) / 2),
		Refresh: q.rng.Refresh, Width: lastErrorWidth, FirstURL: d.commandsPageURL(q, q.state, ""), Paged: q.cont != "",
		Filtered: q.typ != "" || q.id != "" || q.corr != ""}
	for _, tr := range timeRanges {
		rq := q
		rq.rng, rq.rangeSet = tr, tr.Key != timeRanges[0].Key
		b.Ranges = append(b.Ranges, rangeLink{timeRange: tr, URL: d.commandsPageURL(rq, q.state, ""), On: tr.Key == q.rng.Key})
	}
	if page.Continuation != "" {
		b.NextURL = d.commandsPageURL(q, q.state, page.Continuation)
	}
	if sum := page.Summary; sum != nil {
		b.Partial, b.Scanned = sum.Partial, sum.Rows
		for _, n := range sum.Counts {
			b.Total += n
		}
		b.Tabs = append(b.Tabs, stateTab{Count: b.Total, URL: d.commandsPageURL(q, "", ""), On: q.state == ""})
		for _, s := range stateOrder {
			if s == cmdq.StateScheduled && sum.Counts[s] == 0 && q.state != s {
				continue // shown only when some command is scheduled
			}
			b.Tabs = append(b.Tabs, stateTab{State: s, Count: sum.Counts[s], URL: d.commandsPageURL(q, s, ""), On: q.state == s})
		}
		b.Charts = charts(sum.Intervals, q.rng)
		b.Latency = latencyChartOf(sum.Intervals, sum.Latency)
		for _, g := range sum.ByType {
			tq := q
			tq.typ = g.Name
			b.ByType = append(b.ByType, groupRow{GroupCounts: g, URL: d.commandsPageURL(tq, q.state, "")})
		}
		for _, g := range sum.ByQueue {
			b.ByQueue = append(b.ByQueue, groupRow{GroupCounts: g})
		}
	}
	for _, st := range page.Commands {
		row := commandRow{Status: st, Params: page.Params[st.ID], Since: page.Started[st.ID]}
		if st.State == cmdq.StatePending || st.State == cmdq.StateRetrying {
			if f, ok := d.src.InFlight(st.ID); ok {
				row.Running, row.Since = true, f.Started
			}
		}
		b.Rows = append(b.Rows, row)
	}
	pd := d.data(v, "Commands", "commands", b)
	pd.Flash = d.takeFlash(w, r, v)
	d.render(w, r, http.StatusOK, "commands", pd)
}

// utf8Printable reports whether s has no control characters.
func utf8Printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return false
		}
	}
	return true
}

// validState reports whether s names a lifecycle state.
func validState(s cmdq.State) bool {
	for _, x := range stateOrder {
		if s == x {
			return true
		}
	}
	return false
}

// stateOrder is the order of the states on the page.
var stateOrder = []cmdq.State{cmdq.StateScheduled, cmdq.StatePending, cmdq.StateRunning, cmdq.StateRetrying, cmdq.StateCompleted, cmdq.StatePoisoned, cmdq.StateDiscarded, cmdq.StateCancelled}

// stateTab is one state filter with its count.
type stateTab struct {
	State cmdq.State // "" for all
	Count int
	URL   string
	On    bool
}

// commandRow is one command of a listing, with what this server's
// processor knows of it.
type commandRow struct {
	cmdq.Status
	// Running: this server's processor runs its handler now, although the
	// stored state is still pending or retrying (the started event is
	// written lazily).
	Running bool
	// Since is when its current attempt started, for a running command
	// (zero when unknown).
	Since time.Time
	// Params is the start of its compact parameters.
	Params string
}

// chart is one series of outcomes per interval, drawn as bars.
type chart struct {
	Name  string // "Completed", …
	Class string // its colour class in cmdq.css
	Total int
	Max   int
	Per   string // the interval, "min", "5 min", "2 h"
	Axis  chartAxis
	Bars  []chartBar
}

// chartBar is one interval's bar, in the SVG's coordinates (viewBox 0 0
// chartWidth chartHeight).
type chartBar struct {
	X, Y, W, H string
	Title      string
}

// The charts' SVG coordinate space.
const (
	chartWidth  = 600
	chartHeight = 100
)

// niceTop returns the smallest 1, 2 or 5 × 10^k at or above v (1 for v ≤ 0).
func niceTop(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// countAxis is the y-axis of a count chart whose peak is max: its top is
// 2, 4 or 10 × 10^k, so that the middle tick is a whole number too.
func countAxis(peak int) chartAxis {
	top := 2.0
	for p := 1.0; top < float64(peak); p *= 10 {
		for _, m := range []float64{2, 4, 10} {
			if top = m * p; top >= float64(peak) {
				break
			}
		}
	}
	mid := strconv.FormatFloat(top/2, 'f', -1, 64)
	return chartAxis{Top: top, Ticks: []string{strconv.FormatFloat(top, 'f', -1, 64), mid, "0"}}
}

// durationLabel writes a latency compactly: "850 ms", "1.2 s", "3 min".
func durationLabel(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return strconv.FormatFloat(d.Minutes(), 'f', 1, 64) + " min"
	}
	return strconv.FormatFloat(d.Hours(), 'f', 1, 64) + " h"
}

// intervalName names a chart interval: "min", "5 min", "2 h".
func intervalName(d time.Duration) string {
	switch {
	case d == time.Minute:
		return "min"
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d/time.Minute))
	case d == time.Hour:
		return "h"
	}
	return fmt.Sprintf("%d h", int(d/time.Hour))
}

// barTime names an interval's start for a bar's title: the time of day,
// with the date for ranges over a day.
func barTime(t time.Time, rng timeRange) string {
	if rng.Span > 24*time.Hour {
		return t.UTC().Format("Jan 2 15:04") + " UTC"
	}
	return t.UTC().Format("15:04") + " UTC"
}

// charts draws the completed, failed and poisoned events per interval.
func charts(minutes []cmdq.IntervalCounts, rng timeRange) []chart {
	series := []struct {
		name, class string
		of          func(cmdq.IntervalCounts) int
	}{
		{"Completed", "c-completed", func(m cmdq.IntervalCounts) int { return m.Completed }},
		{"Failed attempts", "c-failed", func(m cmdq.IntervalCounts) int { return m.Failed }},
		{"Poisoned", "c-poisoned", func(m cmdq.IntervalCounts) int { return m.Poisoned }},
	}
	out := make([]chart, 0, len(series))
	n := len(minutes)
	for _, s := range series {
		c := chart{Name: s.name, Class: s.class, Per: intervalName(rng.Interval)}
		for _, m := range minutes {
			v := s.of(m)
			c.Total += v
			c.Max = max(c.Max, v)
		}
		c.Axis = countAxis(c.Max)
		if n > 0 {
			slot := float64(chartWidth) / float64(n)
			for i, m := range minutes {
				v := s.of(m)
				if v == 0 {
					continue
				}
				h := max(float64(v)/c.Axis.Top*chartHeight, 1.5)
				c.Bars = append(c.Bars, chartBar{
					X: num(float64(i)*slot + slot*0.1), W: num(slot * 0.8), Y: num(chartHeight - h), H: num(h),
					Title: fmt.Sprintf("%s: %d %s", barTime(m.Start, rng), v, strings.ToLower(s.name)),
				})
			}
		}
		out = append(out, c)
	}
	return out
}

// latencyChartOf draws the p50 and p95 latency per interval.
func latencyChartOf(minutes []cmdq.IntervalCounts, all cmdq.Latency) latencyChart {
	lc := latencyChart{Samples: all.Started, P50All: all.LatencyP50, P95All: all.LatencyP95}
	var peak time.Duration
	for _, m := range minutes {
		peak = max(peak, m.LatencyP95)
	}
	unit, name := time.Millisecond, "ms"
	if peak >= 10*time.Second {
		unit, name = time.Second, "s"
	}
	top := niceTop(float64(peak) / float64(unit))
	lc.Axis = chartAxis{Top: top, Ticks: []string{strconv.FormatFloat(top, 'f', -1, 64) + " " + name, strconv.FormatFloat(top/2, 'f', -1, 64) + " " + name, "0"}}
	n := len(minutes)
	if n == 0 {
		return lc
	}
	slot := float64(chartWidth) / float64(n)
	for i, m := range minutes {
		if m.Started == 0 {
			continue
		}
		bar := func(d time.Duration, inset float64, what string) chartBar {
			h := max(float64(d)/float64(unit)/top*chartHeight, 1.5)
			return chartBar{X: num(float64(i)*slot + slot*inset), W: num(slot * (1 - 2*inset)), Y: num(chartHeight - h), H: num(h),
				Title: fmt.Sprintf("%s: %s %s (%d started)", m.Start.UTC().Format("Jan 2 15:04 UTC"), what, durationLabel(d), m.Started)}
		}
		lc.P95 = append(lc.P95, bar(m.LatencyP95, 0.1, "p95"))
		lc.P50 = append(lc.P50, bar(m.LatencyP50, 0.25, "p50"))
	}
	return lc
}

// num formats an SVG coordinate.
func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }
