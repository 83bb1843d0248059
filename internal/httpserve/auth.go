package httpserve

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/cmdq-dev/cmdq/client"
)

// Role is what a bearer token may do.
type Role string

// The roles. A route needs one of them (a cancel: RoleIssuer or
// RoleOperator); RoleOperator also grants everything RoleReader grants.
// RoleIssuer grants only POST /v1/commands and POST
// /v1/commands/{id}/cancel.
const (
	// RoleIssuer may issue and cancel commands (POST /v1/commands, POST
	// /v1/commands/{id}/cancel).
	RoleIssuer Role = "issuer"
	// RoleReader may read command status and events (GET /v1/commands/{id},
	// GET /v1/commands/{id}/events), list the queues (GET /v1/queues),
	// scrape GET /metrics and view the operator console.
	RoleReader Role = "reader"
	// RoleOperator may do everything RoleReader may, and list, inspect, requeue
	// and discard poisoned commands (/v1/poison..., and the console's poison
	// pages and buttons), cancel commands and pause and resume queues
	// (/v1/queues/{name}/pause, /resume).
	RoleOperator Role = "operator"
	// RoleIssuerOrOperator is not a token's role but what a route may
	// need: RoleIssuer or RoleOperator (POST /v1/commands/{id}/cancel).
	RoleIssuerOrOperator Role = "issuer or operator"
)

// ErrInvalidTokens is wrapped by ParseTokens' and Tokens.Validate's errors
// (api.Config.Validate's and console.Config.Validate's about the tokens).
var ErrInvalidTokens = errors.New("cmdq: invalid token list")

// MinTokenLength is the shortest accepted bearer token, in bytes (16).
const MinTokenLength = 16

// Tokens maps a bearer token to the roles it grants. A nil or empty Tokens
// disables authentication: every request has every role (bind to loopback
// only in that case).
type Tokens map[string][]Role

// validRole reports whether r is one of the roles.
func validRole(r Role) bool {
	return r == RoleIssuer || r == RoleReader || r == RoleOperator
}

// validToken reports whether tok may appear in an Authorization header and
// in the CMDQ_TOKENS format: printable ASCII without spaces, ',' or ':'.
func validToken(tok string) error {
	if len(tok) < MinTokenLength {
		return fmt.Errorf("is %d characters; use at least %d random characters (for example: openssl rand -hex 24)", len(tok), MinTokenLength)
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c <= ' ' || c >= 0x7f || c == ',' || c == ':' {
			return fmt.Errorf("contains %q; tokens are printable ASCII without spaces, ',' or ':'", c)
		}
	}
	return nil
}

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
func ParseTokens(s string) (Tokens, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	toks := Tokens{}
	var errs []error
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		n := i + 1
		if entry == "" {
			errs = append(errs, fmt.Errorf("%w: entry %d is empty; separate entries with single commas", ErrInvalidTokens, n))
			continue
		}
		tok, roles, ok := strings.Cut(entry, ":")
		if !ok {
			errs = append(errs, fmt.Errorf("%w: entry %d has no ':role'; write token:role (roles: issuer, reader, operator)", ErrInvalidTokens, n))
			continue
		}
		if err := validToken(tok); err != nil {
			errs = append(errs, fmt.Errorf("%w: entry %d: the token %s", ErrInvalidTokens, n, err))
			continue
		}
		if _, dup := toks[tok]; dup {
			errs = append(errs, fmt.Errorf("%w: entry %d repeats an earlier token; list each token once with all its roles joined by '+'", ErrInvalidTokens, n))
			continue
		}
		var rs []Role
		bad := false
		for _, r := range strings.Split(roles, "+") {
			role := Role(strings.TrimSpace(r))
			if !validRole(role) {
				errs = append(errs, fmt.Errorf("%w: entry %d has unknown role %q; roles are issuer, reader and operator, joined by '+'", ErrInvalidTokens, n, role))
				bad = true
				continue
			}
			if !slices.Contains(rs, role) {
				rs = append(rs, role)
			}
		}
		if !bad {
			toks[tok] = rs
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return toks, nil
}

// Validate checks every token and role; its errors wrap ErrInvalidTokens.
func (t Tokens) Validate() error {
	var errs []error
	i := 0
	for tok, roles := range t {
		i++
		if err := validToken(tok); err != nil {
			errs = append(errs, fmt.Errorf("%w: a token %s", ErrInvalidTokens, err))
		}
		if len(roles) == 0 {
			errs = append(errs, fmt.Errorf("%w: a token has no roles; give it issuer, reader or operator", ErrInvalidTokens))
		}
		for _, r := range roles {
			if !validRole(r) {
				errs = append(errs, fmt.Errorf("%w: unknown role %q; roles are issuer, reader and operator", ErrInvalidTokens, r))
			}
		}
	}
	return errors.Join(errs...)
}

// Authenticator checks bearer tokens in constant time.
type Authenticator struct {
	entries []TokenEntry // empty: authentication disabled
}

// TokenEntry is one configured token, as the Authenticator keeps it.
type TokenEntry struct {
	hash [sha256.Size]byte
	// Roles are the token's roles.
	Roles []Role
	// Who names the token safely for logs and audit events:
	// "token:<first 8 hex digits of its SHA-256>".
	Who string
}

// NewAuthenticator returns an Authenticator of the tokens t (nil or empty:
// authentication disabled).
func NewAuthenticator(t Tokens) *Authenticator {
	a := &Authenticator{}
	for tok, roles := range t {
		h := sha256.Sum256([]byte(tok))
		a.entries = append(a.entries, TokenEntry{hash: h, Roles: roles, Who: "token:" + hex.EncodeToString(h[:4])})
	}
	return a
}

// On reports whether tokens are configured (authentication is on).
func (a *Authenticator) On() bool { return len(a.entries) > 0 }

// HasRole reports whether roles grant need (RoleOperator grants RoleReader;
// RoleIssuerOrOperator is granted by either).
func HasRole(roles []Role, need Role) bool {
	for _, r := range roles {
		if r == need || (need == RoleReader && r == RoleOperator) ||
			(need == RoleIssuerOrOperator && (r == RoleIssuer || r == RoleOperator)) {
			return true
		}
	}
	return false
}

// Check authorises r for need by its Authorization header. It returns who
// made the request (for logs and audit events) or the problem to send back
// (401 or 403). Without tokens everyone is "anonymous" with every role. The
// token is looked up in constant time (see Lookup).
func (a *Authenticator) Check(r *http.Request, need Role) (string, *client.Problem) {
	if len(a.entries) == 0 {
		return "anonymous", nil
	}
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if h == "" {
		return "", NewProblem(client.ProblemUnauthorized, "send the header 'Authorization: Bearer <token>' with a configured token")
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", NewProblem(client.ProblemUnauthorized, "the Authorization header must be 'Bearer <token>'")
	}
	e, found := a.Lookup(strings.TrimSpace(tok))
	if !found {
		return "", NewProblem(client.ProblemUnauthorized, "the bearer token is not configured on this server; check the token")
	}
	if !HasRole(e.Roles, need) {
		return e.Who, NewProblem(client.ProblemForbidden, fmt.Sprintf("this route needs the %q role; the token has %s", need, RolesString(e.Roles)))
	}
	return e.Who, nil
}

// Lookup finds the configured token tok. Every entry is compared, in
// constant time over SHA-256 digests, so neither the match position nor the
// token length leaks through timing.
func (a *Authenticator) Lookup(tok string) (TokenEntry, bool) {
	got := sha256.Sum256([]byte(tok))
	match := -1
	for i := range a.entries {
		if subtle.ConstantTimeCompare(got[:], a.entries[i].hash[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return TokenEntry{}, false
	}
	return a.entries[match], true
}

// RolesString lists roles joined by '+' ("reader+issuer").
func RolesString(rs []Role) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, "+")
}
