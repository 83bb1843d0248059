package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
	"github.com/cmdq-dev/cmdq/storage"
)

// Cancelling commands (a command page's Cancel…, the commands view's bulk
// action, each behind a confirmation page) and the queues view with its
// pause and resume buttons. docs/dashboard.md says what each costs.

// refreshQueues is the queues view's refresh interval, in seconds.
const refreshQueues = 5

// cancelWorkers is how many cancels a bulk cancel runs at once: a cancel of
// a command issued moments ago may wait up to cmdq.ControlInterval on a
// shared store, so many wait together.
const cancelWorkers = 16

// cancelTime is the time a request gets beyond the deadline
// (httpserve.Options.Extra): a cancel may wait up to
// cmdq.ControlInterval for the processors of other processes.
func cancelTime(r *http.Request) time.Duration {
	if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/ui/commands/") &&
		(strings.HasSuffix(r.URL.Path, "/cancel") || strings.HasSuffix(r.URL.Path, "/run-now") || r.URL.Path == "/ui/commands/bulk/run") {
		return cmdq.ControlInterval
	}
	return 0
}

// cancelBody is the body of the cancel confirmation page.
type cancelBody struct {
	Action    string        // where the confirming form posts
	Commands  []cmdq.Status // what would be cancelled
	Ended     []cmdq.Status // selected but ended already: left out
	Missing   []string      // selected IDs no command has
	Button    string
	CancelURL string // where "Keep them" leads
	Bulk      bool   // post the IDs; else the action URL names the command
}

// commandURL is the command page's URL.
func (d *dashboard) commandURL(id string) string { return d.base + "/commands/" + url.PathEscape(id) }

// confirmCancel shows GET /ui/commands/{id}/cancel: what cancelling the
// command means, and the button that does it.
func (d *dashboard) confirmCancel(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, httpserve.RoleIssuerOrOperator)
	if !ok {
		return
	}
	id, ok := d.commandID(w, r, v)
	if !ok {
		return
	}
	st, _, err := d.src.Command(r.Context(), id)
	if err != nil {
		d.fail(w, r, v, err)
		return
	}
	b := cancelBody{Action: d.commandURL(id) + "/cancel", Button: "Cancel the command", CancelURL: d.commandURL(id)}
	title := "Cancel this command?"
	if st.State.Final() {
		b.Ended, title = []cmdq.Status{st}, "Nothing to cancel"
	} else {
		b.Commands = []cmdq.Status{st}
	}
	d.render(w, r, http.StatusOK, "cancel", d.data(v, title, "commands", b))
}

// commandPost starts a command action's POST: a bounded body (64 KiB), a
// viewer with role, the form's CSRF check and the command ID of the path.
// ok is false when it has answered.
func (d *dashboard) commandPost(w http.ResponseWriter, r *http.Request, role httpserve.Role) (viewer, string, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, 64*1024)
	v, ok := d.require(w, r, role)
	if !ok || !d.checkPost(w, r, v) {
		return v, "", false
	}
	id, ok := d.commandID(w, r, v)
	return v, id, ok
}

// commandID reads and checks {id}; on failure it writes a 400 page.
func (d *dashboard) commandID(w http.ResponseWriter, r *http.Request, v viewer) (string, bool) {
	id := cmdq.NormalizeID(r.PathValue("id"))
	if err := cmdq.ValidateID(id); err != nil {
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid command ID",
			fmt.Sprintf("%s is not a command ID.", httpserve.QuoteClip(id)), "Command IDs are lowercase canonical UUIDs such as 0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10.")
		return "", false
	}
	return id, true
}

// cancelCommand answers POST /ui/commands/{id}/cancel (the confirmation
// page's button): the command is cancelled and its page shown again, with
// a message.
func (d *dashboard) cancelCommand(w http.ResponseWriter, r *http.Request) {
	v, id, ok := d.commandPost(w, r, httpserve.RoleIssuerOrOperator)
	if !ok {
		return
	}
	by := "ui:" + v.who
	res, err := d.src.Cancel(r.Context(), id, by)
	switch {
	case err == nil:
	case errors.Is(err, cmdq.ErrNotCancellable):
		state := "ended"
		if st, _, gerr := d.src.Command(r.Context(), id); gerr == nil {
			state = string(st.State)
		}
		d.errorPage(w, r, v, http.StatusConflict, "Already ended",
			fmt.Sprintf("Command %s is %s: only a command that has not ended (pending, retrying or running) can be cancelled, so nothing was done.", httpserve.ClipText(id), state),
			"Open the command to see its state. A poisoned command is discarded instead, from the poison table.")
		return
	default:
		d.fail(w, r, v, err)
		return
	}
	now := d.now()
	text := fmt.Sprintf("Cancelled at %s (the cancelled event below): it never runs again, and a handler that runs it is told to stop.", fmtTime(now))
	if res.Already {
		text = "The command was cancelled already; nothing changed."
	} else {
		ev := d.log.Info().Str("command", id)
		if res.Status.TraceID != "" {
			ev = ev.Str("trace_id", res.Status.TraceID)
		}
		ev.Str("by", by).Msg("cmdq console: command cancelled")
	}
	d.putFlash(w, r, v, "/ui/commands/"+id, flash{At: now, Text: text})
	http.Redirect(w, r, d.commandURL(id), http.StatusSeeOther)
}

// cancelForm reads the commands view's bulk form: the selected IDs, each
// checked.
func (d *dashboard) cancelForm(w http.ResponseWriter, r *http.Request, v viewer) ([]string, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, 256*1024)
	if err := r.ParseForm(); err != nil {
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid form", "The form could not be read (it may be too large).", fmt.Sprintf("Select at most %d commands at once.", maxBulk))
		return nil, false
	}
	var ids []string
	seen := map[string]bool{}
	for _, id := range r.PostForm["id"] {
		id = cmdq.NormalizeID(id) // upper case is the same ID, as on the single routes
		if cmdq.ValidateID(id) != nil {
			d.errorPage(w, r, v, http.StatusBadRequest, "Invalid command ID", fmt.Sprintf("%s is not a command ID.", httpserve.QuoteClip(id)), "Use the checkboxes of the commands view.")
			return nil, false
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	switch {
	case len(ids) > maxBulk:
		d.errorPage(w, r, v, http.StatusBadRequest, "Too many commands", fmt.Sprintf("%d commands were selected; one action handles at most %d.", len(ids), maxBulk), "Select fewer.")
		return nil, false
	case len(ids) == 0:
		d.errorPage(w, r, v, http.StatusBadRequest, "Nothing selected", "No command was selected.", "Tick the commands to cancel in the first column of the commands view, then press the button again.")
		return nil, false
	}
	return ids, true
}

// cancelReview answers POST /ui/commands/bulk (the commands view's "Cancel
// selected…" button): a confirmation page listing the selected commands
// that can be cancelled (one point read each) and those left out. It
// changes nothing; its form posts to /ui/commands/bulk/run.
func (d *dashboard) cancelReview(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, httpserve.RoleIssuerOrOperator)
	if !ok || !d.checkPost(w, r, v) {
		return
	}
	ids, ok := d.cancelForm(w, r, v)
	if !ok {
		return
	}
	b := cancelBody{Action: d.base + "/commands/bulk/run", CancelURL: d.base + "/commands", Bulk: true}
	for _, id := range ids {
		st, _, err := d.src.Command(r.Context(), id)
		switch {
		case err == nil && st.State.Final():
			b.Ended = append(b.Ended, st)
		case err == nil:
			b.Commands = append(b.Commands, st)
		case errors.Is(err, cmdq.ErrNotFound), errors.Is(err, storage.ErrNotFound):
			b.Missing = append(b.Missing, id)
		default:
			d.fail(w, r, v, err)
			return
		}
	}
	n := len(b.Commands)
	title := fmt.Sprintf("Cancel %s?", plural(n, "command"))
	b.Button = "Cancel " + plural(n, "command")
	if n == 0 {
		title = "Nothing to cancel"
	}
	d.render(w, r, http.StatusOK, "cancel", d.data(v, title, "commands", b))
}

// cancelRun answers POST /ui/commands/bulk/run (the confirmation page's
// button): every listed command is cancelled, cancelWorkers at a time,
// until half the request's deadline is spent; the message says what was
// done, what was refused and why, and what was not reached.
func (d *dashboard) cancelRun(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, httpserve.RoleIssuerOrOperator)
	if !ok || !d.checkPost(w, r, v) {
		return
	}
	ids, ok := d.cancelForm(w, r, v)
	if !ok {
		return
	}
	ctx := r.Context()
	stopAt := time.Now().Add(d.set.RequestTimeout / 2)
	by := "ui:" + v.who
	type outcome struct {
		err       error
		ran, done bool // done: cancelled now (not before)
	}
	out := make([]outcome, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(cancelWorkers, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res, err := d.src.Cancel(ctx, ids[i], by)
				out[i] = outcome{err: err, ran: true, done: err == nil && !res.Already}
			}
		}()
	}
	for i := range ids {
		if time.Now().After(stopAt) || ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()

	cancelled, already, notReached := 0, 0, 0
	var failures []string
	for i, o := range out {
		switch {
		case !o.ran:
			notReached++
		case o.done:
			cancelled++
		case o.err == nil:
			already++
		default:
			failures = append(failures, httpserve.ClipText(ids[i])+" ("+d.cancelWhy(r, o.err)+")")
		}
	}
	d.log.Info().Int("count", cancelled).Int("failed", len(failures)).Int("not_reached", notReached).Str("by", by).Msg("cmdq console: commands cancelled (bulk)")
	now := d.now()
	var msg strings.Builder
	fmt.Fprintf(&msg, "Cancelled %d of %d at %s", cancelled, len(ids), fmtTime(now))
	if cancelled > 0 {
		msg.WriteString(": they never run again, and a handler that runs one is told to stop")
	}
	msg.WriteString(".")
	switch {
	case already == 1:
		msg.WriteString(" 1 was cancelled already.")
	case already > 1:
		fmt.Fprintf(&msg, " %d were cancelled already.", already)
	}
	if len(failures) > 0 {
		shown := failures
		if len(shown) > 10 {
			shown = shown[:10]
		}
		fmt.Fprintf(&msg, " Not cancelled: %s", strings.Join(shown, "; "))
		if len(failures) > len(shown) {
			fmt.Fprintf(&msg, "; and %d more (see the server's log)", len(failures)-len(shown))
		}
		msg.WriteString(".")
	}
	if notReached > 0 {
		fmt.Fprintf(&msg, " %d were not reached before the request's time ran out and are unchanged: select them and cancel again.", notReached)
	}
	d.putFlash(w, r, v, "/ui/commands", flash{At: now, Text: msg.String(), Error: len(failures)+notReached > 0})
	http.Redirect(w, r, d.base+"/commands", http.StatusSeeOther)
}

// cancelWhy says in a few words why one cancel of a bulk cancel failed.
func (d *dashboard) cancelWhy(r *http.Request, err error) string {
	switch {
	case errors.Is(err, cmdq.ErrNotCancellable):
		return "it ended already"
	case errors.Is(err, cmdq.ErrNotFound), errors.Is(err, storage.ErrNotFound):
		return "no such command"
	case httpserve.StorageUnavailable(err):
		return "storage did not answer in time"
	}
	ref := httpserve.NewRef()
	d.log.Error().Err(err).Str("ref", ref).Str("path", r.URL.Path).Msg("cmdq console: cancel failed")
	return "failed; reference " + ref + " is in the server's log"
}

// queuesBody is the body of the queues view.
type queuesBody struct {
	Queues  []cmdq.QueueInfo
	Limits  []cmdq.LimitInfo
	Refresh int
}

// queues shows GET /ui/queues: every queue the server knows, its depth
// and whether it is paused, with a Pause or Resume button for operators,
// and the command types with a global concurrency limit: their permits in
// use and who holds them.
func (d *dashboard) queues(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleReader)
	if !ok {
		return
	}
	qs, err := d.src.ListQueues(r.Context())
	if err != nil {
		d.fail(w, r, v, err)
		return
	}
	ls, err := d.src.Limits(r.Context())
	if err != nil {
		d.fail(w, r, v, err)
		return
	}
	pd := d.data(v, "Queues", "queues", queuesBody{Queues: qs, Limits: ls, Refresh: refreshQueues})
	pd.Flash = d.takeFlash(w, r, v)
	d.render(w, r, http.StatusOK, "queues", pd)
}

// periodicBody is the body of the periodic view.
type periodicBody struct {
	Schedules []cmdq.PeriodicInfo
	Refresh   int
}

// periodic shows GET /ui/periodic: every periodic schedule with its spec,
// command type, queue, last tick (its command, linked, and its state, or
// missed) and next tick.
func (d *dashboard) periodic(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleReader)
	if !ok {
		return
	}
	ps, err := d.src.ListPeriodic(r.Context())
	if err != nil {
		d.fail(w, r, v, err)
		return
	}
	d.render(w, r, http.StatusOK, "periodic", d.data(v, "Periodic", "periodic", periodicBody{Schedules: ps, Refresh: refreshQueues}))
}

// queueAction returns the handler of POST /ui/queues/{name}/pause (pause
// true) or /resume: the queue is paused or resumed and the queues view
// shown again, with a message.
func (d *dashboard) queueAction(pause bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64*1024)
		v, ok := d.require(w, r, RoleOperator)
		if !ok || !d.checkPost(w, r, v) {
			return
		}
		name := r.PathValue("name")
		if cmdq.ValidateQueue(name) != nil {
			d.errorPage(w, r, v, http.StatusBadRequest, "Invalid queue name", fmt.Sprintf("%s is not a queue name.", httpserve.QuoteClip(name)), "Use the buttons of the queues view.")
			return
		}
		act, done := d.src.ResumeQueue, "resumed"
		if pause {
			act, done = d.src.PauseQueue, "paused"
		}
		by := "ui:" + v.who
		if _, err := act(r.Context(), name, by); err != nil {
			if errors.Is(err, cmdq.ErrUnknownQueue) {
				d.errorPage(w, r, v, http.StatusNotFound, "No such queue", fmt.Sprintf("There is no queue %s here.", httpserve.ClipText(name)), "Use the buttons of the queues view.")
				return
			}
			d.fail(w, r, v, err)
			return
		}
		d.log.Info().Str("queue", name).Str("by", by).Msg("cmdq console: queue " + done)
		now := d.now()
		text := fmt.Sprintf("Queue %s was paused at %s: no processor starts its commands from 10 s after this at the latest (this server's at once); issuing into it still works.", httpserve.ClipText(name), fmtTime(now))
		if !pause {
			text = fmt.Sprintf("Queue %s was resumed at %s: this server's processor starts its commands at once, other processes' within their poll interval.", httpserve.ClipText(name), fmtTime(now))
		}
		d.putFlash(w, r, v, "/ui/queues", flash{At: now, Text: text})
		http.Redirect(w, r, d.base+"/queues", http.StatusSeeOther)
	}
}
