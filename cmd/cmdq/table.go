package main

import (
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

// columns is the width w's tables must fit: COLUMNS when set, else the
// terminal's width when w is a terminal; 0 (no limit: rows whole) when w
// is a pipe or a file, so `cmdq poison ls | grep` sees every column.
func columns(w io.Writer) int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	if sw, ok := w.(safeWriter); ok && sw.tty {
		if f, ok := sw.w.(*os.File); ok {
			if n := ttyColumns(f); n > 0 {
				return n
			}
		}
		return ttyDefaultColumns
	}
	return 0
}

// ttyDefaultColumns is the width of a terminal that does not say its own.
const ttyDefaultColumns = 80

// table lays out rows (the first is the header) in columns two spaces
// apart. Unless wide or width is 0, lines fit width: the columns listed in drop (by
// index, least useful first) are left out, one after the other, while the
// last column would get fewer than minLast characters, and the last column
// is then cut (with "…"). Cells are single-line text, already escaped for
// the terminal.
func table(w io.Writer, rows [][]string, width int, wide bool, drop []int, minLast int) {
	if len(rows) == 0 {
		return
	}
	n := len(rows[0])
	widths := make([]int, n)
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	shown := make([]bool, n)
	for i := range shown {
		shown[i] = true
	}
	fixed := func() int {
		f := 0
		for i := range n - 1 {
			if shown[i] {
				f += widths[i] + 2
			}
		}
		return f
	}
	last := widths[n-1]
	if !wide && width > 0 {
		for _, i := range drop {
			if width-fixed() >= min(minLast, last) {
				break
			}
			shown[i] = false
		}
		// At least a few characters of the last column, even on a narrow
		// terminal (the line then wraps).
		last = max(min(last, width-fixed()), 12)
	}
	var b strings.Builder
	for _, r := range rows {
		b.Reset()
		for i, c := range r {
			if i == n-1 {
				b.WriteString(cut(c, last))
				break
			}
			if !shown[i] {
				continue
			}
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2))
		}
		_, _ = io.WriteString(w, strings.TrimRight(b.String(), " ")+"\n")
	}
}

// cut shortens s to at most n characters, ending it with "…" when cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:max(n-1, 0)]) + "…"
}
