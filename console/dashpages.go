package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
	"github.com/cmdq-dev/cmdq/internal/jsonview"
	"github.com/cmdq-dev/cmdq/storage"
)

// The dashboard's pages and actions. Storage is reached only through d.src
// (dashsource.go); docs/dashboard.md states what each page costs.

// Refresh intervals of the live part of each page (live.js), in seconds.
const (
	refreshOverview = 5
	refreshPoison   = 5
	refreshCommand  = 2 // a command that can still change by itself
	refreshPoisoned = 5 // a poisoned command: only an operator changes it
)

// maxBulk is the most poison entries one bulk action handles.
const maxBulk = cmdq.MaxPoisonLimit

// bulkWorkers is how many requeues or discards a bulk action runs at once.
const bulkWorkers = 4

// maxParamsShown is how much of a command's (indented) parameters its page shows.
const maxParamsShown = 64 * 1024

// queueDepth is one queue's approximate depth on the overview.
type queueDepth struct {
	Name  string
	Depth int
	Err   string
}

// typeCount is one command type's number of poison entries.
type typeCount struct {
	Type  string
	Count int
}

type overviewBody struct {
	Health       health
	HealthRows   []healthRow
	Queues       []queueDepth
	PoisonCount  int
	PoisonMore   bool // more than maxCountedPoison entries
	PoisonByType []typeCount
	PoisonErr    string
	Refresh      int
	// Processors are every processor's heartbeat (ProcessorsErr when
	// they could not be read); Running counts those not gone.
	Processors    []cmdq.ProcessorInfo
	ProcessorsErr string
	Running       int
	// Unreachable counts the processors whose doorbell this server rang
	// without an ack (ProcessorInfo.WakeUnreachable).
	Unreachable int
	// Throughput sums the running processors' outcomes over their last
	// heartbeat interval; Per names that interval ("minute").
	Throughput cmdq.OutcomeCounts
	Totals     cmdq.OutcomeCounts // since each running processor's run started
	Per        string
	// Recent are the commands' outcomes of the last minutes, from the
	// commands tables (they survive a processor's restart).
	Recent throughput
	// Failures are the newest failed or poisoned attempts the processors
	// report and (operators) the newest poison entries.
	Failures []recentFailure
}

// recentFailure is one line of the overview's recent failures.
type recentFailure struct {
	At        time.Time
	CommandID string
	Type      string
	Error     string
	Poisoned  bool
	Entry     bool   // from the poison table (links to its entry)
	Where     string // the processor that reported it
}

// maxRecentFailures is how many recent failures the overview lists.
const maxRecentFailures = 8

// newestFailures returns the newest maxRecentFailures of fs, newest
// first, one line per command (a poison entry over a processor's report
// of the same command).
func newestFailures(fs []recentFailure) []recentFailure {
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].At.After(fs[j].At) })
	seen := map[string]bool{}
	for _, f := range fs {
		if f.Entry {
			seen[f.CommandID] = false // shown from its entry
		}
	}
	var out []recentFailure
	for _, f := range fs {
		if done, entry := seen[f.CommandID]; done || entry && !f.Entry {
			continue
		}
		seen[f.CommandID] = true
		out = append(out, f)
		if len(out) == maxRecentFailures {
			break
		}
	}
	return out
}

// perName names a heartbeat interval for "per …" ("minute", "30 s").
func perName(d time.Duration) string {
	switch {
	case d == time.Minute || d == 0:
		return "minute"
	case d%time.Minute == 0:
		return fmt.Sprintf("%d min", int(d/time.Minute))
	}
	return d.Round(time.Millisecond).String()
}

func (d *dashboard) overview(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleReader)
	if !ok {
		return
	}
	ctx := r.Context()
	b := overviewBody{Health: d.health(), Refresh: refreshOverview}
	b.HealthRows = healthRows(b.Health.Detail)
	queues := d.src.Queues()
	var newestPoison []cmdq.PoisonEntry
	if v.can(RoleOperator) {
		page, err := d.src.ListPoison(ctx, cmdq.PoisonQuery{Limit: maxCountedPoison})
		if err != nil {
			b.PoisonErr = "the poison table could not be read (storage may be unavailable)"
			d.log.Error().Err(err).Msg("cmdq console: list poison")
		} else {
			b.PoisonCount, b.PoisonMore = len(page.Entries), page.Continuation != ""
			newestPoison = page.Entries[:min(len(page.Entries), maxRecentFailures)]
			byType := map[string]int{}
			for _, e := range page.Entries {
				byType[e.Type]++
				if e.Queue != "" && !slices.Contains(queues, e.Queue) {
					queues = append(queues, e.Queue)
				}
			}
			for t, n := range byType {
				b.PoisonByType = append(b.PoisonByType, typeCount{Type: t, Count: n})
			}
			sort.Slice(b.PoisonByType, func(i, j int) bool {
				x, y := b.PoisonByType[i], b.PoisonByType[j]
				return x.Count > y.Count || x.Count == y.Count && x.Type < y.Type
			})
		}
	}
	var failures []recentFailure
	if ps, err := d.src.Processors(ctx); err != nil {
		b.ProcessorsErr = "the processors' heartbeats could not be read (storage may be unavailable)"
		d.log.Error().Err(err).Msg("cmdq console: processors")
	} else {
		b.Processors = ps
		per := time.Duration(0)
		for _, p := range ps {
			if p.WakeUnreachable {
				b.Unreachable++
			}
			if p.Gone {
				continue
			}
			b.Running++
			b.Throughput.Completed += p.Recent.Completed
			b.Throughput.Failed += p.Recent.Failed
			b.Throughput.Poisoned += p.Recent.Poisoned
			b.Totals.Completed += p.Totals.Completed
			b.Totals.Failed += p.Totals.Failed
			b.Totals.Poisoned += p.Totals.Poisoned
			per = max(per, time.Duration(p.IntervalMS)*time.Millisecond)
			if f := p.LastFailure; f != nil {
				failures = append(failures, recentFailure{At: f.At, CommandID: f.CommandID, Type: f.Type, Error: errorCore(f.Error), Poisoned: f.Poisoned, Where: p.Name})
			}
		}
		b.Per = perName(per)
	}
	for _, e := range newestPoison {
		failures = append(failures, recentFailure{At: e.PoisonedAt, CommandID: e.CommandID, Type: e.Type, Error: errorCore(e.LastError), Poisoned: true, Entry: true, Where: e.Worker})
	}
	b.Failures = newestFailures(failures)
	b.Recent = d.throughput(ctx)
	if b.Recent.Err != nil {
		d.log.Error().Err(b.Recent.Err).Msg("cmdq console: recent outcomes")
	}
	for _, q := range queues {
		n, err := d.src.QueueDepth(ctx, q)
		qd := queueDepth{Name: q, Depth: n}
		if err != nil {
			qd.Err = "unavailable"
			d.log.Error().Err(err).Str("queue", q).Msg("cmdq console: queue depth")
		}
		b.Queues = append(b.Queues, qd)
	}
	pd := d.data(v, "Overview", "overview", b)
	pd.Flash = d.takeFlash(w, r, v)
	d.render(w, r, http.StatusOK, "overview", pd)
}

type poisonBody struct {
	Type     string
	Limit    int
	Entries  []cmdq.PoisonEntry
	NextURL  string
	FirstURL string
	Paged    bool // this is not the first page
	Width    int
	Refresh  int
}

// poisonURL is the poison list's URL for a type filter ("" = all).
func (d *dashboard) poisonURL(typ string) string {
	if typ == "" {
		return d.base + "/poison"
	}
	return d.base + "/poison?" + url.Values{"type": {typ}}.Encode()
}

func (d *dashboard) poison(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleOperator)
	if !ok {
		return
	}
	q := r.URL.Query()
	pq := cmdq.PoisonQuery{Type: strings.TrimSpace(q.Get("type")), Continuation: q.Get("continuation"), Limit: cmdq.DefaultPoisonLimit}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > cmdq.MaxPoisonLimit {
			d.errorPage(w, r, v, http.StatusBadRequest, "Invalid limit",
				fmt.Sprintf("limit %s is not a whole number from 1 to %d.", httpserve.QuoteClip(l), cmdq.MaxPoisonLimit), fmt.Sprintf("Omit it for the default (%d).", cmdq.DefaultPoisonLimit))
			return
		}
		pq.Limit = n
	}
	page, err := d.src.ListPoison(r.Context(), pq)
	if err != nil {
		d.fail(w, r, v, err)
		return
	}
	link := func(cont string) string {
		u := url.Values{}
		if pq.Type != "" {
			u.Set("type", pq.Type)
		}
		if pq.Limit != cmdq.DefaultPoisonLimit {
			u.Set("limit", strconv.Itoa(pq.Limit))
		}
		if cont != "" {
			u.Set("continuation", cont)
		}
		if len(u) == 0 {
			return d.base + "/poison"
		}
		return d.base + "/poison?" + u.Encode()
	}
	b := poisonBody{Type: pq.Type, Limit: pq.Limit, Entries: page.Entries, FirstURL: link(""), Paged: pq.Continuation != "", Width: lastErrorWidth, Refresh: refreshPoison}
	if page.Continuation != "" {
		b.NextURL = link(page.Continuation)
	}
	pd := d.data(v, "Poison table", "poison", b)
	pd.Flash = d.takeFlash(w, r, v)
	d.render(w, r, http.StatusOK, "poison", pd)
}

type commandBody struct {
	Status      cmdq.Status
	Params      string // indented JSON
	ParamsBytes int
	ParamsCut   bool // Params holds only the first maxParamsShown bytes
	Events      []cmdq.Event
	// Rows are Events with their durations (each attempt's, each step's);
	// Total is the command's, from created to final or to now.
	Rows   []timelineRow
	Total  commandTotal
	Poison *cmdq.PoisonEntry
	// Waiting says why the command has not started (Status.Waiting; nil
	// when it waits for nothing: running, final, or just taken by a
	// processor).
	Waiting *cmdq.Waiting
	// NextAttempt is the number of the command's next attempt.
	NextAttempt int
	// Taken: pending or retrying, yet waiting for nothing: a processor
	// has just taken it (the page explains the lazy started event).
	Taken bool
	// RetryFrom and RetryTo bound when the next attempt becomes due, when
	// this server knows the type's retry policy.
	RetryFrom, RetryTo time.Time
	RetryDue           bool // RetryTo has passed
	RetryOpen          bool // RetryFrom has passed
	// Running is set when this server's processor runs the command's
	// handler now while the stored state is still pending or retrying
	// (its started event is not written yet); RunningNote says so.
	Running     *cmdq.RunningCommand
	RunningNote string
	Refresh     int
	// Stream is the live feed's URL ("" for a final command): live.js
	// refreshes the page when it says something changed.
	Stream string
	// Final: the command ended (no Cancel button).
	Final bool
	// RunNow: the viewer may make the command due now (an operator, and
	// the command is scheduled or retrying: the Run now… button).
	RunNow bool
	// Output is the recorded output (Status.Output), indented, at most
	// maxParamsShown bytes of it (OutputCut); OutputBytes its size.
	Output      string
	OutputBytes int
	OutputCut   bool
}

// shownJSON returns raw (params or output, user data) laid out for a
// page, with bounded work: at most maxParamsShown bytes, nesting past
// jsonview.DefaultMaxDepth not indented further (cut reports a cut).
func shownJSON(raw []byte) (shown string, cut bool) {
	return jsonview.Indent(raw, maxParamsShown, jsonview.DefaultMaxDepth)
}

func (d *dashboard) command(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleReader)
	if !ok {
		return
	}
	id := cmdq.NormalizeID(r.PathValue("id"))
	if err := cmdq.ValidateID(id); err != nil {
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid command ID",
			fmt.Sprintf("%s is not a command ID.", httpserve.QuoteClip(id)), "Command IDs are lowercase canonical UUIDs such as 0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10.")
		return
	}
	ctx := r.Context()
	st, params, err := d.src.Command(ctx, id)
	if err != nil {
		d.fail(w, r, v, err)
		return
	}
	evs, err := d.src.Events(ctx, id)
	if err != nil {
		d.fail(w, r, v, err)
		return
	}
	b := commandBody{Status: st, Events: evs, ParamsBytes: len(params), Waiting: st.Waiting, Final: st.State.Final(),
		NextAttempt: st.Attempts + 1, Taken: st.Waiting == nil && (st.State == cmdq.StatePending || st.State == cmdq.StateRetrying)}
	now := d.now()
	b.Rows, b.Total = timelineRows(evs, st.State == cmdq.StateRunning, now), totalOf(st, evs, now)
	if len(params) > 0 {
		// Bounded before it is done: at most maxParamsShown bytes laid out,
		// nesting past jsonview.DefaultMaxDepth not indented further.
		b.Params, b.ParamsCut = jsonview.Indent(params, maxParamsShown, jsonview.DefaultMaxDepth)
	}
	if st.Output != "" {
		b.OutputBytes = len(st.Output)
		b.Output, b.OutputCut = shownJSON([]byte(st.Output))
	}
	switch st.State {
	case cmdq.StateCompleted, cmdq.StateDiscarded, cmdq.StateCancelled:
		b.Refresh = 0 // final: nothing changes any more
	case cmdq.StatePoisoned:
		b.Refresh = refreshPoisoned
	default:
		b.Refresh = refreshCommand
	}
	if b.Refresh > 0 {
		b.Stream = d.base + "/commands/" + id + "/live"
	}
	if st.State == cmdq.StatePending || st.State == cmdq.StateRetrying {
		if f, ok := d.src.InFlight(id); ok {
			b.Running, b.RunningNote, b.Waiting, b.Taken = &f, runningNote(f, d.now()), nil, false
		}
	}
	if st.State == cmdq.StateRetrying {
		if p, ok := d.src.RetryPolicy(st.Type); ok {
			for i := len(evs) - 1; i >= 0; i-- {
				if evs[i].Kind == cmdq.EventDeferred {
					break // retried at its RunAt, not by the policy (Waiting says when)
				}
				if evs[i].Kind == cmdq.EventFailed {
					// The policy's delay goes by the attempts that count:
					// deferrals (RetryAfter) do not.
					b.RetryFrom, b.RetryTo = retryWindow(p, evs[i].Attempt-st.Deferrals, evs[i].Time)
					b.RetryDue, b.RetryOpen = d.now().After(b.RetryTo), d.now().After(b.RetryFrom)
					break
				}
			}
		}
	}
	b.RunNow = v.can(RoleOperator) && runNowable(st, d.now())
	if st.State == cmdq.StatePoisoned && v.can(RoleOperator) {
		if e, err := d.src.GetPoison(ctx, id); err == nil {
			b.Poison = &e
		}
	}
	pd := d.data(v, "Command "+id, "", b)
	if f := d.takeFlash(w, r, v); f != nil {
		pd.Flash = f
		if f.Requeued == id {
			// The state the page shows (running before the started event
			// is written), never another: live.js keeps the two together.
			pd.FlashState = st.State
			if b.Running != nil {
				pd.FlashState = cmdq.StateRunning
			}
		}
	}
	d.render(w, r, http.StatusOK, "command", pd)
}

func (d *dashboard) search(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleReader)
	if !ok {
		return
	}
	raw := strings.TrimSpace(r.URL.Query().Get("id"))
	id := strings.ToLower(raw)
	switch {
	case cmdq.ValidateID(id) == nil:
		http.Redirect(w, r, d.base+"/commands/"+id, http.StatusSeeOther)
	case raw == "":
		d.errorPage(w, r, v, http.StatusBadRequest, "Nothing to search for", "The search box was empty.",
			"Paste a command ID, the first characters of one, or a correlation ID.")
	case validIDPrefix(raw) && len(raw) >= 4 && strings.ContainsAny(raw, "0123456789"):
		// The start of an ID (hex digits): the commands of the last day
		// whose ID starts so.
		http.Redirect(w, r, d.commandsPageURL(commandsQuery{id: id, rng: timeRanges[2], rangeSet: true}, "", ""), http.StatusSeeOther)
	case len(raw) <= 256:
		http.Redirect(w, r, d.commandsPageURL(commandsQuery{corr: raw, rng: timeRanges[2], rangeSet: true}, "", ""), http.StatusSeeOther)
	default:
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid search", "A correlation ID is at most 256 bytes.", "Paste a command ID, the first characters of one, or a correlation ID.")
	}
}

// validPoisonID checks an ID naming a poison entry: entries of malformed
// messages are keyed by the queue message's ID, not a UUID, so any valid
// table key is accepted.
func validPoisonID(id string) bool {
	return id != "" && storage.ValidateKey("PartitionKey", id) == nil
}

// action returns the handler of POST /ui/poison/{id}/requeue or /discard:
// act is the source's Requeue or Discard, done ("requeued" or "discarded")
// the log word. The Discard button of the pages leads to a confirmation
// page (GET /ui/poison/{id}/discard) whose form posts here.
func (d *dashboard) action(act func(ctx context.Context, id, by string) error, done string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64*1024)
		v, ok := d.require(w, r, RoleOperator)
		if !ok || !d.checkPost(w, r, v) {
			return
		}
		id := cmdq.NormalizeID(r.PathValue("id"))
		if !validPoisonID(id) {
			d.errorPage(w, r, v, http.StatusBadRequest, "Invalid ID", fmt.Sprintf("%s cannot name a poison entry.", httpserve.QuoteClip(id)), "Use the buttons on the poison list.")
			return
		}
		by := "ui:" + v.who
		if err := act(r.Context(), id, by); err != nil {
			d.failAction(w, r, v, id, err)
			return
		}
		d.log.Info().Str("command", id).Str("by", by).Msg("cmdq console: poisoned command " + done)
		now := d.now()
		if done == "requeued" && r.PostFormValue("back") == "command" {
			d.putFlash(w, r, v, "/ui/commands/"+id, flash{At: now, Requeued: id,
				Text: fmt.Sprintf("Requeued at %s (the requeued event below): it left the poison table and went back on its queue, to run again from attempt 1.", fmtTime(now))})
			http.Redirect(w, r, d.base+"/commands/"+url.PathEscape(id), http.StatusSeeOther)
			return
		}
		text := fmt.Sprintf("Command %s was requeued at %s: it left the poison table and went back on its queue, to run again from attempt 1. Open it to follow it.", httpserve.ClipText(id), fmtTime(now))
		if done == "discarded" {
			text = fmt.Sprintf("Poison entry %s was discarded at %s: the command is discarded for good.", httpserve.ClipText(id), fmtTime(now))
		}
		d.putFlash(w, r, v, "/ui/poison", flash{At: now, Text: text})
		http.Redirect(w, r, d.poisonURL(r.PostFormValue("type")), http.StatusSeeOther)
	}
}

// failAction renders a failed requeue or discard as a page that says what to do.
func (d *dashboard) failAction(w http.ResponseWriter, r *http.Request, v viewer, id string, err error) {
	page := func(code int, title, msg, todo string, offerDiscard bool) {
		b := errorBody{Status: code, Message: msg, Todo: todo}
		if offerDiscard {
			b.DiscardID = id
		}
		d.render(w, r, code, "error", d.data(v, title, "poison", b))
	}
	switch {
	case errors.Is(err, cmdq.ErrNoCommand):
		page(http.StatusConflict, "Nothing to requeue",
			fmt.Sprintf("Poison entry %s has no stored command (a malformed message, or one naming a command that was never stored), so there is nothing to requeue.", httpserve.ClipText(id)),
			"Fix the producer that sent it, then discard the entry.", true)
	case errors.Is(err, cmdq.ErrNotPoisoned):
		page(http.StatusConflict, "Not poisoned",
			fmt.Sprintf("Command %s is not poisoned any more (it may have been requeued or discarded already), so nothing was done.", httpserve.ClipText(id)),
			"Open the command to see its state.", false)
	case errors.Is(err, cmdq.ErrNotFound), errors.Is(err, storage.ErrNotFound):
		if st, _, gerr := d.src.Command(r.Context(), id); gerr == nil {
			page(http.StatusConflict, "Not poisoned",
				fmt.Sprintf("Command %s is %s, not poisoned; only poisoned commands can be requeued or discarded.", httpserve.ClipText(id), st.State),
				"Open the command to see its state.", false)
			return
		}
		page(http.StatusNotFound, "Not found", fmt.Sprintf("There is no poison entry or command %s.", httpserve.ClipText(id)),
			"It may have been discarded already; reload the poison list.", false)
	default:
		d.fail(w, r, v, err)
	}
}

// confirmBody is the body of a confirmation page (discard of one entry,
// bulk requeue or discard).
type confirmBody struct {
	Do        string // "requeue" or "discard"
	Action    string // where the confirming form posts
	Entries   []cmdq.PoisonEntry
	Missing   []string // selected IDs no longer in the poison table
	More      bool     // the type has more entries than one action handles
	Type      string   // the list's type filter, to go back to
	Button    string
	CancelURL string
	Bulk      bool // post the IDs (bulk); else the action URL names the entry
}

// confirmDiscard shows GET /ui/poison/{id}/discard: what discarding the
// entry means, and the button that does it.
func (d *dashboard) confirmDiscard(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleOperator)
	if !ok {
		return
	}
	id := cmdq.NormalizeID(r.PathValue("id"))
	if !validPoisonID(id) {
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid ID", fmt.Sprintf("%s cannot name a poison entry.", httpserve.QuoteClip(id)), "Use the buttons on the poison list.")
		return
	}
	e, err := d.src.GetPoison(r.Context(), id)
	if errors.Is(err, cmdq.ErrNotFound) || errors.Is(err, storage.ErrNotFound) {
		d.errorPage(w, r, v, http.StatusNotFound, "Not found", fmt.Sprintf("There is no poison entry %s (it may have been requeued or discarded already).", httpserve.ClipText(id)), "Reload the poison list.")
		return
	}
	if err != nil {
		d.fail(w, r, v, err)
		return
	}
	typ := strings.TrimSpace(r.URL.Query().Get("type"))
	b := confirmBody{Do: "discard", Action: d.base + "/poison/" + url.PathEscape(id) + "/discard", Entries: []cmdq.PoisonEntry{e},
		Type: typ, Button: "Discard for good", CancelURL: d.poisonURL(typ)}
	d.render(w, r, http.StatusOK, "confirm", d.data(v, "Discard this poison entry?", "poison", b))
}

// bulkForm reads a bulk form's fields: its action, its type filter and the
// IDs, each checked.
func (d *dashboard) bulkForm(w http.ResponseWriter, r *http.Request, v viewer) (do, typ string, ids []string, ok bool) {
	r.Body = http.MaxBytesReader(w, r.Body, 256*1024)
	if err := r.ParseForm(); err != nil {
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid form", "The form could not be read (it may be too large).", fmt.Sprintf("Select at most %d entries at once.", maxBulk))
		return "", "", nil, false
	}
	do, typ = r.PostFormValue("do"), strings.TrimSpace(r.PostFormValue("type"))
	seen := map[string]bool{}
	for _, id := range r.PostForm["id"] {
		id = cmdq.NormalizeID(id) // upper case is the same ID, as on the single routes
		if !validPoisonID(id) {
			d.errorPage(w, r, v, http.StatusBadRequest, "Invalid ID", fmt.Sprintf("%s cannot name a poison entry.", httpserve.QuoteClip(id)), "Use the checkboxes on the poison list.")
			return "", "", nil, false
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) > maxBulk {
		d.errorPage(w, r, v, http.StatusBadRequest, "Too many entries", fmt.Sprintf("%d entries were selected; one action handles at most %d.", len(ids), maxBulk), "Select fewer, or filter by type.")
		return "", "", nil, false
	}
	return do, typ, ids, true
}

// bulkReview answers POST /ui/poison/bulk (the poison list's bulk buttons):
// a confirmation page listing the entries the action would change. It
// changes nothing; its form posts to /ui/poison/bulk/run.
func (d *dashboard) bulkReview(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleOperator)
	if !ok || !d.checkPost(w, r, v) {
		return
	}
	do, typ, ids, ok := d.bulkForm(w, r, v)
	if !ok {
		return
	}
	all := strings.HasSuffix(do, "-all")
	do = strings.TrimSuffix(do, "-all")
	if do != "requeue" && do != "discard" {
		d.errorPage(w, r, v, http.StatusBadRequest, "Unknown action", fmt.Sprintf("%s is not an action of the poison list.", httpserve.QuoteClip(do)), "Use the buttons on the poison list.")
		return
	}
	if all && typ == "" {
		d.errorPage(w, r, v, http.StatusBadRequest, "No type chosen", "“All of one type” needs a command type.", "Filter the poison list by a type first.")
		return
	}
	if !all && len(ids) == 0 {
		d.errorPage(w, r, v, http.StatusBadRequest, "Nothing selected", "No poison entry was selected.", "Tick the entries to "+do+" in the first column of the poison list, then press the button again.")
		return
	}
	page, err := d.src.ListPoison(r.Context(), cmdq.PoisonQuery{Type: typ, Limit: maxBulk})
	if err != nil {
		d.fail(w, r, v, err)
		return
	}
	b := confirmBody{Do: do, Action: d.base + "/poison/bulk/run", Type: typ, CancelURL: d.poisonURL(typ), Bulk: true}
	if all {
		b.Entries, b.More = page.Entries, page.Continuation != ""
	} else {
		byID := map[string]cmdq.PoisonEntry{}
		for _, e := range page.Entries {
			byID[e.CommandID] = e
		}
		for _, id := range ids {
			if e, ok := byID[id]; ok {
				b.Entries = append(b.Entries, e)
			} else {
				b.Missing = append(b.Missing, id)
			}
		}
	}
	n := len(b.Entries)
	title := fmt.Sprintf("Requeue %s?", plural(n, "command"))
	b.Button = "Requeue " + plural(n, "command")
	if do == "discard" {
		title = fmt.Sprintf("Discard %s?", plural(n, "poison entry"))
		b.Button = "Discard " + plural(n, "entry") + " for good"
	}
	if n == 0 {
		title = "Nothing to " + do
	}
	d.render(w, r, http.StatusOK, "confirm", d.data(v, title, "poison", b))
}

// bulkOutcome is what happened to one entry of a bulk action.
type bulkOutcome struct {
	id  string
	err error
	ran bool
}

// bulkRun answers POST /ui/poison/bulk/run (the confirmation page's button):
// requeue or discard every listed entry, a few at a time. It stops starting
// new ones when half the request's deadline is spent, and the flash message
// says what was done, what failed and why, and what was not reached.
func (d *dashboard) bulkRun(w http.ResponseWriter, r *http.Request) {
	v, ok := d.require(w, r, RoleOperator)
	if !ok || !d.checkPost(w, r, v) {
		return
	}
	do, typ, ids, ok := d.bulkForm(w, r, v)
	if !ok {
		return
	}
	act, done := d.src.Requeue, "requeued"
	switch do {
	case "requeue":
	case "discard":
		act, done = d.src.Discard, "discarded"
	default:
		d.errorPage(w, r, v, http.StatusBadRequest, "Unknown action", fmt.Sprintf("%s is not an action of the poison list.", httpserve.QuoteClip(do)), "Use the buttons on the poison list.")
		return
	}
	if len(ids) == 0 {
		d.errorPage(w, r, v, http.StatusBadRequest, "Nothing selected", "The confirmation named no poison entry.", "Go back to the poison list and select entries.")
		return
	}
	ctx := r.Context()
	stopAt := time.Now().Add(d.set.RequestTimeout / 2)
	by := "ui:" + v.who
	out := make([]bulkOutcome, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(bulkWorkers, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = bulkOutcome{id: ids[i], err: act(ctx, ids[i], by), ran: true}
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

	var okIDs, notReached []string
	var failures []string
	for i, o := range out {
		switch {
		case !o.ran:
			notReached = append(notReached, ids[i])
		case o.err == nil:
			okIDs = append(okIDs, o.id)
		default:
			failures = append(failures, httpserve.ClipText(o.id)+" ("+d.bulkWhy(r, o.err)+")")
		}
	}
	d.log.Info().Int("count", len(okIDs)).Int("failed", len(failures)).Int("not_reached", len(notReached)).Str("by", by).
		Msg("cmdq console: poisoned commands " + done + " (bulk)")
	now := d.now()
	var msg strings.Builder
	fmt.Fprintf(&msg, "%s %d of %d at %s", strings.ToUpper(done[:1])+done[1:], len(okIDs), len(ids), fmtTime(now))
	switch {
	case len(okIDs) == 0:
	case do == "requeue":
		msg.WriteString(": they left the poison table and went back on their queues, to run again from attempt 1")
	default:
		msg.WriteString(": they are discarded for good")
	}
	msg.WriteString(".")
	if len(failures) > 0 {
		shown := failures
		if len(shown) > 10 {
			shown = shown[:10]
		}
		fmt.Fprintf(&msg, " Not %s: %s", done, strings.Join(shown, "; "))
		if len(failures) > len(shown) {
			fmt.Fprintf(&msg, "; and %d more (see the server's log)", len(failures)-len(shown))
		}
		msg.WriteString(".")
	}
	if len(notReached) > 0 {
		fmt.Fprintf(&msg, " %d were not reached before the request's time ran out and are unchanged: select them and run the action again.", len(notReached))
	}
	d.putFlash(w, r, v, "/ui/poison", flash{At: now, Text: msg.String(), Error: len(failures)+len(notReached) > 0})
	http.Redirect(w, r, d.poisonURL(typ), http.StatusSeeOther)
}

// bulkWhy says in a few words why one entry of a bulk action failed.
func (d *dashboard) bulkWhy(r *http.Request, err error) string {
	switch {
	case errors.Is(err, cmdq.ErrNoCommand):
		return "no stored command: nothing to requeue; discard it"
	case errors.Is(err, cmdq.ErrNotPoisoned):
		return "not poisoned any more"
	case errors.Is(err, cmdq.ErrNotFound), errors.Is(err, storage.ErrNotFound):
		return "no longer in the poison table"
	case httpserve.StorageUnavailable(err):
		return "storage did not answer in time"
	}
	ref := httpserve.NewRef()
	d.log.Error().Err(err).Str("ref", ref).Str("path", r.URL.Path).Msg("cmdq console: bulk action failed")
	return "failed; reference " + ref + " is in the server's log"
}
