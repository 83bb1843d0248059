package main

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// Why a command waits, in the CLI's words (Status.Waiting): the waiting
// line of `cmdq status`, the short form on the progress line of `send
// --wait` and the "cmdq: waiting: …" notes it prints on stderr. The
// console's command page says the same (console/templates/command.html).

// takenNote explains a pending or retrying command that waits for
// nothing: a processor has taken it, and its started event is written
// lazily.
const takenNote = "taken by a processor: its handler shows as running after about 1 s (the started event is written lazily)"

// waitingText says in one line why st waits: "" when it waits for nothing
// (running, final, or just taken by a processor).
func waitingText(st cmdq.Status, now time.Time) string {
	w := st.Waiting
	if w == nil {
		return ""
	}
	q, id := term(st.Queue), term(st.ID)
	switch w.Reason {
	case cmdq.WaitScheduled:
		return fmt.Sprintf("scheduled for %s (%s; cmdq run-now %s makes it due now)", fmtTime(w.Until), untilText(w.Until, now), id)
	case cmdq.WaitRetrying:
		return fmt.Sprintf("retrying: attempt %d at %s (%s; cmdq run-now %s makes it due now)", st.Attempts+1, fmtTime(w.Until), untilText(w.Until, now), id)
	case cmdq.WaitDeferred:
		return fmt.Sprintf("deferred by its handler (RetryAfter): attempt %d at %s (%s; %d deferrals, which do not count toward the poison ceiling; cmdq run-now %s makes it due now)",
			st.Attempts+1, fmtTime(w.Until), untilText(w.Until, now), st.Deferrals, id)
	case cmdq.WaitPaused:
		var who []string
		if w.By != "" {
			who = append(who, "by "+term(w.By))
		}
		if !w.Since.IsZero() {
			who = append(who, "since "+fmtTime(w.Since))
		}
		paused := fmt.Sprintf("its queue \"%s\" is paused", q)
		if len(who) > 0 {
			paused += " (" + strings.Join(who, " ") + ")"
		}
		return paused + fmt.Sprintf("; it starts when the queue is resumed (cmdq queue resume %s)", q)
	case cmdq.WaitNoProcessor:
		return fmt.Sprintf("no processor polls queue \"%s\" (no live heartbeat names it); it starts when one does (start one: cmdq worker, or cmdq serve)", q)
	case cmdq.WaitOrder:
		return fmt.Sprintf("behind command %s on order key %q: the key's commands run one at a time, in issue order; it starts once that one is final", w.Command, term(w.Key))
	case cmdq.WaitPermit:
		by := ""
		if len(w.HeldBy) > 0 {
			by = " by " + term(strings.Join(w.HeldBy, ", "))
		}
		if w.Key != "" {
			return fmt.Sprintf("waiting for a permit of %s for key %s (%d of %d held%s); it starts when one is given back", term(st.Type), term(w.Key), w.Held, w.Limit, by)
		}
		return fmt.Sprintf("waiting for a permit of %s (%d of %d held%s); it starts when one is given back", term(st.Type), w.Held, w.Limit, by)
	case cmdq.WaitSlot:
		return fmt.Sprintf("every processor of queue \"%s\" is busy; it starts when a handler slot frees", q)
	case cmdq.WaitDue:
		return fmt.Sprintf("due; a processor of queue \"%s\" takes it at its next poll (a handler already running shows as running after about 1 s)", q)
	}
	return term(string(w.Reason))
}

// waitingShort is the reason on the progress line of `send --wait` (which
// must stay under 80 columns): a few words.
func waitingShort(st cmdq.Status, now time.Time) string {
	w := st.Waiting
	switch {
	case w == nil:
		return ""
	case w.Reason == cmdq.WaitScheduled:
		return "scheduled, due " + untilText(w.Until, now)
	case w.Reason == cmdq.WaitRetrying:
		return fmt.Sprintf("attempt %d failed; next %s", st.Attempts, untilText(w.Until, now))
	case w.Reason == cmdq.WaitDeferred:
		return fmt.Sprintf("attempt %d deferred; next %s", st.Attempts, untilText(w.Until, now))
	case w.Reason == cmdq.WaitPaused && w.By != "":
		return "its queue is paused by " + oneLine(term(w.By), 24)
	case w.Reason == cmdq.WaitPaused:
		return "its queue is paused"
	case w.Reason == cmdq.WaitNoProcessor:
		return "no processor polls its queue"
	case w.Reason == cmdq.WaitOrder:
		return "behind another command of its order key"
	case w.Reason == cmdq.WaitPermit:
		return fmt.Sprintf("waiting for a permit (%d of %d held)", w.Held, w.Limit)
	case w.Reason == cmdq.WaitSlot:
		return "every processor of its queue is busy"
	case w.Reason == cmdq.WaitDue:
		return "due: taken at a processor's next poll"
	}
	return oneLine(term(string(w.Reason)), 24)
}

// untilText says when t comes: "in 59m", "in 2h30m", "now".
func untilText(t, now time.Time) string {
	d := t.Sub(now)
	if d <= 0 {
		return "now"
	}
	return "in " + shortDuration(d)
}

// shortDuration writes d to the second under an hour, else to the minute,
// without zero units: "45s", "59m12s", "1h", "2h30m".
func shortDuration(d time.Duration) string {
	if d < time.Hour {
		d = d.Round(time.Second)
	} else {
		d = d.Round(time.Minute)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// noteDelay is how long `send --wait` lets a command be due, or wait for a
// slot, before it says so: a processor normally takes it within moments.
const noteDelay = 2 * time.Second

// waitNotes prints, while `send --wait` waits, why the command waits: one
// "cmdq: waiting: …" line on stderr per reason (above the progress line on
// a terminal). A reason that lasts (a paused queue, no processor, a
// schedule or retry more than noteDelay ahead) is said at once; a slot or
// due after noteDelay, if no newer status came meanwhile; a schedule or
// retry closer than that not at all.
type waitNotes struct {
	w     io.Writer     // stderr
	pr    *progress     // the progress line (nil when stderr is not a terminal)
	delay time.Duration // noteDelay (0) or a test's

	mu    sync.Mutex
	last  string // the reason said or armed last (noteKey)
	gen   int    // counts statuses, so a timer knows when a newer one came
	timer *time.Timer
	done  bool
}

// noteKey names what a note says: a new key is a new note.
func noteKey(w *cmdq.Waiting) string {
	return fmt.Sprintf("%s|%s|%s|%s", w.Reason, w.Until.Format(time.RFC3339Nano), w.By, w.Since.Format(time.RFC3339Nano))
}

// update takes a status seen while waiting.
func (n *waitNotes) update(st cmdq.Status) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w, key := st.Waiting, ""
	if w != nil {
		key = noteKey(w)
	}
	if n.done || key == n.last {
		return // the same reason: said, or armed, already
	}
	n.gen++
	if n.timer != nil {
		n.timer.Stop()
		n.timer = nil
	}
	n.last = key
	if w == nil {
		return
	}
	now, delay := time.Now(), cmp.Or(n.delay, noteDelay)
	switch w.Reason {
	case cmdq.WaitScheduled, cmdq.WaitRetrying, cmdq.WaitDeferred:
		if w.Until.Sub(now) > delay {
			n.say(waitingText(st, now))
		}
	case cmdq.WaitSlot, cmdq.WaitDue:
		gen := n.gen
		n.timer = time.AfterFunc(delay, func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if !n.done && n.gen == gen {
				n.say(waitingText(st, time.Now()))
			}
		})
	default:
		n.say(waitingText(st, now))
	}
}

// say prints a note. Caller holds n.mu.
func (n *waitNotes) say(text string) {
	line := "cmdq: waiting: " + text
	if n.pr != nil {
		n.pr.println(line)
		return
	}
	fmt.Fprintln(n.w, line)
}

// stop ends the notes (a timer armed no longer prints).
func (n *waitNotes) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.done = true
	if n.timer != nil {
		n.timer.Stop()
	}
}
