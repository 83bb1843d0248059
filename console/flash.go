package console

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"
	"time"
)

// One-time messages after a dashboard action ("3 commands requeued"). They
// live on the server, not in the URL: the action stores the message under a
// random ID and sets a short-lived cookie naming it; the next page view of
// the target page shows it and deletes it, so a reload or a bookmark never
// repeats it. Refreshes made by live.js (X-Cmdq-Refresh) never consume one.

// flashCookieName is the cookie naming a pending flash message (Path
// BasePath+"/ui", HttpOnly, SameSite=Strict, 5 minutes).
const flashCookieName = "cmdq_flash"

// flashLifetime is how long an unshown flash message is kept.
const flashLifetime = 5 * time.Minute

// maxFlashes bounds the flash messages kept at once (oldest dropped first).
const maxFlashes = 10000

// flash is one message for one viewer's next view of one page.
type flash struct {
	// Text is the message.
	Text string
	// Error marks a message about something that failed.
	Error bool
	// Requeued, when set, is the command a single requeue was made for: its
	// page adds the state the command is in when the page is made.
	Requeued string
	// At is when the action was carried out.
	At time.Time

	path    string // the page (URL path) that shows it
	owner   string // the session nonce ("" without sessions) it belongs to
	expires time.Time
}

// flashes holds the pending flash messages of one handler.
type flashes struct {
	mu    sync.Mutex
	m     map[string]flash
	order []string // IDs, oldest first
}

// put stores f for the next view of path by the viewer v and sets the cookie.
func (d *dashboard) putFlash(w http.ResponseWriter, r *http.Request, v viewer, path string, f flash) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	now := d.now()
	f.path, f.owner, f.expires = path, v.claims.Nonce, now.Add(flashLifetime)
	if f.At.IsZero() {
		f.At = now
	}
	fl := &d.flashes
	fl.mu.Lock()
	if fl.m == nil {
		fl.m = map[string]flash{}
	}
	// Drop expired and, over the bound, the oldest.
	for len(fl.order) > 0 {
		old, ok := fl.m[fl.order[0]]
		if ok && now.Before(old.expires) && len(fl.order) < maxFlashes {
			break
		}
		delete(fl.m, fl.order[0])
		fl.order = fl.order[1:]
	}
	fl.m[id] = f
	fl.order = append(fl.order, id)
	fl.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: flashCookieName, Value: id, Path: d.base, MaxAge: int(flashLifetime / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// takeFlash returns the flash message waiting for this view of r's page by
// v, deleting it and its cookie. Refreshes by live.js take nothing.
func (d *dashboard) takeFlash(w http.ResponseWriter, r *http.Request, v viewer) *flash {
	if r.Header.Get("X-Cmdq-Refresh") != "" {
		return nil
	}
	c, err := r.Cookie(flashCookieName)
	if err != nil {
		return nil
	}
	fl := &d.flashes
	fl.mu.Lock()
	f, ok := fl.m[c.Value]
	if ok && f.path == r.URL.Path && f.owner == v.claims.Nonce {
		delete(fl.m, c.Value)
	}
	fl.mu.Unlock()
	if !ok || d.now().After(f.expires) {
		http.SetCookie(w, &http.Cookie{Name: flashCookieName, Path: d.base, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		return nil
	}
	if f.path != r.URL.Path || f.owner != v.claims.Nonce {
		return nil // for another page (or session): leave it
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookieName, Path: d.base, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return &f
}
