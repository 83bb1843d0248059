package console

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// The live feed of a command's page (GET /ui/commands/{id}/live: an event
// stream saying when to refresh), and the recent commands page's settings
// (commands.go). Storage is reached only through d.src (dashsource.go);
// docs/dashboard.md states what each costs.

// Settings of the recent commands page and the live feed.
const (
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
	id := cmdq.NormalizeID(r.PathValue("id"))
	if err := cmdq.ValidateID(id); err != nil {
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
func immutableState(s cmdq.State) bool {
	return s == cmdq.StateCompleted || s == cmdq.StateDiscarded || s == cmdq.StateCancelled
}

// runningNote is what the command page and the listing say of a command
// this server's processor runs before its started event is written.
func runningNote(f cmdq.RunningCommand, now time.Time) string {
	runFor := strings.TrimSuffix(relTime(now, f.Started), " ago")
	if runFor == "just now" {
		runFor = "less than a second"
	}
	return fmt.Sprintf("attempt %d has been running on this server's processor (%s) for %s; the stored state says otherwise until the started event is written (after about 1 s, or with the outcome)",
		f.Attempt, f.Worker, runFor)
}
