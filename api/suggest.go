package api

import (
	"fmt"
	"strings"

	"github.com/cmdq-dev/cmdq/client"
)

// unknownTypeProblem is the 400 for an issue of a type the server has no
// handler for: one sentence naming the nearest registered type, when one
// is a likely typo, and the registered types.
func unknownTypeProblem(typ string, types []string) *client.Problem {
	msg := "unknown command type " + quoteClip(typ)
	if near := closestName(typ, types); near != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", near)
	}
	msg += "; this server's types: " + strings.Join(types, ", ")
	return newProblem(client.ProblemInvalidRequest, msg, client.FieldError{Pointer: "#/type", Detail: msg})
}

// closestName returns the name in names nearest to s by edit distance
// (case folded) when it is near enough to be a typo, else "".
func closestName(s string, names []string) string {
	best, bestD := "", -1
	for _, n := range names {
		if d := editDistance(strings.ToLower(s), strings.ToLower(n)); bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	if bestD < 0 || bestD > max(2, len([]rune(s))/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in runes.
func editDistance(a, b string) int {
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
