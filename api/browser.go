package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// The checks of the API's own that every request passes before its route,
// after the Host check (internal/httpserve): CORS for allow-listed origins,
// refusal of cross-site state changes on /v1, and unambiguous query
// strings.

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

// check runs the API's checks before the route: CORS and cross-site
// refusal (browserChecks), then the query string (checkQuery).
func (s *server) check(w http.ResponseWriter, r *http.Request) bool {
	return s.browserChecks(w, r) && checkQuery(w, r)
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
			writeProblem(w, r, newProblem(client.ProblemCrossSite, fmt.Sprintf("origin %s may not call this API from a browser; list it in the server's CORS origins (cmdq serve --cors-origins, api.Config.CORSOrigins)", quoteClip(origin))))
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
		writeProblem(w, r, newProblem(client.ProblemCrossSite, fmt.Sprintf("a cross-site request may not change anything (%s); browser pages on other origins may call the API only when listed in the server's CORS origins (cmdq serve --cors-origins, api.Config.CORSOrigins)", why)))
		return false
	}
	return true
}

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
		writeProblem(w, r, newProblem(client.ProblemInvalidRequest, detail, client.FieldError{Pointer: "query", Detail: clipText(err.Error())}))
		return false
	}
	var errs []client.FieldError
	for name, vs := range q {
		if len(vs) > 1 {
			errs = append(errs, client.FieldError{Pointer: "query:" + clipText(name), Detail: fmt.Sprintf("given %d times; give it once", len(vs))})
		}
	}
	if len(errs) > 0 {
		writeProblem(w, r, newProblem(client.ProblemInvalidRequest, "a query parameter is repeated; give each parameter once", errs...))
		return false
	}
	return true
}

// Short names of the shared plumbing (internal/httpserve) used throughout
// the package.
var (
	writeProblem = httpserve.WriteProblem
	newProblem   = httpserve.NewProblem
	writeJSON    = httpserve.WriteJSON
	quoteClip    = httpserve.QuoteClip
	clipText     = httpserve.ClipText
)
