package console

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// Run now (a command page's Run now… button, behind a confirmation page,
// as Cancel…): make a scheduled or retrying command due at once
// (cmdq.Client.RunNow). Operators only.

// runNowBody is the body of the run-now confirmation page.
type runNowBody struct {
	Command   *cmdq.Status // what would be run now; nil when it cannot be
	State     cmdq.State   // its state, when it cannot be
	Due       bool         // it cannot be because it is due already
	Action    string       // where the confirming form posts
	CancelURL string       // where "Keep its time" leads
}

// runNowable reports whether st can be made due now at now: scheduled, or
// retrying with its next attempt more than cmdq.MaxClockSkew away.
func runNowable(st cmdq.Status, now time.Time) bool {
	return (st.State == cmdq.StateScheduled || st.State == cmdq.StateRetrying) &&
		st.RunAt.After(now.Add(cmdq.MaxClockSkew))
}

// confirmRunNow shows GET /ui/commands/{id}/run-now: what running the
// command now means, and the button that does it.
func (d *dashboard) confirmRunNow(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleOperator)
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
	b := runNowBody{Action: d.commandURL(id) + "/run-now", CancelURL: d.commandURL(id)}
	title := "Run this command now?"
	if runNowable(st, d.now()) {
		b.Command = &st
	} else {
		b.State, b.Due, title = st.State, st.State == cmdq.StateScheduled || st.State == cmdq.StateRetrying, "Nothing to run now"
	}
	d.render(w, r, http.StatusOK, "runnow", d.data(v, title, "commands", b))
}

// runNowCommand answers POST /ui/commands/{id}/run-now (the confirmation
// page's button): the command is due now and its page shown again, with
// a message.
func (d *dashboard) runNowCommand(w http.ResponseWriter, r *http.Request) {
	v, id, ok := d.commandPost(w, r, RoleOperator)
	if !ok {
		return
	}
	by := "ui:" + v.who
	_, err := d.src.RunNow(r.Context(), id, by)
	switch {
	case err == nil:
	case errors.Is(err, cmdq.ErrNotWaiting):
		d.errorPage(w, r, v, http.StatusConflict, "Not waiting",
			fmt.Sprintf("Command %s is not waiting for its time, so nothing was done.", httpserve.ClipText(id)),
			"Only a scheduled command, or a retrying one waiting for its retry delay, can be run now. Open the command to see its state.")
		return
	case errors.Is(err, cmdq.ErrEnqueueFailed):
		d.log.Warn().Err(err).Str("command", id).Msg("cmdq console: run-now recorded but its message not queued; the reconciler will queue it")
	default:
		d.fail(w, r, v, err)
		return
	}
	d.log.Info().Str("command", id).Str("by", by).Msg("cmdq console: command made due now")
	now := d.now()
	d.putFlash(w, r, v, "/ui/commands/"+id, flash{At: now, Text: fmt.Sprintf("Due now since %s (the requeued event below): a processor takes it at its next poll.", fmtTime(now))})
	http.Redirect(w, r, d.commandURL(id), http.StatusSeeOther)
}
