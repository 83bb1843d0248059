package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// A periodic schedule's page (its latest ticks) and its Trigger now…
// action behind a confirmation page, as Run now…: the schedule's command
// issued now as a tick (cmdq.Client.TriggerPeriodicAt). Operators only
// for the action.

// recentTicksShown is how many of a schedule's latest ticks its page
// shows (one point read each).
const recentTicksShown = 5

// scheduleBody is the body of a schedule's page and of its trigger
// confirmation.
type scheduleBody struct {
	Schedule cmdq.PeriodicInfo
	Refresh  int
	// Trigger: the viewer may trigger it (an operator, and CanTrigger).
	Trigger bool
	// At is the trigger time the confirmation's form posts (RFC 3339, ms):
	// a second post of the same form is the same tick.
	At     string
	Action string // where the confirming form posts
}

// scheduleURL is a schedule's page.
func (d *dashboard) scheduleURL(name string) string {
	return d.base + "/periodic/" + url.PathEscape(name)
}

// scheduleName reads and checks {name}; on failure it writes a 400 page.
func (d *dashboard) scheduleName(w http.ResponseWriter, r *http.Request, v viewer) (string, bool) {
	name := r.PathValue("name")
	if cmdq.ValidateType(name) != nil {
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid schedule name", fmt.Sprintf("%s is not a schedule name.", httpserve.QuoteClip(name)), "Open a schedule from the Periodic page.")
		return "", false
	}
	return name, true
}

// readSchedule reads schedule name with n recent ticks; on failure it
// writes the page (404 for an unknown schedule).
func (d *dashboard) readSchedule(w http.ResponseWriter, r *http.Request, v viewer, name string, n int) (cmdq.PeriodicInfo, bool) {
	info, err := d.src.GetPeriodic(r.Context(), name, n)
	switch {
	case err == nil:
		return info, true
	case errors.Is(err, cmdq.ErrNotFound):
		d.errorPage(w, r, v, http.StatusNotFound, "No such schedule", fmt.Sprintf("No periodic schedule %s is registered on this server or stored.", httpserve.ClipText(name)), "The Periodic page lists every schedule.")
	default:
		d.fail(w, r, v, err)
	}
	return cmdq.PeriodicInfo{}, false
}

// schedule shows GET /ui/periodic/{name}: the schedule, its latest ticks
// with their commands, and (operators) Trigger now….
func (d *dashboard) schedule(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleReader)
	if !ok {
		return
	}
	name, ok := d.scheduleName(w, r, v)
	if !ok {
		return
	}
	info, ok := d.readSchedule(w, r, v, name, recentTicksShown)
	if !ok {
		return
	}
	b := scheduleBody{Schedule: info, Refresh: refreshQueues, Trigger: v.can(RoleOperator) && info.CanTrigger}
	pd := d.data(v, "Schedule "+name, "periodic", b)
	pd.Flash = d.takeFlash(w, r, v)
	d.render(w, r, http.StatusOK, "schedule", pd)
}

// confirmTrigger shows GET /ui/periodic/{name}/trigger: what triggering
// means, and the button that does it (its form carries the trigger time).
func (d *dashboard) confirmTrigger(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleOperator)
	if !ok {
		return
	}
	name, ok := d.scheduleName(w, r, v)
	if !ok {
		return
	}
	info, ok := d.readSchedule(w, r, v, name, 0)
	if !ok {
		return
	}
	b := scheduleBody{Schedule: info, Trigger: info.CanTrigger, Action: d.scheduleURL(name) + "/trigger",
		At: d.now().UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano)}
	title := "Trigger " + name + " now?"
	if !info.CanTrigger {
		title = "Cannot trigger " + name + " here"
	}
	d.render(w, r, http.StatusOK, "trigger", d.data(v, title, "periodic", b))
}

// triggerSchedule answers POST /ui/periodic/{name}/trigger (the
// confirmation's button): the tick is issued and its command's page
// shown, with a message. The same form posted twice (the same trigger
// time) issues one command.
func (d *dashboard) triggerSchedule(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64*1024)
	v, ok := d.require(w, r, RoleOperator)
	if !ok || !d.checkPost(w, r, v) {
		return
	}
	name, ok := d.scheduleName(w, r, v)
	if !ok {
		return
	}
	var at time.Time
	if s := strings.TrimSpace(r.PostFormValue("at")); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			d.errorPage(w, r, v, http.StatusBadRequest, "Invalid trigger time", fmt.Sprintf("%s is not a time.", httpserve.QuoteClip(s)), "Open the confirmation again from the schedule's page.")
			return
		}
		at = t
	}
	by := "ui:" + v.who
	tick, err := d.src.TriggerPeriodic(r.Context(), name, by, at)
	switch {
	case err == nil:
	case errors.Is(err, cmdq.ErrEnqueueFailed) && tick.ID != "":
		d.log.Warn().Err(err).Str("command", tick.ID).Msg("cmdq console: triggered tick stored but its message not queued; the reconciler will queue it")
	case errors.Is(err, cmdq.ErrInvalidSchedule):
		d.errorPage(w, r, v, http.StatusBadRequest, "Confirmation too old",
			"This confirmation was opened more than an hour ago, so nothing was done.", "Open the confirmation again from the schedule's page.")
		return
	case errors.Is(err, cmdq.ErrNoScheduleParams):
		d.errorPage(w, r, v, http.StatusConflict, "Cannot trigger here",
			strings.TrimPrefix(err.Error(), cmdq.ErrNoScheduleParams.Error()+": ")+".", "Nothing was done. Once a process that runs it has restarted, its row holds the parameters and it can be triggered here.")
		return
	case errors.Is(err, cmdq.ErrNotFound):
		d.errorPage(w, r, v, http.StatusNotFound, "No such schedule", fmt.Sprintf("No periodic schedule %s is registered on this server or stored, so nothing was done.", httpserve.ClipText(name)), "The Periodic page lists every schedule.")
		return
	default:
		d.fail(w, r, v, err)
		return
	}
	now := d.now()
	text := fmt.Sprintf("Triggered %s at %s: this is the tick's command (correlation ID periodic:%s@…); a processor takes it at its next poll.", name, fmtTime(tick.At), name)
	if tick.Duplicate {
		text = fmt.Sprintf("%s was triggered at %s already (the same confirmation posted again): nothing new was issued; this is that tick's command.", name, fmtTime(tick.At))
	} else {
		d.log.Info().Str("periodic", name).Str("command", tick.ID).Str("by", by).Msg("cmdq console: periodic schedule triggered")
	}
	d.putFlash(w, r, v, "/ui/commands/"+tick.ID, flash{At: now, Text: text})
	http.Redirect(w, r, d.commandURL(tick.ID), http.StatusSeeOther)
}
