package httpserve

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/client"
)

// Guard holds what the API and the console check a request's caller with:
// the bearer tokens, the failed-authentication limiter and, without
// tokens, the Host names the server answers (DNS rebinding). Build it with
// NewGuard.
type Guard struct {
	// Auth checks bearer tokens.
	Auth *Authenticator
	// Limiter counts failed authentications (shared by handlers that are
	// given the same one).
	Limiter *Limiter
	// allowedHosts is AllowedHosts normalized ("*": any).
	allowedHosts map[string]bool
	// hostHint says, in a 421's detail, where to list allowed hosts.
	hostHint string
}

// NewGuard returns the Guard of tokens, allowedHosts (validated before,
// with ValidateAllowedHost) and limiter; hostHint names the setting a 421
// tells the caller to change, such as "cmdq serve --allowed-hosts,
// api.Config.AllowedHosts".
func NewGuard(tokens Tokens, allowedHosts []string, limiter *Limiter, hostHint string) *Guard {
	g := &Guard{Auth: NewAuthenticator(tokens), Limiter: limiter, allowedHosts: map[string]bool{}, hostHint: hostHint}
	for _, h := range allowedHosts {
		if h == "*" {
			g.allowedHosts["*"] = true
		} else {
			g.allowedHosts[NormalizeHost(h)] = true
		}
	}
	return g
}

// HostAllowed reports whether a request to Host h may be answered when no
// tokens are configured: loopback names and addresses, and the allowed
// hosts. A page on a name the attacker controls (DNS rebinding) sends that
// name.
func (g *Guard) HostAllowed(h string) bool {
	n := NormalizeHost(h)
	return loopbackHost(n) || g.allowedHosts["*"] || g.allowedHosts[n]
}

// CheckHost answers 421 for a request whose Host is not allowed, when no
// tokens are configured (with tokens, a rebound page has no token to send).
// It returns false when it has written the response.
func (g *Guard) CheckHost(w http.ResponseWriter, r *http.Request) bool {
	if g.Auth.On() || g.HostAllowed(r.Host) {
		return true
	}
	WriteProblem(w, r, NewProblem(client.ProblemMisdirected, fmt.Sprintf("this server has no tokens configured, so it answers only loopback host names (localhost, 127.0.0.1, [::1]), not %s; use one of those, add the name to the allowed hosts (%s), or configure tokens", QuoteClip(r.Host), g.hostHint)))
	return false
}

// Authorize checks r's bearer token for need, as the JSON API answers: on
// failure it writes the problem (with WWW-Authenticate on 401) and returns
// ok=false. A client address refused after repeated failed
// authentications gets 429 without its token being looked at; a wrong
// token counts as a failure (a missing one does not: that is not a guess).
// Without tokens everyone is "anonymous" with every role.
func (g *Guard) Authorize(w http.ResponseWriter, r *http.Request, need Role) (who string, ok bool) {
	if !g.Auth.On() {
		return "anonymous", true
	}
	key := ClientKey(r)
	if wait, blocked := g.Limiter.Blocked(key); blocked {
		WriteTooMany(w, r, wait)
		return "", false
	}
	who, p := g.Auth.Check(r, need)
	if p != nil {
		if p.Status == http.StatusUnauthorized {
			if r.Header.Get("Authorization") != "" {
				g.Limiter.Failed(key, p.Detail, r)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="cmdq"`)
		}
		WriteProblem(w, r, p)
		return "", false
	}
	g.Limiter.Succeeded(key)
	return who, true
}

// WriteTooMany answers 429 to a client refused for wait after repeated
// failed authentication.
func WriteTooMany(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	secs := RetryAfter(wait)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	WriteProblem(w, r, NewProblem(client.ProblemTooManyRequests, fmt.Sprintf("too many failed authentications from your address; retry in %d s with a configured token", secs)))
}

// RetryAfter is wait in whole seconds, rounded up (a Retry-After value).
func RetryAfter(wait time.Duration) int {
	return int((wait + time.Second - 1) / time.Second)
}

// NormalizeHost returns the host name of a Host header or an AllowedHosts
// entry: without port, brackets or a trailing dot, in lower case.
func NormalizeHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// ValidateAllowedHost checks one AllowedHosts entry.
func ValidateAllowedHost(h string) error {
	if h == "*" {
		return nil
	}
	n := NormalizeHost(h)
	if n == "" || strings.ContainsAny(n, "/*@ ?#") || strings.Contains(h, "://") {
		return fmt.Errorf("allowed host %q is not a host name or IP address such as cmdq.internal or 10.0.0.5 (use \"*\" to allow any)", h)
	}
	return nil
}

// loopbackHost reports whether a (normalized) host name always means this
// machine: localhost and *.localhost (RFC 6761; browsers resolve them
// locally) and loopback IP addresses.
func loopbackHost(h string) bool {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// HasBody reports whether r carries a request body.
func HasBody(r *http.Request) bool {
	return r.ContentLength > 0 || (r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody)
}

// MaxQuoted is the most bytes of a rejected input an error message quotes.
const MaxQuoted = 64

// QuoteClip quotes s for an error message, keeping at most MaxQuoted bytes
// of it (cut at a character boundary) and saying how long the rest was.
func QuoteClip(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	cut := MaxQuoted
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes in all)", len(s))
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// ClipText cuts an error text that may quote client input to a short
// prefix (2 × MaxQuoted bytes, at a character boundary).
func ClipText(s string) string {
	if len(s) <= 2*MaxQuoted {
		return s
	}
	cut := 2 * MaxQuoted
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
