package console

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"unicode/utf8"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
	"github.com/cmdq-dev/cmdq/storage"
)

// The poison entry page (GET /ui/poison/{id}): one poisoned command as
// its entry tells it — type, queue, reason, attempts, the last error in
// full, the start of its parameters, when and by whom it was poisoned —
// with Requeue and Discard… and a link to the command's page. Storage:
// one point read of the entry and one of the command (with its
// parameters).

// maxPreviewBytes bounds a parameters preview the pages show (the entry
// page's; the lists show the entry's own, at most
// cmdq.PoisonParamsPreview bytes): the raw compact JSON is cut before
// anything else is done with it.
const maxPreviewBytes = 2048

// attemptPrefix matches what the processor puts before a handler's error
// in a poison entry ("attempt 5 of at most 5 failed: ", "attempt 6
// (dequeued 6 times), over the poison ceiling of 5; last error: "): the
// lists show the error without it (the entry page and the command page
// show it whole).
var attemptPrefix = regexp.MustCompile(`^(attempt \d+ of at most \d+ failed: |attempt \d+ \(dequeued \d+ times\), over the poison ceiling of \d+; last error: )`)

// errorCore returns a poison entry's last error without the processor's
// attempt prefixes.
func errorCore(s string) string {
	for i := 0; i < 4; i++ {
		loc := attemptPrefix.FindStringIndex(s)
		if loc == nil {
			break
		}
		s = s[loc[1]:]
	}
	return s
}

// preview returns at most n bytes of s, cut at a character boundary, with
// "…" when cut.
func preview(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := s[:max(0, n-len("…"))]
	for len(cut) > 0 && !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return cut + "…"
}

// entryBody is the poison entry page's body.
type entryBody struct {
	Entry cmdq.PoisonEntry
	// Status is the command's status; HasCommand false when no command is
	// stored (a malformed message, or a command that was never stored).
	Status     cmdq.Status
	HasCommand bool
	// Attempts is the true attempt count: the entry's, else (an older
	// entry) the command's.
	Attempts int
	// Params is the start of the command's compact parameters (at most
	// maxPreviewBytes); ParamsBytes their whole size.
	Params      string
	ParamsBytes int
	// DeliveryNote explains a dequeue count other than Attempts.
	DeliveryNote string
	// Stale: the command is no longer poisoned (someone acted; the entry
	// goes at the next requeue or discard).
	Stale bool
}

// poisonEntry answers GET /ui/poison/{id}.
func (d *dashboard) poisonEntry(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleOperator)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if !validPoisonID(id) {
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid ID", fmt.Sprintf("%s cannot name a poison entry.", httpserve.QuoteClip(id)), "Use the links of the poison list.")
		return
	}
	ctx := r.Context()
	e, err := d.src.GetPoison(ctx, id)
	if errors.Is(err, cmdq.ErrNotFound) || errors.Is(err, storage.ErrNotFound) {
		msg := fmt.Sprintf("There is no poison entry %s: it was requeued or discarded, or never existed.", httpserve.ClipText(id))
		todo := "Open the poison list."
		if cmdq.ValidateID(id) == nil {
			todo = "Open the command's page (" + d.base + "/commands/" + id + ") to see what happened to it, or the poison list."
		}
		d.errorPage(w, r, v, http.StatusNotFound, "Not in the poison table", msg, todo)
		return
	}
	if err != nil {
		d.fail(w, r, v, err)
		return
	}
	b := entryBody{Entry: e, Attempts: e.Attempts}
	if cmdq.ValidateID(id) == nil {
		st, params, err := d.src.Command(ctx, id)
		switch {
		case err == nil:
			b.Status, b.HasCommand = st, true
			b.ParamsBytes = len(params)
			b.Params = preview(string(params[:min(len(params), maxPreviewBytes+4)]), maxPreviewBytes)
			b.Stale = st.State != cmdq.StatePoisoned
			if b.Attempts == 0 {
				b.Attempts = st.Attempts
			}
		case errors.Is(err, cmdq.ErrNotFound), errors.Is(err, storage.ErrNotFound):
		default:
			d.fail(w, r, v, err)
			return
		}
	}
	if b.Attempts == 0 && !b.HasCommand {
		b.Attempts = int(e.DequeueCount)
	}
	if n := int(e.DequeueCount); n != b.Attempts && n > 0 {
		b.DeliveryNote = fmt.Sprintf("poisoned by delivery %d", n)
		if n > b.Attempts {
			b.DeliveryNote += ", which did not run the handler"
		}
	}
	pd := d.data(v, "Poison entry "+id, "poison", b)
	pd.Flash = d.takeFlash(w, r, v)
	d.render(w, r, http.StatusOK, "entry", pd)
}
