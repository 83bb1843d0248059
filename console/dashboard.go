package console

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
	"github.com/cmdq-dev/cmdq/storage"
)

// The operator dashboard: server-rendered HTML pages under /ui/ (overview,
// poison table, command timeline, confirmation pages) with requeue and
// discard forms. Every page works without JavaScript; one small same-origin
// script (static/live.js) refreshes the changing part of a page and says how
// fresh it is. Nothing is loaded from elsewhere. See docs/dashboard.md.

// SessionCookieName is the name of the dashboard's session cookie (Path
// BasePath+"/ui", HttpOnly, SameSite=Strict, Secure on TLS).
const SessionCookieName = "cmdq_session"

// SessionLifetime is how long a dashboard login lasts (8 hours). Sessions are
// signed with a random key made when the handler is built, so restarting the
// server (or building a new handler) logs everyone out.
const SessionLifetime = 8 * time.Hour

// dashboardCSP is the Content-Security-Policy of every /ui response: scripts,
// styles and fetches from this origin only (no inline script or style),
// forms post to this origin only, no framing.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// lastErrorWidth is how many characters of a poison entry's last error the
// poison list shows (the command page shows it whole).
const lastErrorWidth = 120

// maxCountedPoison is the most poison entries the overview counts.
const maxCountedPoison = cmdq.MaxPoisonLimit

// dashboardClock tells the time for session expiry; tests replace it.
var dashboardClock = time.Now

//go:embed templates/*.html
var templateFS embed.FS

var dashboardFuncs = template.FuncMap{
	"fmtTime": fmtTime,
	// hourMinute is a time of day in UTC to the minute ("14:05 UTC").
	"hourMinute": func(t time.Time) string { return t.UTC().Format("15:04") + " UTC" },
	"truncate": func(s string, n int) string {
		if utf8.RuneCountInString(s) <= n {
			return s
		}
		r := []rune(s)
		return string(r[:n]) + "…"
	},
	"pathEscape": url.PathEscape,
	// errorCore is a poison entry's error without the attempt prefixes.
	"errorCore": errorCore,
	// dur writes a latency compactly ("850 ms", "1.2 s").
	"dur": durationLabel,
	// preview cuts a string to at most n bytes.
	"preview": preview,
	// attemptsOf is a poison entry's true attempt count (its recorded
	// attempts; its dequeue count for older entries and malformed
	// messages).
	"attemptsOf": func(e cmdq.PoisonEntry) int {
		if e.Attempts > 0 {
			return e.Attempts
		}
		return int(e.DequeueCount)
	},
	// isCommandID: poison entries of malformed messages are keyed by the
	// queue message ID and have no command page.
	"isCommandID": func(id string) bool { return cmdq.ValidateID(id) == nil },
	"badge":       badge,
	"eventTitle":  eventTitle,
	"eventBadge":  eventBadge,
	"fmtDur":      fmtDur,
	// parseTime reads an RFC 3339 time (zero when it is not one).
	"parseTime": func(s string) time.Time { t, _ := time.Parse(time.RFC3339Nano, s); return t },
	"asset":     assetURL,
	"plural":    pluralAny,
}

// dashboardPages returns the page templates, each the layout plus one page
// file, parsed at the first page a process serves (not at start: a worker
// or bench process that never serves the console does not hold them).
var dashboardPages = sync.OnceValue(func() map[string]*template.Template {
	layout := template.Must(template.New("layout.html").Funcs(dashboardFuncs).ParseFS(templateFS, "templates/layout.html", "templates/depth.html"))
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "poison", "command", "commands", "confirm", "login", "error", "cancel", "queues", "periodic", "entry", "runnow", "schedule", "trigger"} {
		t := template.Must(layout.Clone())
		pages[name] = template.Must(t.ParseFS(templateFS, "templates/"+name+".html"))
	}
	return pages
})

// dashboard holds the per-handler state of the /ui pages.
type dashboard struct {
	cfg   Config             // as given, Health defaulted
	set   httpserve.Settings // the request settings, defaults set
	guard *httpserve.Guard   // tokens, failed-authentication limiter, Host check
	log   zerolog.Logger
	key   []byte // HMAC key for sessions and CSRF tokens, random per handler
	cop   *http.CrossOriginProtection
	now   func() time.Time
	base  string // BasePath + "/ui"

	src dashSource // every storage call of the pages (dashsource.go)

	revokedMu sync.Mutex
	revoked   map[string]int64 // nonces of logged-out sessions → their expiry (Unix seconds)

	flashes flashes // one-time messages after actions (flash.go)

	tput throughputCache // the overview's recent outcomes (throughput.go)
}

// health is the service's health as the overview shows it.
type health struct {
	State   string
	Healthy bool
	Detail  any
}

// health asks Config.Health.
func (d *dashboard) health() health {
	state, ok, detail := d.cfg.Health()
	return health{State: state, Healthy: ok, Detail: detail}
}

// viewer is who is looking at a page, from a session cookie, a bearer token,
// or (without configured tokens) anyone.
type viewer struct {
	who     string
	roles   []Role
	session string // the cookie value the CSRF token derives from; "" for bearer requests
	claims  sessionClaims
	bearer  bool
}

func (v viewer) can(need Role) bool { return httpserve.HasRole(v.roles, need) }

// pageData is what every template gets.
type pageData struct {
	Title   string
	Base    string // BasePath + "/ui", for links
	Nav     string // the current section, for the navigation
	CSRF    string
	Who     string
	AuthOn  bool
	Operate bool // the viewer may see the poison table and act on it
	Cancel  bool // the viewer may cancel commands (issuer or operator)
	Flash   *flash
	// FlashState is the current state of the command a flash says was
	// requeued, when this page read it ("" otherwise).
	FlashState cmdq.State
	Now        time.Time // when the page was made
	Body       any
	// Prefs are the viewer's display preferences (prefs.go); Back is the
	// page to return to after changing them.
	Prefs prefs
	Back  string
}

// Themes and RefreshChoices are the preferences form's choices.
func (pageData) Themes() []string { return themes }

// RefreshChoices are the auto-refresh choices with their labels.
func (pageData) RefreshChoices() [][2]string {
	out := make([][2]string, 0, len(refreshChoices))
	for _, c := range refreshChoices {
		out = append(out, [2]string{c, refreshLabel(c)})
	}
	return out
}

// mount registers the /ui routes on mux.
func (d *dashboard) mount(mux *http.ServeMux) {
	h := func(f http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			hdr := w.Header()
			hdr.Set("Content-Security-Policy", dashboardCSP)
			hdr.Set("X-Content-Type-Options", "nosniff")
			hdr.Set("Referrer-Policy", "same-origin")
			hdr.Set("X-Frame-Options", "DENY")
			hdr.Set("Cache-Control", "no-store")
			f(w, r)
		}
	}
	mux.HandleFunc("GET /ui", h(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, d.base+"/", http.StatusMovedPermanently)
	}))
	mux.HandleFunc("GET /ui/{$}", h(d.overview))
	mux.HandleFunc("GET /ui/poison", h(d.poison))
	mux.HandleFunc("GET /ui/commands", h(d.commands))
	mux.HandleFunc("GET /ui/commands/{id}", h(d.command))
	mux.HandleFunc("GET /ui/commands/{id}/live", h(d.live))
	mux.HandleFunc("GET /ui/search", h(d.search))
	mux.HandleFunc("GET /ui/static/{name}", h(d.static))
	mux.HandleFunc("GET /ui/poison/{id}", h(d.poisonEntry))
	mux.HandleFunc("POST /ui/poison/{id}/requeue", h(d.action(d.src.Requeue, "requeued")))
	mux.HandleFunc("GET /ui/poison/{id}/discard", h(d.confirmDiscard))
	mux.HandleFunc("POST /ui/poison/{id}/discard", h(d.action(d.src.Discard, "discarded")))
	mux.HandleFunc("POST /ui/poison/bulk", h(d.bulkReview))
	mux.HandleFunc("POST /ui/poison/bulk/run", h(d.bulkRun))
	mux.HandleFunc("GET /ui/commands/{id}/cancel", h(d.confirmCancel)) // control.go
	mux.HandleFunc("POST /ui/commands/{id}/cancel", h(d.cancelCommand))
	mux.HandleFunc("GET /ui/commands/{id}/run-now", h(d.confirmRunNow)) // runnow.go
	mux.HandleFunc("POST /ui/commands/{id}/run-now", h(d.runNowCommand))
	mux.HandleFunc("POST /ui/commands/bulk", h(d.cancelReview))
	mux.HandleFunc("POST /ui/commands/bulk/run", h(d.cancelRun))
	mux.HandleFunc("GET /ui/queues", h(d.queues))
	mux.HandleFunc("GET /ui/periodic", h(d.periodic))
	mux.HandleFunc("GET /ui/periodic/{name}", h(d.schedule)) // trigger.go
	mux.HandleFunc("GET /ui/periodic/{name}/trigger", h(d.confirmTrigger))
	mux.HandleFunc("POST /ui/periodic/{name}/trigger", h(d.triggerSchedule))
	mux.HandleFunc("POST /ui/queues/{name}/pause", h(d.queueAction(true)))
	mux.HandleFunc("POST /ui/queues/{name}/resume", h(d.queueAction(false)))
	mux.HandleFunc("GET /ui/login", h(d.loginForm))
	mux.HandleFunc("POST /ui/login", h(d.login))
	mux.HandleFunc("POST /ui/logout", h(d.logout))
	mux.HandleFunc("POST /ui/prefs", h(d.savePrefs)) // prefs.go
	notFound := h(func(w http.ResponseWriter, r *http.Request) {
		// A logged-in viewer keeps the navigation (a wrong bearer token
		// gets its 401 instead).
		v, _, written := d.authenticate(w, r)
		if written {
			return
		}
		d.errorPage(w, r, v, http.StatusNotFound, "Page not found",
			fmt.Sprintf("There is no dashboard page %s (or it does not accept %s).", httpserve.QuoteClip(r.URL.Path), httpserve.QuoteClip(r.Method)), "Start from the overview.")
	})
	mux.HandleFunc("/ui/", notFound)
	mux.HandleFunc("/", notFound) // mounted wider than /ui/

}

// ---- sessions and CSRF ----

// sessionClaims is the signed content of the session cookie. It never holds
// the token, only the token's safe-to-log name and its roles.
type sessionClaims struct {
	Who     string `json:"w"`
	Roles   []Role `json:"r"`
	Expires int64  `json:"e"` // Unix seconds
	Nonce   string `json:"n"`
}

func (d *dashboard) sign(b []byte) []byte {
	m := hmac.New(sha256.New, d.key)
	m.Write([]byte("cmdq-session\x00"))
	m.Write(b)
	return m.Sum(nil)
}

// newSession returns a signed cookie value: base64url(claims) "." base64url(mac).
func (d *dashboard) newSession(who string, roles []Role) string {
	var n [12]byte
	_, _ = rand.Read(n[:])
	b, _ := json.Marshal(sessionClaims{Who: who, Roles: roles, Expires: d.now().Add(SessionLifetime).Unix(), Nonce: hex.EncodeToString(n[:])})
	enc := base64.RawURLEncoding
	return enc.EncodeToString(b) + "." + enc.EncodeToString(d.sign(b))
}

// parseSession verifies a cookie value; it fails on a bad signature, a
// malformed value or an expired session.
func (d *dashboard) parseSession(v string) (sessionClaims, error) {
	var c sessionClaims
	enc := base64.RawURLEncoding
	p, sig, ok := strings.Cut(v, ".")
	if !ok {
		return c, errors.New("malformed session")
	}
	b, err1 := enc.DecodeString(p)
	mac, err2 := enc.DecodeString(sig)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, d.sign(b)) {
		return c, errors.New("bad session signature")
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, errors.New("malformed session")
	}
	if d.now().Unix() >= c.Expires {
		return c, errors.New("session expired")
	}
	d.revokedMu.Lock()
	_, revoked := d.revoked[c.Nonce]
	d.revokedMu.Unlock()
	if revoked {
		return c, errors.New("session logged out")
	}
	return c, nil
}

// revoke ends a session on the server: its cookie, copied or not, is refused
// from now until it would have expired anyway (when its nonce is forgotten).
// The set holds only sessions logged out within SessionLifetime.
func (d *dashboard) revoke(c sessionClaims) {
	now := d.now().Unix()
	d.revokedMu.Lock()
	defer d.revokedMu.Unlock()
	for n, exp := range d.revoked {
		if exp <= now {
			delete(d.revoked, n)
		}
	}
	d.revoked[c.Nonce] = c.Expires
}

// csrfToken derives the CSRF token of a session (or, without configured
// tokens, of this handler).
func (d *dashboard) csrfToken(session string) string {
	m := hmac.New(sha256.New, d.key)
	m.Write([]byte("cmdq-csrf\x00"))
	m.Write([]byte(session))
	return hex.EncodeToString(m.Sum(nil))
}

// authOn reports whether tokens are configured.
func (d *dashboard) authOn() bool { return d.guard.Auth.On() }

// authenticate finds the viewer. Without configured tokens everyone is an
// anonymous operator. With tokens, an Authorization header is checked as
// the API checks it, else the session cookie. ok=false: not authenticated
// (the response is already written for a bad bearer token; the caller
// redirects to the login page otherwise, writtenResponse tells which).
func (d *dashboard) authenticate(w http.ResponseWriter, r *http.Request) (v viewer, ok, written bool) {
	if !d.authOn() {
		return viewer{who: "anonymous", roles: []Role{RoleIssuer, RoleReader, RoleOperator}}, true, false
	}
	if h := r.Header.Get("Authorization"); h != "" {
		key := httpserve.ClientKey(r)
		if wait, blocked := d.guard.Limiter.Blocked(key); blocked {
			d.tooMany(w, r, wait)
			return viewer{}, false, true
		}
		scheme, tok, _ := strings.Cut(h, " ")
		tok = strings.TrimSpace(tok)
		if !strings.EqualFold(scheme, "Bearer") || tok == "" {
			d.guard.Limiter.Failed(key, "malformed Authorization header", r)
			d.errorPage(w, r, viewer{}, http.StatusUnauthorized, "Unauthorized", "The Authorization header must be 'Bearer <token>'.", "Send a configured token, or log in with a browser.")
			return viewer{}, false, true
		}
		e, found := d.guard.Auth.Lookup(tok)
		if !found {
			d.guard.Limiter.Failed(key, "unknown bearer token", r)
			d.errorPage(w, r, viewer{}, http.StatusUnauthorized, "Unauthorized", "The bearer token is not configured on this server.", "Check the token.")
			return viewer{}, false, true
		}
		d.guard.Limiter.Succeeded(key)
		return viewer{who: e.Who, roles: e.Roles, bearer: true}, true, false
	}
	c, err := r.Cookie(SessionCookieName)
	if err != nil {
		return viewer{}, false, false
	}
	claims, err := d.parseSession(c.Value)
	if err != nil {
		d.clearCookie(w, r)
		return viewer{}, false, false
	}
	return viewer{who: claims.Who, roles: claims.Roles, session: c.Value, claims: claims}, true, false
}

// require authenticates r and checks need. On failure it writes the
// response (a redirect to the login page, or a 401/403 page) and returns
// ok=false.
func (d *dashboard) require(w http.ResponseWriter, r *http.Request, need Role) (viewer, bool) {
	v, ok, written := d.authenticate(w, r)
	if written {
		return v, false
	}
	if !ok {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			d.errorPage(w, r, viewer{}, http.StatusUnauthorized, "Not logged in", "Your session is missing or expired, so the action was not carried out.", "Log in and try again.")
			return v, false
		}
		next := d.cfg.BasePath + r.URL.Path
		if r.URL.RawQuery != "" {
			next += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, d.base+"/login?next="+url.QueryEscape(next), http.StatusSeeOther)
		return v, false
	}
	if !v.can(need) {
		d.errorPage(w, r, v, http.StatusForbidden, "Forbidden",
			fmt.Sprintf("This needs the %q role; you are logged in with %s.", need, httpserve.RolesString(v.roles)),
			"Log in with a token that has the role.")
		return v, false
	}
	return v, true
}

// checkPost rejects cross-origin browser POSTs and, for cookie sessions and
// unauthenticated servers, POSTs without the right CSRF token. It writes a
// 403 page and returns false on failure.
func (d *dashboard) checkPost(w http.ResponseWriter, r *http.Request, v viewer) bool {
	if err := d.cop.Check(r); err != nil {
		d.errorPage(w, r, v, http.StatusForbidden, "Cross-origin request refused",
			"This form was posted from another site, so it was not carried out.", "Use the dashboard's own buttons.")
		return false
	}
	if v.bearer {
		return true // browsers never add bearer tokens on their own
	}
	want := d.csrfToken(v.session)
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(want)) != 1 {
		d.errorPage(w, r, v, http.StatusForbidden, "Form expired",
			"The form's security token is missing or does not match your session (you may have logged in again since it was shown), so the action was not carried out.",
			"Reload the page and try again.")
		return false
	}
	return true
}

func (d *dashboard) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookieName, Value: value, Path: d.base, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

func (d *dashboard) clearCookie(w http.ResponseWriter, r *http.Request) { d.setCookie(w, r, "", -1) }

// safeNext returns next if it is a dashboard page on this server, else the
// overview (no open redirects).
func (d *dashboard) safeNext(next string) string {
	home := d.base + "/"
	u, err := url.Parse(next)
	if err != nil || len(next) > 2048 || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" ||
		strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return home
	}
	// The path as the browser will resolve it: decoded (%2e%2e is ..,
	// %2F is /), dot segments removed. Only console pages qualify.
	clean := path.Clean(u.Path)
	if strings.HasSuffix(u.Path, "/") && clean != "/" {
		clean += "/"
	}
	if !strings.HasPrefix(clean, home) || clean == d.base+"/login" || strings.HasPrefix(clean, d.base+"/login/") {
		return home
	}
	return (&url.URL{Path: clean, RawQuery: u.RawQuery}).String()
}

// ---- rendering ----

func (d *dashboard) data(v viewer, title, nav string, body any) pageData {
	return pageData{
		Title: title, Base: d.base, Nav: nav, CSRF: d.csrfToken(v.session), Who: v.who,
		AuthOn: d.authOn(), Operate: v.can(RoleOperator), Cancel: v.can(httpserve.RoleIssuerOrOperator), Now: d.now().UTC(), Body: body,
	}
}

// render executes a page into a buffer first, so a template failure is a
// clean 500 rather than half a page.
func (d *dashboard) render(w http.ResponseWriter, r *http.Request, code int, page string, pd pageData) {
	pd.Prefs = prefsOf(r)
	// The preferences form returns to this page; not to an error page, and
	// never echoing a long URL (the form then returns to the overview).
	if uri := d.cfg.BasePath + r.URL.RequestURI(); r.Method == http.MethodGet && code < 400 && len(uri) <= 2048 {
		pd.Back = uri
	}
	var buf bytes.Buffer
	if err := dashboardPages()[page].ExecuteTemplate(&buf, "layout.html", pd); err != nil {
		ref := httpserve.NewRef()
		d.log.Error().Err(err).Str("ref", ref).Str("page", page).Msg("cmdq console: template failed")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("the page failed to render; reference " + ref + " is in the server's log\n"))
		return
	}
	out := showBidi(buf.Bytes())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		_, _ = w.Write(out)
	}
}

// showBidi returns page (HTML that html/template wrote) with every
// Unicode bidirectional control in its text — U+061C, U+200E, U+200F,
// U+202A-U+202E, U+2066-U+2069, which reorder the text around them and so
// can make user data (params, output, errors, keys) read as something
// else — written out as its escape, "\u202e", so that it shows instead of
// acting. The templates' own text has none; text in tags (attribute
// values) is left as it is. page itself when it has none.
func showBidi(page []byte) []byte {
	var out []byte
	inTag := false
	last := 0
	for i := 0; i < len(page); {
		c := page[i]
		switch {
		case c == '<':
			inTag = true
		case c == '>':
			inTag = false
		case !inTag && (c == 0xe2 || c == 0xd8):
			r, n := utf8.DecodeRune(page[i:])
			if bidiControl(r) {
				if out == nil {
					out = make([]byte, 0, len(page)+64)
				}
				out = append(out, page[last:i]...)
				out = fmt.Appendf(out, `\u%04x`, r)
				i += n
				last = i
				continue
			}
		}
		i++
	}
	if out == nil {
		return page
	}
	return append(out, page[last:]...)
}

// bidiControl reports whether r is a Unicode bidirectional formatting
// character (showBidi).
func bidiControl(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

// tooMany renders the 429 page of a client refused after repeated failed
// authentication.
func (d *dashboard) tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	secs := int((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	d.errorPage(w, r, viewer{}, http.StatusTooManyRequests, "Too many failed logins",
		"Your address made too many failed authentications, so this request was not checked.", fmt.Sprintf("Wait %d seconds, then use a configured token.", secs))
}

// errorBody is the body of the error page.
type errorBody struct {
	Status  int
	Message string
	Todo    string
	// DiscardID, when set, offers a Discard button for this poison entry.
	DiscardID string
}

func (d *dashboard) errorPage(w http.ResponseWriter, r *http.Request, v viewer, code int, title, msg, todo string) {
	d.render(w, r, code, "error", d.data(v, title, "", errorBody{Status: code, Message: msg, Todo: todo}))
}

// fail renders an error from the status package as a page saying what to do.
func (d *dashboard) fail(w http.ResponseWriter, r *http.Request, v viewer, err error) {
	switch {
	case errors.Is(err, cmdq.ErrNotFound), errors.Is(err, storage.ErrNotFound):
		d.errorPage(w, r, v, http.StatusNotFound, "Not found", "There is no command with this ID.",
			"Check the ID. A poison entry without a stored command (a malformed message) has no page: discard it from the poison list.")
	case httpserve.StorageUnavailable(err):
		ref := httpserve.NewRef()
		d.log.Warn().Err(err).Str("ref", ref).Str("path", r.URL.Path).Msg("cmdq console: storage unavailable")
		w.Header().Set("Retry-After", strconv.Itoa(httpserve.RetryAfterSeconds))
		d.errorPage(w, r, v, http.StatusServiceUnavailable, "Storage unavailable",
			"Storage did not answer in time or could not be reached. Reference "+ref+" is in the server's log.",
			fmt.Sprintf("Retry in %d seconds. An action may or may not have been carried out: reload the poison list to see.", httpserve.RetryAfterSeconds))
	case errors.Is(err, cmdq.ErrInvalidContinuation):
		d.errorPage(w, r, v, http.StatusBadRequest, "Invalid page link", "The continuation in the link is not valid.", "Start again from the first page of the poison list.")
	default:
		ref := httpserve.NewRef()
		d.log.Error().Err(err).Str("ref", ref).Str("path", r.URL.Path).Msg("cmdq console: request failed")
		d.errorPage(w, r, v, http.StatusInternalServerError, "Server error",
			"The server could not complete the request (storage may be unavailable). Reference "+ref+" is in the server's log.", "Retry in a moment.")
	}
}

type loginBody struct {
	Next  string
	Error string
}

func (d *dashboard) loginForm(w http.ResponseWriter, r *http.Request) {
	next := d.safeNext(r.URL.Query().Get("next"))
	if !d.authOn() {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	d.render(w, r, http.StatusOK, "login", d.data(viewer{}, "Log in", "", loginBody{Next: next}))
}

func (d *dashboard) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64*1024)
	if err := d.cop.Check(r); err != nil {
		d.errorPage(w, r, viewer{}, http.StatusForbidden, "Cross-origin request refused", "The login form was posted from another site.", "Log in from this server's own login page.")
		return
	}
	next := d.safeNext(r.PostFormValue("next"))
	if !d.authOn() {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	key := httpserve.ClientKey(r)
	if wait, blocked := d.guard.Limiter.Blocked(key); blocked {
		d.tooMany(w, r, wait)
		return
	}
	e, ok := d.guard.Auth.Lookup(strings.TrimSpace(r.PostFormValue("token")))
	if !ok {
		d.guard.Limiter.Failed(key, "dashboard login with an unknown token", r)
		d.render(w, r, http.StatusUnauthorized, "login", d.data(viewer{}, "Log in", "",
			loginBody{Next: next, Error: "That token is not configured on this server. Check it and try again."}))
		return
	}
	d.guard.Limiter.Succeeded(key)
	if !httpserve.HasRole(e.Roles, RoleReader) {
		d.render(w, r, http.StatusForbidden, "login", d.data(viewer{}, "Log in", "",
			loginBody{Next: next, Error: fmt.Sprintf("That token has only %s; the dashboard needs a reader or operator token.", httpserve.RolesString(e.Roles))}))
		return
	}
	d.setCookie(w, r, d.newSession(e.Who, e.Roles), int(SessionLifetime/time.Second))
	d.log.Info().Str("by", e.Who).Msg("cmdq console: login")
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (d *dashboard) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64*1024)
	if v, ok, written := d.authenticate(w, r); written {
		return
	} else if ok && !d.checkPost(w, r, v) {
		return
	} else if ok && v.session != "" {
		d.revoke(v.claims)
		d.log.Info().Str("by", v.who).Msg("cmdq console: logout")
	}
	d.clearCookie(w, r)
	http.Redirect(w, r, d.base+"/login", http.StatusSeeOther)
}
