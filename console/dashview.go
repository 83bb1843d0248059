package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/cmdq-dev/cmdq"
)

// What the dashboard's templates use to show things: times, state badges,
// event titles, the health panel, and the static files (stylesheet, script).

// timeLayout is how the dashboard (and the CLI) print an absolute time:
// UTC with milliseconds and a Z.
const timeLayout = "2006-01-02 15:04:05.000Z"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format(timeLayout)
}

// relTime says how long before (or after) now t is: "just now", "4 s ago",
// "12 min ago", "3 h 5 min ago", "2 d ago", "in 3 s".
func relTime(now, t time.Time) string {
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		s = fmt.Sprintf("%d s", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		s = fmt.Sprintf("%d h", h)
		if m > 0 && h < 10 {
			s += fmt.Sprintf(" %d min", m)
		}
	default:
		s = fmt.Sprintf("%d d", int(d/(24*time.Hour)))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// When renders t relative to when the page was made, with the absolute UTC
// time as its title (hover) and datetime.
func (p pageData) When(t time.Time) template.HTML {
	if t.IsZero() {
		return "—"
	}
	return template.HTML(`<time datetime="` + t.UTC().Format(time.RFC3339Nano) + `" title="` + fmtTime(t) + `">` + relTime(p.Now, t) + `</time>`)
}

// Clock renders t as a time of day in UTC with milliseconds ("22:38:11.456Z"),
// for timelines; the title has the date and how long ago it was.
func (p pageData) Clock(t time.Time) template.HTML {
	if t.IsZero() {
		return "—"
	}
	return template.HTML(`<time class="clock" datetime="` + t.UTC().Format(time.RFC3339Nano) + `" title="` + fmtTime(t) + " (" + relTime(p.Now, t) + `)">` + t.UTC().Format("15:04:05.000Z") + `</time>`)
}

// Until renders how long from when the page was made until t ("29 min"),
// with the absolute UTC time as its title; it is for future times.
func (p pageData) Until(t time.Time) template.HTML {
	rel := strings.TrimPrefix(relTime(p.Now, t), "in ")
	return template.HTML(`<time datetime="` + t.UTC().Format(time.RFC3339Nano) + `" title="` + fmtTime(t) + `">` + rel + `</time>`)
}

// badgeClass maps states (command, processor health) and event kinds to a
// colour class of cmdq.css.
var badgeClass = map[string]string{
	"pending": "s-pending", "running": "s-running", "retrying": "s-retrying", "completed": "s-completed",
	"poisoned": "s-poisoned", "discarded": "s-discarded", "cancelled": "s-discarded", "paused": "s-retrying",
	"created": "s-other", "started": "s-started", "step_completed": "s-other", "failed": "s-failed", "requeued": "s-pending",
	"deferred": "s-retrying",
	"starting": "s-pending", "polling": "s-running", "working": "s-working", "idle": "s-healthy", "draining": "s-draining",
	"stopped": "s-stopped", "unhealthy": "s-unhealthy", "ok": "s-healthy", "gone": "s-discarded",
}

// badge renders a state as a coloured label.
func badge(state any) template.HTML {
	s := fmt.Sprint(state)
	class, ok := badgeClass[s]
	if !ok {
		class = "s-other"
	}
	return template.HTML(`<span class="badge ` + class + `">` + template.HTMLEscapeString(s) + `</span>`)
}

// eventTitle names an event for the timeline: "step 2 completed" rather
// than "step_completed" and a separate step number.
func eventTitle(e cmdq.Event) string {
	if e.Kind == cmdq.EventStepCompleted && e.Step > 0 {
		return fmt.Sprintf("step %d completed", e.Step)
	}
	return strings.ReplaceAll(string(e.Kind), "_", " ")
}

// eventBadge renders an event's title as a label coloured by its kind.
func eventBadge(e cmdq.Event) template.HTML {
	class, ok := badgeClass[string(e.Kind)]
	if !ok {
		class = "s-other"
	}
	return template.HTML(`<span class="badge ` + class + `">` + template.HTMLEscapeString(eventTitle(e)) + `</span>`)
}

// plural writes n with word, in the plural unless n is 1 ("3 entries").
func plural[N int | int64](n N, word string) string {
	s := strconv.FormatInt(int64(n), 10)
	switch {
	case n == 1:
		return s + " " + word
	case strings.HasSuffix(word, "y") && !strings.HasSuffix(word, "ey"):
		return s + " " + strings.TrimSuffix(word, "y") + "ies"
	}
	return s + " " + word + "s"
}

// pluralAny is plural for templates, which pass int or int64.
func pluralAny(n any, word string) string {
	switch v := n.(type) {
	case int64:
		return plural(v, word)
	case int:
		return plural(v, word)
	}
	return fmt.Sprint(n) + " " + word
}

// healthRow is one line of the health panel.
type healthRow struct {
	Label string
	Value string
	Time  time.Time // set when the value is a time
}

// healthLabels name the fields of a processor's health snapshot.
var healthLabels = map[string]string{
	"since":             "In this state since",
	"lastError":         "Last fault",
	"lastErrorAt":       "Last fault at",
	"consecutiveFaults": "Faults in a row",
	"inFlight":          "Messages in flight",
	"wake":              "Doorbell listens on",
	"unreachable":       "Doorbells not acking",
}

// healthRows turns a HealthFunc's detail into labelled lines, in the order
// of its JSON fields (the state is shown separately). Unknown fields get a
// label made from their name; nested values are shown as compact JSON.
func healthRows(detail any) []healthRow {
	if detail == nil {
		return nil
	}
	b, err := json.Marshal(detail)
	if err != nil {
		return []healthRow{{Label: "Detail", Value: fmt.Sprint(detail)}}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return []healthRow{{Label: "Detail", Value: string(b)}}
	}
	var rows []healthRow
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		if key == "state" {
			continue
		}
		label, ok := healthLabels[key]
		if !ok {
			label = humanize(key)
		}
		row := healthRow{Label: label}
		var v any
		_ = json.Unmarshal(raw, &v)
		switch x := v.(type) {
		case string:
			if t, err := time.Parse(time.RFC3339Nano, x); err == nil {
				row.Time = t
			} else {
				row.Value = x
			}
		case bool:
			row.Value = map[bool]string{true: "yes", false: "no"}[x]
		case nil:
			row.Value = "—"
		case []any:
			row.Value = listText(x, raw)
		default:
			row.Value = string(raw)
		}
		rows = append(rows, row)
	}
	return rows
}

// listText is a list of strings as a health row shows it ("a, b");
// any other list as its JSON (raw).
func listText(list []any, raw json.RawMessage) string {
	parts := make([]string, len(list))
	for i, v := range list {
		s, ok := v.(string)
		if !ok {
			return string(raw)
		}
		parts[i] = s
	}
	return strings.Join(parts, ", ")
}

// humanize turns a JSON field name such as "queueDepth" into "Queue depth".
func humanize(name string) string {
	var b strings.Builder
	for i, r := range name {
		switch {
		case i == 0:
			b.WriteRune(unicode.ToUpper(r))
		case unicode.IsUpper(r):
			b.WriteRune(' ')
			b.WriteRune(unicode.ToLower(r))
		case r == '_' || r == '-':
			b.WriteRune(' ')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// ---- static files ----

//go:embed static/*
var staticFS embed.FS

// staticFile is one embedded stylesheet or script.
type staticFile struct {
	body    []byte
	ctype   string
	version string // first 12 hex digits of the SHA-256 of body
}

// staticFiles returns the embedded files by name, read at the first use.
var staticFiles = sync.OnceValue(func() map[string]staticFile {
	out := map[string]staticFile{}
	entries, err := staticFS.ReadDir("static")
	if err != nil {
		panic("console: embedded static files: " + err.Error())
	}
	for _, e := range entries {
		f, err := staticFS.Open("static/" + e.Name())
		if err != nil {
			panic("console: embedded static files: " + err.Error())
		}
		b, err := io.ReadAll(f)
		_ = f.Close()
		if err != nil {
			panic("console: embedded static files: " + err.Error())
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(e.Name()))
		if strings.HasSuffix(e.Name(), ".js") {
			ct = "text/javascript; charset=utf-8"
		}
		out[e.Name()] = staticFile{body: b, ctype: ct, version: hex.EncodeToString(sum[:6])}
	}
	return out
})

// assetURL is the URL of a static file under base (BasePath + "/ui"); the
// version parameter changes with the content, so browsers may cache it.
func assetURL(base, name string) string {
	return base + "/static/" + name + "?v=" + staticFiles()[name].version
}

// static serves GET /ui/static/{name}: no login needed (nothing secret, and
// the login page uses them). With the current version in the URL it may be
// cached for a year.
func (d *dashboard) static(w http.ResponseWriter, r *http.Request) {
	f, ok := staticFiles()[r.PathValue("name")]
	if !ok {
		d.errorPage(w, r, viewer{}, http.StatusNotFound, "Page not found", "There is no such file.", "Start from the overview.")
		return
	}
	h := w.Header()
	h.Set("Content-Type", f.ctype)
	if r.URL.Query().Get("v") == f.version {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(f.body)
	}
}
