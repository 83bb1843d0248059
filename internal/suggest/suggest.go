// Package suggest finds the likely intended name for a mistyped one, for
// the "did you mean" of the API's and the CLI's errors.
package suggest

import "strings"

// Closest returns the name in names nearest to s by edit distance (case
// folded), when it is near enough to be a likely typo: at most 2 edits,
// or a third of s's length for a longer s. "" otherwise.
func Closest(s string, names []string) string {
	best, bestD := "", -1
	ls := strings.ToLower(s)
	for _, n := range names {
		if d := Distance(ls, strings.ToLower(n)); bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	if bestD < 0 || bestD > max(2, len([]rune(s))/3) {
		return ""
	}
	return best
}

// Distance is the Levenshtein distance between a and b, in runes.
func Distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev, cur := make([]int, len(rb)+1), make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
