package console

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The viewer's display preferences: the colour theme (light, dark, or the
// system's) and the auto-refresh (the page's own interval, another, or
// paused). They live in the cookie cmdq_prefs (Path BasePath+"/ui", a
// year, HttpOnly, SameSite=Strict), set by POST /ui/prefs — the form at
// the foot of every page, which works without JavaScript (live.js applies
// a change at once and posts it in the background). The server renders
// them: html[data-theme] for the stylesheet, html[data-refresh-pref] for
// live.js.

// prefsCookieName is the preferences cookie's name.
const prefsCookieName = "cmdq_prefs"

// prefsLifetime is how long the preferences cookie lasts.
const prefsLifetime = 365 * 24 * time.Hour

// themes are the theme choices ("" = the system's).
var themes = []string{"system", "light", "dark"}

// refreshChoices are the auto-refresh choices: the page's own, a fixed
// interval in seconds, or off.
var refreshChoices = []string{"auto", "5", "10", "30", "60", "off"}

// prefs are a viewer's display preferences.
type prefs struct {
	Theme   string // "system", "light" or "dark"
	Refresh string // one of refreshChoices
}

// String is the cookie value: "<theme>_<refresh>".
func (p prefs) String() string { return p.Theme + "_" + p.Refresh }

// parsePrefs reads a cookie value; anything unknown is the default.
func parsePrefs(v string) prefs {
	p := prefs{Theme: "system", Refresh: "auto"}
	t, r, _ := strings.Cut(v, "_")
	if oneOf(t, themes) {
		p.Theme = t
	}
	if oneOf(r, refreshChoices) {
		p.Refresh = r
	}
	return p
}

func oneOf(s string, set []string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

// prefsOf returns r's preferences.
func prefsOf(r *http.Request) prefs {
	c, err := r.Cookie(prefsCookieName)
	if err != nil {
		return parsePrefs("")
	}
	return parsePrefs(c.Value)
}

// refreshLabel names a refresh choice for the form.
func refreshLabel(c string) string {
	switch c {
	case "auto":
		return "the page's own"
	case "off":
		return "paused"
	}
	n, _ := strconv.Atoi(c)
	if n >= 60 {
		return "every " + strconv.Itoa(n/60) + " min"
	}
	return "every " + c + " s"
}

// savePrefs answers POST /ui/prefs: it stores the form's theme and
// refresh in the cookie and sends the browser back to the page it came
// from (form field back, a console page). Logging in is not needed; the
// form carries the CSRF token of the viewer's session (or of none) and is
// refused from another origin.
func (d *dashboard) savePrefs(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16*1024)
	v, ok, written := d.authenticate(w, r)
	if written {
		return
	}
	if !ok {
		v = viewer{}
	}
	if !d.checkPost(w, r, v) {
		return
	}
	p := prefsOf(r)
	if t := r.PostFormValue("theme"); t != "" {
		if !oneOf(t, themes) {
			d.errorPage(w, r, v, http.StatusBadRequest, "Unknown theme", "The theme must be system, light or dark.", "Use the form at the foot of the page.")
			return
		}
		p.Theme = t
	}
	if rf := r.PostFormValue("refresh"); rf != "" {
		if !oneOf(rf, refreshChoices) {
			d.errorPage(w, r, v, http.StatusBadRequest, "Unknown refresh", "Auto-refresh must be auto, 5, 10, 30, 60 or off.", "Use the form at the foot of the page.")
			return
		}
		p.Refresh = rf
	}
	http.SetCookie(w, &http.Cookie{Name: prefsCookieName, Value: p.String(), Path: d.base, MaxAge: int(prefsLifetime / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	if r.Header.Get("X-Cmdq-Refresh") != "" {
		w.WriteHeader(http.StatusNoContent) // live.js applied it already
		return
	}
	back := r.PostFormValue("back")
	if back == "" || !strings.HasPrefix(back, d.base+"/") {
		back = d.base + "/"
	}
	if strings.HasPrefix(back, d.base+"/login") {
		http.Redirect(w, r, back[:len(d.base+"/login")], http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, d.safeNext(back), http.StatusSeeOther)
}
