package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"

	"github.com/cmdq-dev/cmdq/internal/jsonview"
)

// What the CLI prints comes partly from issuers (correlation IDs, params in
// step notes) and handlers (errors). A terminal acts on control characters
// and escape sequences in it (colours, cursor moves, \r overwriting a line,
// bidi overrides reordering text), so every field is printed with those
// characters escaped: visibly, in Go's \x1b / \r / \u202e notation.

// unsafeRune reports whether r must not reach a terminal raw: control
// characters (C0, DEL, C1), format characters (bidi overrides and isolates,
// zero-width characters) and the Unicode line and paragraph separators.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

// escapeRune appends r escaped.
func escapeRune(b []byte, r rune) []byte {
	switch r {
	case '\n':
		return append(b, `\n`...)
	case '\r':
		return append(b, `\r`...)
	case '\t':
		return append(b, `\t`...)
	}
	if r < 0x80 {
		return fmt.Appendf(b, `\x%02x`, r)
	}
	return fmt.Appendf(b, `\u%04x`, r)
}

// term returns s safe to print as one field: every unsafe rune (newlines and
// tabs included) escaped, and bytes that are not UTF-8 as \xHH.
func term(s string) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n <= 1) || unsafeRune(r) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	b := []byte(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b = fmt.Appendf(b, `\x%02x`, s[i])
		case unsafeRune(r):
			b = escapeRune(b, r)
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}

// safeWriter escapes what term escapes except newlines and tabs, which lay
// out the CLI's own output. It is the net under the per-field escaping: the
// binary's stdout and stderr both go through one. When colours are on it
// lets the palette's own SGR sequences (term.go) through, and nothing else.
type safeWriter struct {
	w     io.Writer
	tty   bool // w is an interactive terminal: a progress line may be drawn on it
	color bool // colours are on: the palette's SGR sequences pass
}

// sgrAt returns the length of the palette sequence p starts with, or 0.
func (s safeWriter) sgrAt(p []byte) int {
	if !s.color {
		return 0
	}
	for _, c := range sgrCodes {
		if bytes.HasPrefix(p, []byte(c)) {
			return len(c)
		}
	}
	return 0
}

func (s safeWriter) Write(p []byte) (int, error) {
	clean := true
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRune(p[i:])
		if (r == utf8.RuneError && n <= 1) || (unsafeRune(r) && r != '\n' && r != '\t') {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s.w.Write(p)
	}
	var b []byte
	for i := 0; i < len(p); {
		if k := s.sgrAt(p[i:]); k > 0 {
			b = append(b, p[i:i+k]...)
			i += k
			continue
		}
		r, n := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b = fmt.Appendf(b, `\x%02x`, p[i])
		case unsafeRune(r) && r != '\n' && r != '\t':
			b = escapeRune(b, r)
		default:
			b = append(b, p[i:i+n]...)
		}
		i += n
	}
	if _, err := s.w.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeJSON prints v as indented JSON in which every unsafe rune inside a
// string is a \u escape (encoding/json leaves DEL, C1 controls and bidi
// characters raw). The output is still the same JSON value. The layout is
// bounded (jsonview): values nested deeper than jsonview.DefaultMaxDepth
// stay on their parent's line, so deeply nested params cost what their
// size does.
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(v); err != nil {
		return err
	}
	laid, _ := jsonview.Indent(buf.Bytes(), jsonview.Unlimited, jsonview.DefaultMaxDepth)
	out := make([]byte, 0, len(laid)+1)
	for p := []byte(laid + "\n"); len(p) > 0; {
		r, n := utf8.DecodeRune(p)
		if unsafeRune(r) && r != '\n' && r != '\t' {
			out = append(out, `\u`...)
			out = append(out, fmt.Sprintf("%04x", r)...)
		} else {
			out = append(out, p[:n]...)
		}
		p = p[n:]
	}
	_, err := w.Write(out)
	return err
}
