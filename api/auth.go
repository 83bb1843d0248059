package api

import (
	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// Authentication: bearer tokens with roles, and the limiter of failed
// authentications. They are shared with the console (package console names
// the same types), so one token list and one limiter serve both.

// Role is what a bearer token may do: RoleIssuer, RoleReader or
// RoleOperator.
type Role = httpserve.Role

// The roles. A route needs one of them (a cancel: RoleIssuer or
// RoleOperator); RoleOperator also grants everything RoleReader grants.
// RoleIssuer grants only POST /v1/commands and POST
// /v1/commands/{id}/cancel.
const (
	// RoleIssuer may issue and cancel commands (POST /v1/commands, POST
	// /v1/commands/{id}/cancel).
	RoleIssuer = httpserve.RoleIssuer
	// RoleReader may read command status and events (GET /v1/commands/{id},
	// GET /v1/commands/{id}/events), list the queues (GET /v1/queues),
	// scrape GET /metrics and view the console.
	RoleReader = httpserve.RoleReader
	// RoleOperator may do everything RoleReader may, and list, inspect,
	// requeue and discard poisoned commands (/v1/poison..., the console's
	// poison pages), cancel commands and pause and resume queues
	// (/v1/queues/{name}/pause, /resume).
	RoleOperator = httpserve.RoleOperator
)

// Tokens maps a bearer token to the roles it grants (map[string][]Role).
// A nil or empty Tokens disables authentication: every request has every
// role (bind to loopback only in that case). Tokens are at least
// MinTokenLength printable ASCII characters without spaces, ',' or ':'.
type Tokens = httpserve.Tokens

// MinTokenLength is the shortest accepted bearer token, in bytes (16).
const MinTokenLength = httpserve.MinTokenLength

// ErrInvalidTokens is wrapped by ParseTokens' and Config.Validate's errors
// about the token list.
var ErrInvalidTokens = httpserve.ErrInvalidTokens

// ParseTokens parses the CMDQ_TOKENS format: comma-separated entries
// "token:role[+role...]", for example
//
//	s3cr3t-issuer-token-1:issuer,ops-token-0123456789:operator+issuer
//
// Roles are issuer, reader and operator. Tokens are at least MinTokenLength
// printable ASCII characters without spaces, ',' or ':'. Whitespace around
// entries is ignored; an empty string gives nil (no authentication). Every
// problem is reported at once; errors wrap ErrInvalidTokens and never repeat a
// token (only its position).
func ParseTokens(s string) (Tokens, error) { return httpserve.ParseTokens(s) }

// DefaultAuthFailureBurst is Config.AuthFailureBurst's default (10).
const DefaultAuthFailureBurst = httpserve.DefaultAuthFailureBurst

// AuthLimiter counts failed authentications per client address and, after
// a burst of them, refuses the address with 429 for a time that doubles
// with each further failure (1 s up to 5 minutes); one failure is
// forgotten per minute. Give one to the API handler and to the console
// (Config.AuthLimiter, console.Config.AuthLimiter) so that failures at
// either count together. It is safe for concurrent use.
type AuthLimiter = httpserve.Limiter

// NewAuthLimiter returns an AuthLimiter that allows burst failed
// authentications in a row (0 = DefaultAuthFailureBurst; negative: never
// refuse) and logs failures to log at warn, at most once a minute per
// address (the zero Logger discards them).
func NewAuthLimiter(burst int, log zerolog.Logger) *AuthLimiter {
	return httpserve.NewLimiter(burst, log)
}
