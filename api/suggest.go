package api

import (
	"fmt"
	"strings"

	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/suggest"
)

// unknownTypeProblem is the 400 for an issue of a type the server has no
// handler for: one sentence naming the nearest registered type, when one
// is a likely typo, and the registered types.
func unknownTypeProblem(typ string, types []string) *client.Problem {
	msg := "unknown command type " + quoteClip(typ)
	if near := suggest.Closest(typ, types); near != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", near)
	}
	msg += "; this server's types: " + strings.Join(types, ", ")
	return newProblem(client.ProblemInvalidRequest, msg, client.FieldError{Pointer: "#/type", Detail: msg})
}
