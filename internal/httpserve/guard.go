package api

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The browser-facing checks every request passes before its route: the Host
// check (without tokens), CORS for allow-listed origins and refusal of
// cross-site state changes on /v1.

// normalizeHost returns the host name of a Host header or an AllowedHosts
// entry: without port, brackets or a trailing dot, in lower case.
func normalizeHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// validateAllowedHost checks one AllowedHosts entry.
func validateAllowedHost(h string) error {
	if h == "*" {
		return nil
	}
	n := normalizeHost(h)
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

// hostAllowed reports whether a request to Host h may be answered when no
// tokens are configured: loopback names and addresses, and AllowedHosts.
// A page on a name the attacker controls (DNS rebinding) sends that name.
func (s *server) hostAllowed(h string) bool {
	n := normalizeHost(h)
	return loopbackHost(n) || s.allowedHosts["*"] || s.allowedHosts[n]
}

// checkHost answers 421 for a request whose Host is not allowed, when no
// tokens are configured (with tokens, a rebound page has no token to send).
// It returns false when it has written the response.
func (s *server) checkHost(w http.ResponseWriter, r *http.Request) bool {
	if len(s.auth.entries) > 0 || s.hostAllowed(r.Host) {
		return true
	}
	writeProblem(w, r, newProblem(ProblemMisdirected, fmt.Sprintf("this server has no tokens configured, so it answers only loopback host names (localhost, 127.0.0.1, [::1]), not %s; use one of those, add the name to the allowed hosts (cmdq serve --allowed-hosts, api.Config.AllowedHosts), or configure tokens", quoteClip(r.Host))))
	return false
}

// CORSMaxAge is how long a browser may cache a CORS preflight answer
// (Access-Control-Max-Age, 10 minutes).
const CORSMaxAge = 10 * time.Minute

// corsAllowMethods and corsAllowHeaders are what preflights allow: every
// method and request header the API uses. Credentials (cookies) are never
// allowed: browser front ends send bearer tokens.
const (
	corsAllowMethods  = "GET, POST, DELETE"
	corsAllowHeaders  = "Authorization, Content-Type, If-None-Match, Prefer, Last-Event-ID"
	corsExposeHeaders = "Location, Retry-After, WWW-Authenticate, ETag, Preference-Applied"
)

// normalizeOrigin checks an allow-list entry and returns it in the form
// browsers send in the Origin header: lowercase scheme://host[:port].
func normalizeOrigin(o string) (string, error) {
	if o == "*" || strings.Contains(o, "*") {
		return "", fmt.Errorf("origin %q: wildcards are not accepted; list each origin, such as https://app.example.com", o)
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("origin %q is not scheme://host[:port], such as https://app.example.com", o)
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// corsPath reports whether browsers on allow-listed origins may call path.
func corsPath(path string) bool {
	return strings.HasPrefix(path, "/v1/") || path == "/healthz" || path == "/readyz"
}

// browserChecks answers CORS preflights and refuses cross-site requests that
// change state on /v1. It returns false when it has written the response.
func (s *server) browserChecks(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.Path
	if !corsPath(path) {
		return true
	}
	h := w.Header()
	h.Add("Vary", "Origin")
	origin := r.Header.Get("Origin")
	allowed := origin != "" && s.corsOrigins[strings.ToLower(origin)]
	if r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Add("Vary", "Access-Control-Request-Method")
		h.Add("Vary", "Access-Control-Request-Headers")
		if !allowed {
			writeProblem(w, r, newProblem(ProblemCrossSite, fmt.Sprintf("origin %s may not call this API from a browser; list it in the server's CORS origins (cmdq serve --cors-origins, api.Config.CORSOrigins)", quoteClip(origin))))
			return false
		}
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Methods", corsAllowMethods)
		h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
		h.Set("Access-Control-Max-Age", strconv.Itoa(int(CORSMaxAge/time.Second)))
		w.WriteHeader(http.StatusNoContent)
		return false
	}
	if allowed {
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
	}
	if !strings.HasPrefix(path, "/v1/") {
		return true
	}
	if err := s.cop.Check(r); err != nil {
		why := "Sec-Fetch-Site " + quoteClip(r.Header.Get("Sec-Fetch-Site"))
		if origin != "" {
			why = "Origin " + quoteClip(origin) + " on host " + quoteClip(r.Host)
		}
		writeProblem(w, r, newProblem(ProblemCrossSite, fmt.Sprintf("a cross-site request may not change anything (%s); browser pages on other origins may call the API only when listed in the server's CORS origins (cmdq serve --cors-origins, api.Config.CORSOrigins)", why)))
		return false
	}
	return true
}

// hasBody reports whether r carries a request body.
func hasBody(r *http.Request) bool {
	return r.ContentLength > 0 || (r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody)
}

// quoteClip quotes s for an error message, keeping at most maxQuoted bytes
// of it (cut at a character boundary) and saying how long the rest was.
func quoteClip(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	cut := maxQuoted
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes in all)", len(s))
}

// maxQuoted is the most bytes of a rejected input an error message quotes.
const maxQuoted = 64

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// checkQuery refuses, on /v1 routes, a query string that readers could
// take two ways: a parameter given more than once (limit=5&limit=2000:
// which one counts?) or one that does not parse (limit=5;x=1 — ';' is not a
// separator, and Go would silently drop the pair). It returns false when it
// has written the response.
func checkQuery(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.RawQuery == "" || !strings.HasPrefix(r.URL.Path, "/v1/") {
		return true
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		detail := "the query string is malformed; separate parameters with '&' and percent-encode the values"
		if strings.Contains(r.URL.RawQuery, ";") {
			detail = "the query string contains ';', which is not a separator; separate parameters with '&' (and encode a literal ';' as %3B)"
		}
		writeProblem(w, r, newProblem(ProblemInvalidRequest, detail, FieldError{Pointer: "query", Detail: clipText(err.Error())}))
		return false
	}
	var errs []FieldError
	for name, vs := range q {
		if len(vs) > 1 {
			errs = append(errs, FieldError{Pointer: "query:" + clipText(name), Detail: fmt.Sprintf("given %d times; give it once", len(vs))})
		}
	}
	if len(errs) > 0 {
		writeProblem(w, r, newProblem(ProblemInvalidRequest, "a query parameter is repeated; give each parameter once", errs...))
		return false
	}
	return true
}

// clipText cuts an error text that may quote client input to a short prefix.
func clipText(s string) string {
	if len(s) <= 2*maxQuoted {
		return s
	}
	cut := 2 * maxQuoted
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
