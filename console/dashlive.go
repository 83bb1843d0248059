package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/cmdqtype"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// The operator page's recent commands (GET /ui/commands: counts per state,
// charts of outcomes per minute, the commands changed in the last hour)
// and the live feed of a command's page (GET /ui/commands/{id}/live: an
// event stream saying when to refresh). Storage is reached only through
// d.src (dashsource.go); docs/dashboard.md states what each costs.

// Settings of the recent commands page and the live feed.
const (
	// refreshCommands is the recent commands page's refresh, in seconds
	// (each refresh reads the whole commands table).
	refreshCommands = 10
	// recentWindow is how far back the recent commands page looks.
	recentWindow = time.Hour
	// recentPageSize is how many commands one page of it lists.
	recentPageSize = 50
	// maxScannedRows bounds the rows one view of it reads (100 requests
	// on Azure); beyond, the page says its figures are partial.
	maxScannedRows = 100_000
	// liveHeartbeat is how often the live feed says it is alive (the
	// page's "updated N s ago" counts from it).
	liveHeartbeat = 5 * time.Second
	// liveRetryMillis is the reconnection delay the live feed suggests.
	liveRetryMillis = 3000
)

// stateOrder is the order of the states on the page.
var stateOrder = []cmdqtype.State{cmdqtype.StatePending, cmdqtype.StateRunning, cmdqtype.StateRetrying, cmdqtype.StateCompleted, cmdqtype.StatePoisoned, cmdqtype.StateDiscarded, cmdqtype.StateCancelled}

// stateTab is one state filter with its count.
type stateTab struct {
	State cmdqtype.State // "" for all
	Count int
	URL   string
	On    bool
}

// commandRow is one command of a listing, with what this server's
// processor knows of it.
type commandRow struct {
	cmdqtype.Status
	// Running: this server's processor runs its handler now, although the
	// stored state is still pending or retrying (the started event is
	// written lazily).
	Running bool
}

// chart is one series of outcomes per minute, drawn as bars.
type chart struct {
	Name  string // "Completed", …
	Class string // its colour class in cmdq.css
	Total int
	Max   int
	Bars  []chartBar
}

// chartBar is one minute's bar, in the SVG's coordinates (viewBox 0 0
// chartWidth chartHeight).
type chartBar struct {
	X, Y, W, H string
	Title      string
}

// The charts' SVG coordinate space.
const (
	chartWidth  = 600
	chartHeight = 60
)

type commandsBody struct {
	Type     string
	State    cmdqtype.State
	Tabs     []stateTab
	Total    int
	Charts   []chart
	From     time.Time // the window's first minute
	Rows     []commandRow
	NextURL  string
	FirstURL string
	Paged    bool
	Partial  bool
	Scanned  int
	Refresh  int
	Width    int
}

// commandsURL is the recent commands page's URL for a type, a state and a
// continuation.
func (d *dashboard) commandsURL(typ string, state cmdqtype.State, cont string) string {
	q := url.Values{}
	if typ != "" {
		q.Set("type", typ)
	}
	if state != "" {
		q.Set("state", string(state))
	}
	if cont != "" {
		q.Set("continuation", cont)
	}
	if len(q) == 0 {
		return d.base + "/commands"
	}
	return d.base + "/commands?" + q.Encode()
}

// commands answers GET /ui/commands: the commands changed in the last
// hour, newest first, filtered by type and state, with their counts per
// state and the outcomes per minute.
func (d *dashboard) commands(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleReader)
	if !ok {
		return
	}
	q := r.URL.Query()
	typ := strings.TrimSpace(q.Get("type"))
	state := cmdqtype.State(q.Get("state"))
	if state != "" && !validState(state) {
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid state", fmt.Sprintf("%s is not a command state.", httpserve.QuoteClip(string(state))),
			"Use the state links of the page (pending, running, retrying, completed, poisoned, discarded).")
		return
	}
	if typ != "" && cmdqtype.ValidateType(typ) != nil {
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid command type", fmt.Sprintf("%s is not a command type name.", httpserve.QuoteClip(typ)),
			"Type names start with a letter, then letters, digits, '.', '_' or '-'.")
		return
	}
	now := d.now().UTC()
	from := now.Add(-recentWindow).Truncate(time.Minute)
	page, err := d.src.Commands(r.Context(), cmdqtype.CommandQuery{Type: typ, State: state, Since: from, Newest: true, Summary: true,
		Limit: recentPageSize, Continuation: q.Get("continuation"), ScanLimit: maxScannedRows})
	if err != nil {
		d.fail(w, r, v, err)
		return
	}
	b := commandsBody{Type: typ, State: state, From: from, Refresh: refreshCommands, Width: lastErrorWidth,
		FirstURL: d.commandsURL(typ, state, ""), Paged: q.Get("continuation") != ""}
	if page.Continuation != "" {
		b.NextURL = d.commandsURL(typ, state, page.Continuation)
	}
	if sum := page.Summary; sum != nil {
		b.Partial, b.Scanned = sum.Partial, sum.Rows
		for _, n := range sum.Counts {
			b.Total += n
		}
		b.Tabs = append(b.Tabs, stateTab{Count: b.Total, URL: d.commandsURL(typ, "", ""), On: state == ""})
		for _, s := range stateOrder {
			b.Tabs = append(b.Tabs, stateTab{State: s, Count: sum.Counts[s], URL: d.commandsURL(typ, s, ""), On: state == s})
		}
		b.Charts = charts(sum.Minutes)
	}
	for _, st := range page.Commands {
		row := commandRow{Status: st}
		if st.State == cmdqtype.StatePending || st.State == cmdqtype.StateRetrying {
			_, row.Running = d.src.InFlight(st.ID)
		}
		b.Rows = append(b.Rows, row)
	}
	pd := d.data(v, "Commands", "commands", b)
	pd.Flash = d.takeFlash(w, r, v)
	d.render(w, r, http.StatusOK, "commands", pd)
}

// validState reports whether s names a lifecycle state.
func validState(s cmdqtype.State) bool {
	for _, x := range stateOrder {
		if s == x {
			return true
		}
	}
	return false
}

// charts draws the completed, failed and poisoned events per minute.
func charts(minutes []cmdqtype.MinuteCounts) []chart {
	series := []struct {
		name, class string
		of          func(cmdqtype.MinuteCounts) int
	}{
		{"Completed", "c-completed", func(m cmdqtype.MinuteCounts) int { return m.Completed }},
		{"Failed attempts", "c-failed", func(m cmdqtype.MinuteCounts) int { return m.Failed }},
		{"Poisoned", "c-poisoned", func(m cmdqtype.MinuteCounts) int { return m.Poisoned }},
	}
	out := make([]chart, 0, len(series))
	n := len(minutes)
	for _, s := range series {
		c := chart{Name: s.name, Class: s.class}
		for _, m := range minutes {
			v := s.of(m)
			c.Total += v
			c.Max = max(c.Max, v)
		}
		if n > 0 {
			slot := float64(chartWidth) / float64(n)
			for i, m := range minutes {
				v := s.of(m)
				if v == 0 {
					continue
				}
				h := max(float64(v)/float64(c.Max)*chartHeight, 2)
				c.Bars = append(c.Bars, chartBar{
					X: num(float64(i)*slot + slot*0.1), W: num(slot * 0.8), Y: num(chartHeight - h), H: num(h),
					Title: fmt.Sprintf("%s UTC: %d %s", m.Start.UTC().Format("15:04"), v, strings.ToLower(s.name)),
				})
			}
		}
		out = append(out, c)
	}
	return out
}

// num formats an SVG coordinate.
func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// live answers GET /ui/commands/{id}/live, the change feed of a command's
// page: an event stream that sends "change" (data: the status's ETag)
// whenever the page may show something new (the status changed, or this
// server's processor started or ended a handler of it) and "alive" (data:
// the server's time) every liveHeartbeat; live.js refreshes the page on
// "change". It ends after Config.MaxStream (the browser reconnects) or
// once the command is completed or discarded; for such a command it
// answers 204, which stops the browser's reconnecting.
func (d *dashboard) live(w http.ResponseWriter, r *http.Request) {
	if _, ok := d.require(w, r, RoleReader); !ok {
		return
	}
	id := cmdqtype.NormalizeID(r.PathValue("id"))
	if err := cmdqtype.ValidateID(id); err != nil {
		http.Error(w, "not a command ID", http.StatusBadRequest)
		return
	}
	watch := d.src.Watch(id)
	defer watch.Close()
	sctx, cancel := d.set.StorageCtx(r)
	st, _, changed, err := watch.Current(sctx)
	cancel()
	if err != nil {
		code := http.StatusServiceUnavailable
		if httpserve.NotFound(err) {
			code = http.StatusNotFound
		}
		http.Error(w, http.StatusText(code), code)
		return
	}
	if immutableState(st.State) {
		// Nothing will change: EventSource stops reconnecting on 204.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h := w.Header()
	h.Set("Content-Type", httpserve.EventStream)
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sw := httpserve.NewSSEWriter(w, liveHeartbeat+d.set.RequestTimeout)
	alive := func() bool {
		sw.Printf("retry: %d\nevent: alive\ndata: %s\n\n", liveRetryMillis, d.now().UTC().Format(time.RFC3339Nano))
		return sw.Flush()
	}
	if !alive() {
		return
	}
	heartbeat := time.NewTicker(liveHeartbeat)
	defer heartbeat.Stop()
	end := time.NewTimer(d.set.MaxStream)
	defer end.Stop()
	for {
		select {
		case <-changed:
		case <-heartbeat.C:
			if !alive() {
				return
			}
			continue
		case <-end.C:
			return
		case <-r.Context().Done():
			return
		}
		sctx, cancel := d.set.StorageCtx(r)
		var tag string
		st, tag, changed, err = watch.Current(sctx)
		cancel()
		if err != nil {
			return
		}
		sw.Printf("event: change\ndata: %s\n\n", tag)
		if !sw.Flush() || immutableState(st.State) {
			return
		}
	}
}

// immutableState reports whether a command in state s never changes.
func immutableState(s cmdqtype.State) bool {
	return s == cmdqtype.StateCompleted || s == cmdqtype.StateDiscarded || s == cmdqtype.StateCancelled
}

// runningNote is what the command page and the listing say of a command
// this server's processor runs before its started event is written.
func runningNote(f cmdq.InFlight, now time.Time) string {
	return fmt.Sprintf("attempt %d has been running on this server's processor (%s) for %s; the stored state says otherwise until the started event is written (after about 1 s, or with the outcome)",
		f.Attempt, f.Worker, strings.TrimSuffix(relTime(now, f.Started), " ago"))
}
