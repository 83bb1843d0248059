// Package jsonview lays out user-given JSON (a command's params, and any
// other JSON an issuer or a handler stored) for people to read, with work
// bounded before it is done: the output stops at a byte limit, and nesting
// deeper than a depth limit is written without further indentation, so
// that neither the size nor the depth of the input makes a rendering
// expensive. (encoding/json's Indent writes two spaces per level on every
// line: 20 KB nested 9,900 deep become hundreds of megabytes.) The
// console's command page and the CLI's status and poison output use it.
package jsonview

import (
	"strings"
	"unicode/utf8"
)

// Defaults of the limits.
const (
	// DefaultMaxDepth is the nesting depth up to which Indent indents (32
	// levels); deeper values are written on the line of their parent.
	DefaultMaxDepth = 32
	// Unlimited, as Indent's maxBytes, writes the whole input (the work
	// is still linear in the input: depth is bounded).
	Unlimited = -1
)

// Indent returns src laid out with two spaces per nesting level, as
// encoding/json's Indent does, for at most maxBytes bytes of output
// (Unlimited: all of it); levels deeper than maxDepth (<= 0:
// DefaultMaxDepth) are not indented further. cut reports that the output
// stops before the end of src. The work is proportional to the output (and
// to the input skipped as whitespace), never to depth × size.
//
// src need not be valid JSON: whitespace outside strings is dropped and
// replaced by the layout, everything else is copied as it is (bytes that
// are not UTF-8 become U+FFFD), so a broken value still shows what it
// holds.
func Indent(src []byte, maxBytes, maxDepth int) (out string, cut bool) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	limit := maxBytes
	if limit < 0 {
		limit = int(^uint(0) >> 1)
	}
	var b strings.Builder
	b.Grow(min(limit, 2*len(src)) + 8)
	depth := 0
	newline := func(d int) {
		b.WriteByte('\n')
		for range min(d, maxDepth) {
			b.WriteString("  ")
		}
	}
	inString, escaped := false, false
	i := 0
	for ; i < len(src) && b.Len() < limit; i++ {
		c := src[i]
		if inString {
			b.WriteByte(c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
		case '"':
			inString = true
			b.WriteByte(c)
		case '{', '[':
			b.WriteByte(c)
			j := i + 1
			for j < len(src) && isSpace(src[j]) {
				j++
			}
			if j < len(src) && (src[j] == '}' || src[j] == ']') {
				b.WriteByte(src[j]) // empty: {} or []
				i = j
				continue
			}
			depth++
			if depth <= maxDepth {
				newline(depth)
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
			if depth < maxDepth {
				newline(depth)
			}
			b.WriteByte(c)
		case ',':
			b.WriteByte(c)
			if depth <= maxDepth {
				newline(depth)
			}
		case ':':
			b.WriteString(": ")
		default:
			b.WriteByte(c)
		}
	}
	for i < len(src) && isSpace(src[i]) {
		i++
	}
	s := b.String()
	cut = i < len(src)
	if len(s) > limit {
		s = s[:limit]
		cut = true
	}
	if cut {
		// Do not end in the middle of a character.
		for k := 0; k < utf8.UTFMax && len(s) > 0; k++ {
			if r, n := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || n != 1 {
				break
			}
			s = s[:len(s)-1]
		}
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s, cut
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
