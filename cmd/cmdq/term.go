package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/cmdq-dev/cmdq"
)

// On a terminal the CLI colours states and draws a progress line while
// `send --wait` waits; piped or redirected, it prints plain text and no
// progress. NO_COLOR (https://no-color.org, any non-empty value) and
// TERM=dumb turn colours off.

// SGR sequences of the palette: the only escape sequences the CLI writes
// (safeWriter lets exactly these through, and only when colours are on).
const (
	sgrReset  = "\x1b[0m"
	sgrDim    = "\x1b[2m"
	sgrRed    = "\x1b[31m"
	sgrGreen  = "\x1b[32m"
	sgrYellow = "\x1b[33m"
	sgrCyan   = "\x1b[36m"
)

var sgrCodes = []string{sgrReset, sgrDim, sgrRed, sgrGreen, sgrYellow, sgrCyan}

// Progress line control: back to the start of the line, erase to its end.
const eraseLine = "\r\x1b[K"

// isTerminal reports whether f is an interactive terminal.
func isTerminal(f *os.File) bool {
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// colorOn decides colours for a stream: only on a terminal, and not when
// NO_COLOR is set (non-empty) or TERM is dumb.
func colorOn(tty bool, getenv func(string) string) bool {
	return tty && getenv("NO_COLOR") == "" && getenv("TERM") != "dumb"
}

// terminalWriter wraps a standard stream for the CLI: escaped output, with
// colours and progress when it is a terminal.
func terminalWriter(f *os.File) safeWriter {
	tty := isTerminal(f)
	return safeWriter{w: f, tty: tty, color: colorOn(tty, os.Getenv)}
}

// palette colours text when colours are on for the stream it was made for.
type palette struct{ on bool }

// paletteOf returns the palette for w (colours only on a safeWriter that
// has them on).
func paletteOf(w io.Writer) palette {
	sw, ok := w.(safeWriter)
	return palette{on: ok && sw.color}
}

func (p palette) paint(code, s string) string {
	if !p.on || s == "" {
		return s
	}
	return code + s + sgrReset
}

// dim marks what matters less (times).
func (p palette) dim(s string) string { return p.paint(sgrDim, s) }

// errorPrefix is the "cmdq:" before an error message.
func (p palette) errorPrefix() string { return p.paint(sgrRed, "cmdq:") }

// stateColor is the colour of a command state or event kind.
func stateColor(s string) string {
	switch s {
	case string(cmdq.StateCompleted):
		return sgrGreen
	case string(cmdq.StatePoisoned), string(cmdq.EventFailed):
		return sgrRed
	case string(cmdq.StateRetrying), string(cmdq.EventRequeued), string(cmdq.EventDeferred):
		return sgrYellow
	case string(cmdq.StateRunning), string(cmdq.EventStarted):
		return sgrCyan
	case string(cmdq.StateDiscarded), string(cmdq.StateCancelled):
		return sgrDim
	}
	return ""
}

// state paints s (already escaped for the terminal, and padded if it
// should be) in the colour of the state or event kind named by raw.
func (p palette) state(raw, s string) string {
	if c := stateColor(raw); c != "" {
		return p.paint(c, s)
	}
	return s
}

// progress is the line `send --wait` redraws on a terminal: how long it has
// waited and the command's state, redrawn at every change and every
// progressTick in between (the elapsed time moves while the long-poll
// waits). nil (not a terminal) draws nothing.
type progress struct {
	w     io.Writer // the raw terminal
	p     palette
	start time.Time

	mu    sync.Mutex
	last  *cmdq.Status
	drawn bool
	stop  chan struct{}
}

// progressTick is how often the progress line is redrawn between changes.
const progressTick = 200 * time.Millisecond

// newProgress returns a progress line on w when w is a terminal, else nil.
func newProgress(w io.Writer) *progress {
	sw, ok := w.(safeWriter)
	if !ok || !sw.tty {
		return nil
	}
	pr := &progress{w: sw.w, p: palette{on: sw.color}, start: time.Now(), stop: make(chan struct{})}
	go func() {
		t := time.NewTicker(progressTick)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				pr.mu.Lock()
				if pr.last != nil {
					pr.draw(*pr.last)
				}
				pr.mu.Unlock()
			case <-pr.stop:
				return
			}
		}
	}()
	return pr
}

// update redraws the line for st (and keeps it for the redraws).
func (pr *progress) update(st cmdq.Status) {
	if pr == nil {
		return
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.last = &st
	pr.draw(st)
}

// draw draws the line for st. It stays under 80 columns (a longer one
// would wrap, and only its last row could be redrawn); the ID is on the
// line above it. Caller holds pr.mu.
func (pr *progress) draw(st cmdq.Status) {
	var what string
	switch {
	case st.Waiting != nil:
		what = waitingShort(st, time.Now())
	case st.State == cmdq.StatePending || st.State == cmdq.StateRetrying:
		what = "taken; a running handler shows after ~1 s"
	case st.Attempts > 0:
		what = fmt.Sprintf("attempt %d", st.Attempts)
	}
	if st.Step > 0 {
		what += fmt.Sprintf(", step %d done", st.Step)
	}
	head := fmt.Sprintf("waiting %.1fs: ", time.Since(pr.start).Seconds())
	state := term(string(st.State))
	what = strings.TrimPrefix(what, ", ")
	// " (" and ")" around what.
	if room := maxProgress - len([]rune(head+state)) - 3; len([]rune(what)) > room {
		what = string([]rune(what)[:max(room-1, 0)]) + "…"
	}
	line := head + pr.p.state(string(st.State), state)
	if what != "" {
		line += " " + pr.p.dim("("+what+")")
	}
	fmt.Fprint(pr.w, eraseLine+line)
	pr.drawn = true
}

// maxProgress is the most columns the progress line takes (a longer one
// would wrap on an 80-column terminal).
const maxProgress = 79

// println prints a line of its own above the progress line, which is
// drawn again below it.
func (pr *progress) println(line string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.drawn {
		fmt.Fprint(pr.w, eraseLine)
	}
	fmt.Fprintln(pr.w, line)
	pr.drawn = false
	if pr.last != nil {
		pr.draw(*pr.last)
	}
}

// clear stops the redraws and erases the line, so what follows starts on
// a clean one.
func (pr *progress) clear() {
	if pr == nil {
		return
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	select {
	case <-pr.stop:
	default:
		close(pr.stop)
	}
	pr.last = nil
	if pr.drawn {
		fmt.Fprint(pr.w, eraseLine)
		pr.drawn = false
	}
}
