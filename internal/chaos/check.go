package chaos

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/processor"
)

// Invariant names: stable, used in reports and docs/reliability.md.
const (
	// InvAcceptedFinal: every accepted command ends completed, poisoned or
	// cancelled (none lost: no record; none stranded: not final when the
	// run settles).
	InvAcceptedFinal = "accepted-final"
	// InvDesignedOutcome: a command ends poisoned only when designed to
	// (demo.fail with times ≥ the ceiling), and those do end poisoned.
	InvDesignedOutcome = "designed-outcome"
	// InvSingleCompletion: no command has two completed events.
	InvSingleCompletion = "single-completion"
	// InvStepOnce: no step of a resumable handler (demo.steps) runs or is
	// recorded again after its step_completed was recorded (unless the
	// lease of the execution that recorded it was lost).
	InvStepOnce = "step-once"
	// InvEventOnce: no event is written twice for one attempt (a retried
	// write whose first try landed).
	InvEventOnce = "event-once"
	// InvPoisonTable: the poison table holds exactly the poisoned commands.
	InvPoisonTable = "poison-table-exact"
	// InvDuplicateExplained: every extra handler execution is explained: by a
	// lease_lost event of the execution before it, by a SIGKILL of that
	// execution's process, or by a logged storage fault that kept its
	// outcome from being recorded.
	InvDuplicateExplained = "duplicate-explained"
	// InvCompletionBacked: a completed command has a handler execution that
	// succeeded (by the worker and attempt of its completed event).
	InvCompletionBacked = "completion-backed"
	// InvRetryAccepted: a client's retry with the same id and body is never
	// refused (4xx).
	InvRetryAccepted = "retry-accepted"
	// InvProjection: the stored status agrees with the last outcome event.
	InvProjection = "projection-consistent"
	// InvCancelRespected: a command whose cancel the API answered 2xx ends
	// cancelled, and no handler of it begins after that answer (beyond
	// cancelTolerance: a delivery that read it just before the cancel was
	// stored); one whose cancel was refused with 409 ends as designed; a
	// command ends cancelled only if a cancel was sent for it.
	InvCancelRespected = "cancel-respected"
	// InvPauseRespected: no handler begins later than 10 s after a pause of
	// its queue was answered and before the resume was sent.
	InvPauseRespected = "pause-respected"
	// InvNotEarly: a command issued with a delay has its runAt stored, no
	// handler of it begins before runAt (the journal's clock) and no
	// started event is earlier; one whose runAt is after the run is still
	// scheduled (pending, never started).
	InvNotEarly = "not-early"
)

// Violation is one broken invariant.
type Violation struct {
	// Invariant is one of the Inv… names.
	Invariant string
	// CommandID is the command that breaks it.
	CommandID string
	// Detail says how, for a person.
	Detail string
}

// Report is the outcome of a run: its figures and violations.
type Report struct {
	// Scenario and Seed name the run; Seed replays its schedule.
	Scenario string
	Seed     uint64
	// Duration is the whole run: set up, chaos, settle and check.
	Duration time.Duration

	// Issued commands; of those Accepted (a 2xx received) or NotAccepted
	// (the client gave up); of the accepted, Completed, Poisoned, Lost (no
	// record) and Stranded (not final when the run settled).
	Issued, Accepted, NotAccepted, Completed, Poisoned, Lost, Stranded int
	// Scheduled counts the commands issued with a delay, StillScheduled
	// those whose runAt is after the run (they end pending, waiting for
	// it).
	Scheduled, StillScheduled int
	// Cancelled counts accepted commands that ended cancelled; CancelsSent
	// the commands a cancel was sent for, CancelsAccepted those answered
	// 2xx, CancelsRefused those answered 409 (they had ended).
	Cancelled, CancelsSent, CancelsAccepted, CancelsRefused int
	// Pauses are the pause windows of the queue (from the pause's answer
	// to the resume's sending); PausesFailed the pauses or resumes never
	// answered 2xx.
	Pauses       []pauseWindow
	PausesFailed int
	// PoisonedByLostDeliveries counts commands designed to complete that
	// reached the poison ceiling by dequeue count with fewer executions:
	// deliveries lost to kills and faults (documented, not a violation).
	PoisonedByLostDeliveries int
	// ClientRetries counts POSTs after the first, over all commands.
	ClientRetries int64
	// Limit is demo.sleep's global concurrency limit in the run (0: none);
	// LimitPeak the most demo.sleep handlers the journal shows at once.
	// Ordered counts the commands with an order key (flow.go).
	Limit, LimitPeak, Ordered int
	// Skews are the workers' clock skews (Scenario.Skews).
	Skews []time.Duration
	// Mem are the spared roles' memory samples (Scenario.Sample).
	Mem []MemSeries

	// Executions counts journalled handler executions; Extra those that
	// were not a retry after a recorded failure, split by explanation
	// (a lease_lost event, a SIGKILL, a logged storage fault) and
	// Unexplained.
	Executions, Extra                                  int
	ExplainedLeaseLost, ExplainedCrash, ExplainedFault int
	Unexplained                                        int
	// Kills counts SIGKILLs by the kill loop; SelfExits processes that
	// exited without being killed or stopped.
	Kills, SelfExits int
	// Faults counts injected storage faults by kind; Injected503 the 503
	// answers the HTTP fault proxy made (bursts and targeted).
	Faults      map[string]int
	Injected503 int64
	// JournalLines and JournalBad (unreadable lines) describe the journal;
	// LeftOnQueue and MarkersLeft what storage held at the end.
	JournalLines, JournalBad, LeftOnQueue, MarkersLeft int
	// LeaseGrowths counts "growing the lease" lines in the processors' logs.
	LeaseGrowths int
	// SettleTime is how long the accepted commands took to become final
	// after the chaos (the settle deadline when some did not).
	SettleTime time.Duration
	// Violations are the broken invariants; Notes what is worth knowing
	// but breaks none.
	Violations []Violation
	Notes      []string
}

// FaultsTotal sums the injected faults (503 answers not counted: see Injected503).
func (r *Report) FaultsTotal() int {
	n := 0
	for _, v := range r.Faults {
		n += v
	}
	return n
}

// Figures is the report's summary block.
func (r *Report) Figures() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos %s: seed %d (replay: CMDQ_CHAOS_SEED=%d), duration %s\n", r.Scenario, r.Seed, r.Seed, r.Duration.Round(time.Second))
	fmt.Fprintf(&b, "  commands: issued %d, accepted %d (not accepted %d), completed %d, poisoned %d (of which by deliveries lost to kills/faults: %d), lost %d, stranded %d; client retries %d\n",
		r.Issued, r.Accepted, r.NotAccepted, r.Completed, r.Poisoned, r.PoisonedByLostDeliveries, r.Lost, r.Stranded, r.ClientRetries)
	if r.Scheduled > 0 {
		fmt.Fprintf(&b, "  scheduled %d (still scheduled at the end: %d)\n", r.Scheduled, r.StillScheduled)
	}
	if r.CancelsSent > 0 || len(r.Pauses) > 0 {
		longest := time.Duration(0)
		for _, p := range r.Pauses {
			longest = max(longest, p.resumeSent.Sub(p.paused))
		}
		fmt.Fprintf(&b, "  cancels sent %d: answered 2xx %d, 409 %d; cancelled %d; pauses %d (longest %s, failed %d)\n",
			r.CancelsSent, r.CancelsAccepted, r.CancelsRefused, r.Cancelled, len(r.Pauses), longest.Round(100*time.Millisecond), r.PausesFailed)
	}
	fmt.Fprintf(&b, "  handler executions %d; duplicates %d: explained by lease_lost %d, by SIGKILL %d, by logged storage faults %d; unexplained %d\n",
		r.Executions, r.Extra, r.ExplainedLeaseLost, r.ExplainedCrash, r.ExplainedFault, r.Unexplained)
	kinds := make([]string, 0, len(r.Faults))
	for k := range r.Faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fs := make([]string, 0, len(kinds))
	for _, k := range kinds {
		fs = append(fs, fmt.Sprintf("%s %d", k, r.Faults[k]))
	}
	fmt.Fprintf(&b, "  kills %d (processes that exited on their own: %d); faults %d [%s]; 503 answers injected %d\n",
		r.Kills, r.SelfExits, r.FaultsTotal(), strings.Join(fs, ", "), r.Injected503)
	lines, _ := memFigures(r.Mem)
	for _, l := range lines {
		fmt.Fprintf(&b, "  memory: %s\n", l)
	}
	if len(r.Skews) > 0 {
		fmt.Fprintf(&b, "  clock skews (w1, w2, …): %v, run on the storage service's clock\n", r.Skews)
	}
	if r.Limit > 0 || r.Ordered > 0 {
		fmt.Fprintf(&b, "  flow control: %s limited to %d, at most %d ran at once; %d commands on %d order keys\n", limitedType, r.Limit, r.LimitPeak, r.Ordered, orderKeys)
	}
	fmt.Fprintf(&b, "  settled in %s; left on the queue %d; reconciler markers left %d; leases grown %d times; journal lines %d (unreadable %d)\n",
		r.SettleTime.Round(100*time.Millisecond), r.LeftOnQueue, r.MarkersLeft, r.LeaseGrowths, r.JournalLines, r.JournalBad)
	for i, n := range r.Notes {
		if i == 5 {
			fmt.Fprintf(&b, "  note: … and %d more\n", len(r.Notes)-5)
			break
		}
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	counts := map[string]int{}
	for _, v := range r.Violations {
		counts[v.Invariant]++
	}
	if len(counts) == 0 {
		b.WriteString("  invariants: all hold\n")
	} else {
		names := make([]string, 0, len(counts))
		for k := range counts {
			names = append(names, k)
		}
		sort.Strings(names)
		var parts []string
		for _, k := range names {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, counts[k]))
		}
		fmt.Fprintf(&b, "  VIOLATIONS: %s\n", strings.Join(parts, ", "))
	}
	return b.String()
}

// procInfo is what check needs to know about the processes.
type procInfo interface {
	byWorker(worker string) *proc
	grepLogs(s string, max int) []string
}

// check evaluates every invariant over the commands issued, the storage
// snapshot and the journal, and fills r.
func check(r *Report, cmds []*command, snap *snapshot, j *journal, ps procInfo) {
	r.Issued = len(cmds)
	r.Executions = 0
	for _, xs := range j.byID {
		r.Executions += len(xs)
	}
	r.JournalLines, r.JournalBad = j.lines, j.bad
	r.MarkersLeft = len(snap.markers)
	for _, n := range snap.messages {
		r.LeftOnQueue += n
	}
	r.LeftOnQueue += snap.other
	add := func(inv, id, format string, args ...any) {
		r.Violations = append(r.Violations, Violation{Invariant: inv, CommandID: id, Detail: fmt.Sprintf(format, args...)})
	}
	accepted := map[string]*command{}
	for _, c := range cmds {
		c.mu.Lock()
		ok, refused, tries := c.accepted, c.refused, c.tries
		c.mu.Unlock()
		if refused != "" {
			add(InvRetryAccepted, c.ID, "%s %s: %s after %d tries", c.Type, c.Params, refused, tries)
		}
		if !ok {
			r.NotAccepted++
			continue
		}
		r.Accepted++
		accepted[c.ID] = c
	}

	poisonedIDs := map[string]bool{}
	for _, c := range cmds {
		if !c.isAccepted() {
			continue
		}
		h := snap.cmds[c.ID]
		if h == nil || !h.Found {
			r.Lost++
			add(InvAcceptedFinal, c.ID, "lost: %s %s was accepted (HTTP %d) but storage holds no record of it", c.Type, c.Params, c.code)
			continue
		}
		switch h.Status {
		case "completed":
			r.Completed++
		case "poisoned":
			r.Poisoned++
			poisonedIDs[c.ID] = true
		case "cancelled":
			r.Cancelled++
		case "pending":
			if c.Delay >= stillScheduled && h.RunAt.After(time.Now()) {
				r.StillScheduled++ // waits for its time: checkSchedule checks it
				break
			}
			fallthrough
		default:
			r.Stranded++
			add(InvAcceptedFinal, c.ID, "stranded: %s %s accepted (HTTP %d) is %s after the run settled; queue messages for it: %d; reconciler marker: %v",
				c.Type, c.Params, c.code, h.Status, snap.messages[c.ID], snap.markers[c.ID])
		}
		checkCommand(r, add, c, h, j.byID[c.ID], ps)
		checkCancel(r, add, c, h, j.byID[c.ID])
		checkSchedule(r, add, c, h, j.byID[c.ID])
	}
	checkPauses(r, add, j)
	checkLimit(r, add, r.Limit, cmds, j, ps)
	checkOrder(r, add, cmds, snap, j, ps)

	// The poison table holds exactly the poisoned commands.
	for id, e := range snap.poison {
		if poisonedIDs[id] {
			continue
		}
		if c := accepted[id]; c != nil {
			add(InvPoisonTable, id, "poison entry (reason %q, dequeue count %d) for %s %s, whose status is %s", e.Reason, e.DequeueCount, c.Type, c.Params, snap.cmds[id].Status)
		} else {
			add(InvPoisonTable, id, "poison entry (reason %q, type %q) for an id no client had accepted", e.Reason, e.Type)
		}
	}
	for id := range poisonedIDs {
		if _, ok := snap.poison[id]; !ok {
			add(InvPoisonTable, id, "command is poisoned but has no poison-table entry")
		}
	}
	sort.SliceStable(r.Violations, func(i, k int) bool { return r.Violations[i].Invariant < r.Violations[k].Invariant })
}

// checkCommand checks one accepted command's history against its journal.
func checkCommand(r *Report, add func(inv, id, format string, args ...any), c *command, h *history, xs []*execution, ps procInfo) {
	// Outcome as designed (a cancelled command: checkCancel).
	switch {
	case h.Status == "cancelled":
	case h.Status == "poisoned" && !c.WantPoison:
		failed := h.count("failed")
		if lost, ok := lostDeliveries(h); ok && failed < demoCeiling && poisonReason(h) == "poison ceiling exceeded" {
			// Deliveries were lost to kills or faults (each recorded as
			// lease_lost): each dequeue counts against the ceiling
			// (documented), so fewer attempts than the ceiling failed.
			r.PoisonedByLostDeliveries++
			r.Notes = append(r.Notes, fmt.Sprintf("%s %s %s poisoned over the ceiling after %d executions (%d failed attempts recorded, %d deliveries lost): deliveries lost to kills/faults", c.ID, c.Type, c.Params, len(xs), failed, lost))
		} else {
			add(InvDesignedOutcome, c.ID, "%s %s is poisoned (reason %q) but was designed to complete; %d executions, %d failed attempts recorded, every delivery before the poisoning explained by a failed or lease_lost event: %v", c.Type, c.Params, poisonReason(h), len(xs), failed, ok)
		}
	case h.Status == "completed" && c.WantPoison:
		add(InvDesignedOutcome, c.ID, "%s %s completed but was designed to end poisoned", c.Type, c.Params)
	}

	// Projection agrees with the last outcome event.
	last := ""
	for _, e := range h.Events {
		switch e.Kind {
		case "completed", "poisoned", "discarded", "requeued", "failed", "deferred", "cancelled":
			last = e.Kind
		}
	}
	if (h.Status == "completed" || h.Status == "poisoned" || h.Status == "cancelled") && last != h.Status {
		add(InvProjection, c.ID, "status is %s but the last outcome event is %q", h.Status, last)
	}

	// At most one completed event.
	if n := h.count("completed"); n > 1 {
		add(InvSingleCompletion, c.ID, "%d completed events", n)
	}

	// No event written twice by one attempt. (A requeued event belongs to
	// no attempt: each recovery enqueue writes one, so a client that
	// re-issues a pending command twice legitimately leaves two.)
	seen := map[string]string{}
	for _, e := range h.Events {
		if e.Kind == "created" || e.Kind == "requeued" {
			continue
		}
		k := fmt.Sprintf("%s/%s/%d/%d", e.Kind, e.Worker, e.Attempt, e.Step)
		if prev, dup := seen[k]; dup {
			add(InvEventOnce, c.ID, "event %s written twice by %s attempt %d (rows %s and %s)", describeKind(e), e.Worker, e.Attempt, prev, e.Seq)
			continue
		}
		seen[k] = e.Seq
	}

	// A completed command has a successful execution behind it.
	if h.Status == "completed" {
		backed := false
		for _, e := range h.Events {
			if e.Kind != "completed" {
				continue
			}
			for _, x := range xs {
				if x.Worker == e.Worker && x.Attempt == e.Attempt && x.End >= 0 && x.Err == "" {
					backed = true
				}
			}
		}
		if !backed {
			add(InvCompletionBacked, c.ID, "completed, but no journalled execution by the completing worker and attempt succeeded")
		}
	}

	// Extra executions must be explained.
	for i := 1; i < len(xs); i++ {
		prev, x := xs[i-1], xs[i]
		if o := h.outcome(prev.Worker, prev.Attempt); o != nil && (o.Kind == "failed" || o.Kind == "deferred") && prev.End >= 0 && prev.End < x.Begin {
			continue // a retry after a recorded failure or deferral
		}
		r.Extra++
		switch why := explain(h, prev, x, ps); why {
		case "lease_lost":
			r.ExplainedLeaseLost++
		case "crash":
			r.ExplainedCrash++
		case "fault":
			r.ExplainedFault++
		default:
			r.Unexplained++
			add(InvDuplicateExplained, c.ID, "%s %s ran again without explanation:\n      before: %s\n      again:  %s\n      %s",
				c.Type, c.Params, prev, x, why)
		}
	}

	// No step runs again after it was recorded (a rerun resumes after
	// run.LastStep()), unless the recording execution lost its lease. Only
	// demo.steps resumes: demo.echo records its one step whatever
	// LastStep says.
	if c.Type != "demo.steps" {
		return
	}
	recorded := map[int]*execution{} // step → the execution that recorded it first
	type mark struct {
		line int
		x    *execution
		s    stepMark
	}
	var marks []mark
	for _, x := range xs {
		for _, s := range x.Steps {
			marks = append(marks, mark{s.Line, x, s})
		}
	}
	sort.Slice(marks, func(a, b int) bool { return marks[a].line < marks[b].line })
	for _, m := range marks {
		if m.s.Recorded {
			if recorded[m.s.Step] == nil {
				recorded[m.s.Step] = m.x
			}
			continue
		}
		by := recorded[m.s.Step]
		if by == nil || by == m.x {
			continue
		}
		if leaseLost(h, by, m.x) {
			continue
		}
		add(InvStepOnce, c.ID, "step %d ran again (journal line %d, %s) after %s had recorded it; the rerun started from last step %d",
			m.s.Step, m.line, m.x.Worker, by.Worker, m.x.Last)
	}
	stepEvents := map[int][]event{}
	for _, e := range h.Events {
		if e.Kind == "step_completed" {
			stepEvents[e.Step] = append(stepEvents[e.Step], e)
		}
	}
	for s, es := range stepEvents {
		for k := 1; k < len(es); k++ {
			a, b := es[k-1], es[k]
			if a.Worker == b.Worker && a.Attempt == b.Attempt {
				continue // reported by event-once
			}
			if h.has("lease_lost", a.Worker, a.Attempt) || h.has("lease_lost", b.Worker, a.Attempt) {
				continue
			}
			add(InvStepOnce, c.ID, "step_completed %d recorded by %s attempt %d (%s) and again by %s attempt %d (%s)", s, a.Worker, a.Attempt, a.Seq, b.Worker, b.Attempt, b.Seq)
		}
	}
}

// lostDeliveries counts the deliveries before the one that poisoned the
// command (its attempt number is the message's dequeue count) recorded as
// lease_lost, since the last requeue; ok says every one of them is recorded
// (failed or lease_lost), so none was lost unnoticed.
func lostDeliveries(h *history) (lost int, ok bool) {
	from, poisonedAt := 0, 0
	for i, e := range h.Events {
		switch e.Kind {
		case "requeued":
			from = i + 1
		case "poisoned":
			poisonedAt = e.Attempt
		}
	}
	// A delivery that finds more than 10 deliveries without an outcome
	// records lease_lost for the last 10 and names the earlier ones in the
	// first one's note (processor.LostRangeNote).
	summed := map[int]bool{}
	for _, e := range h.Events[from:] {
		var lo, hi int
		if i := strings.Index(e.Note, "(deliveries "); e.Kind == "lease_lost" && i >= 0 {
			if n, _ := fmt.Sscanf(e.Note[i:], processor.LostRangeNote, &lo, &hi); n == 2 {
				for a := lo; a <= hi; a++ {
					summed[a] = true
				}
			}
		}
	}
	for a := 1; a < poisonedAt; a++ {
		if summed[a] {
			lost++
			continue
		}
		found := false
		for _, e := range h.Events[from:] {
			if e.Attempt != a {
				continue
			}
			switch e.Kind {
			case "lease_lost":
				lost++
				found = true
			case "failed", "deferred":
				found = true
			}
			if found {
				break
			}
		}
		if !found {
			return lost, false
		}
	}
	return lost, poisonedAt > 0
}

func describeKind(e event) string {
	if e.Kind == "step_completed" {
		return fmt.Sprintf("step_completed %d", e.Step)
	}
	return e.Kind
}

func poisonReason(h *history) string {
	for i := len(h.Events) - 1; i >= 0; i-- {
		if h.Events[i].Kind == "poisoned" {
			return h.Events[i].Reason
		}
	}
	return ""
}

// explain says why x ran after prev: "lease_lost", "crash", "fault", or a
// sentence describing why none applies.
func explain(h *history, prev, x *execution, ps procInfo) string {
	if leaseLost(h, prev, x) {
		return "lease_lost"
	}
	outcome := h.outcome(prev.Worker, prev.Attempt)
	p := ps.byWorker(prev.Worker)
	if k := killedAt(p); outcome == nil && !k.IsZero() && k.After(prev.BeginT) && k.Before(x.BeginT) {
		return "crash"
	}
	overlap := prev.End < 0 || prev.End > x.Begin
	if outcome == nil && !overlap {
		for _, l := range ps.grepLogs(prev.ID, 50) {
			if strings.HasPrefix(l, prev.Worker+":") && strings.Contains(l, "storage fault") {
				return "fault"
			}
		}
	}
	var why []string
	if overlap {
		why = append(why, "the executions overlapped")
	}
	if outcome != nil {
		why = append(why, fmt.Sprintf("the earlier attempt's outcome (%s, %s) was recorded", outcome.Kind, outcome.Seq))
	} else {
		why = append(why, "the earlier attempt has no outcome event and no lease_lost event")
	}
	if prev.Attempt == x.Attempt {
		why = append(why, "both have the same attempt number: two queue messages for one command")
	}
	if k := killedAt(p); k.IsZero() {
		why = append(why, prev.Worker+" was not killed")
	} else if !k.Before(x.BeginT) {
		why = append(why, prev.Worker+" was killed only after the second execution began")
	}
	return strings.Join(why, "; ")
}

func killedAt(p *proc) time.Time {
	if p == nil {
		return time.Time{}
	}
	return p.killed()
}

// leaseLost reports whether the history explains that next ran while, or
// after, prev lost its lease: a lease_lost event for prev's attempt, written
// by prev's worker (which noticed the loss), by next's (which took the
// message over), or by a later delivery's worker after prev began (next
// was killed or superseded before it wrote: the delivery after it records
// every delivery without an outcome).
func leaseLost(h *history, prev, next *execution) bool {
	if h.has("lease_lost", prev.Worker, prev.Attempt) || (next != nil && h.has("lease_lost", next.Worker, prev.Attempt)) {
		return true
	}
	for _, e := range h.Events {
		if e.Kind == "lease_lost" && e.Attempt == prev.Attempt && !e.Time.IsZero() && !e.Time.Before(prev.BeginT.Add(-time.Second)) {
			return true
		}
	}
	return false
}

// checkCancel holds one command to its cancel requests (InvCancelRespected).
func checkCancel(r *Report, add func(inv, id, format string, args ...any), c *command, h *history, xs []*execution) {
	c.mu.Lock()
	cs := c.cancel
	c.mu.Unlock()
	if cs.tries > 0 {
		r.CancelsSent++
	}
	switch {
	case cs.code/100 == 2:
		r.CancelsAccepted++
		if h.Status != "cancelled" {
			add(InvCancelRespected, c.ID, "%s %s: the cancel was answered %d but the command is %s", c.Type, c.Params, cs.code, h.Status)
		}
		for _, x := range xs {
			if x.BeginT.After(cs.answeredAt.Add(cancelTolerance)) {
				add(InvCancelRespected, c.ID, "%s %s: a handler began %s after the cancel was answered %d (%s): %s",
					c.Type, c.Params, x.BeginT.Sub(cs.answeredAt).Round(time.Millisecond), cs.code, cs.answeredAt.Format("15:04:05.000"), x)
			}
		}
	case cs.code == http.StatusConflict:
		r.CancelsRefused++
		if h.Status == "cancelled" {
			add(InvCancelRespected, c.ID, "%s %s: the cancel was refused (409: the command had ended) but the command is cancelled", c.Type, c.Params)
		}
	case cs.code != 0:
		add(InvCancelRespected, c.ID, "%s %s: the cancel was answered %d", c.Type, c.Params, cs.code)
	}
	if h.Status == "cancelled" && cs.tries == 0 {
		add(InvCancelRespected, c.ID, "%s %s is cancelled, but no cancel was sent for it", c.Type, c.Params)
	}
	if h.Status == "cancelled" && !h.hasKind("cancelled") {
		add(InvCancelRespected, c.ID, "%s %s is cancelled without a cancelled event", c.Type, c.Params)
	}
}

// checkPauses holds every handler execution to the pause windows
// (InvPauseRespected): none begins from pauseBound after a pause was
// answered until its resume was sent.
func checkPauses(r *Report, add func(inv, id, format string, args ...any), j *journal) {
	for _, p := range r.Pauses {
		from := p.paused.Add(pauseBound)
		if !from.Before(p.resumeSent) {
			continue
		}
		for id, xs := range j.byID {
			for _, x := range xs {
				if x.BeginT.After(from) && x.BeginT.Before(p.resumeSent) {
					add(InvPauseRespected, id, "a handler began %s after its queue's pause was answered (%s), before the resume was sent (%s): %s",
						x.BeginT.Sub(p.paused).Round(time.Millisecond), p.paused.Format("15:04:05.000"), p.resumeSent.Format("15:04:05.000"), x)
				}
			}
		}
	}
}
