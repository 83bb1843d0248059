package api_test

import (
	"bytes"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// lockedBuffer is a goroutine-safe log sink.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(msg string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, msg) {
			out = append(out, line)
		}
	}
	return out
}

// TestFailedAuthLimited: failed bearer tokens are logged at warn, at most
// once a minute per address, and after a burst of failures the address gets
// 429 with Retry-After for a time that doubles with each further failure
// (a valid token included: it is not even looked at). TestFailedAuthInARow
// checks the count itself. It moves the
// limiter's clock, so it does not run in parallel.
func TestFailedAuthLimited(t *testing.T) {
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	defer api.SetAuthClock(clock)()

	logs := &lockedBuffer{}
	s := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), AuthFailureBurst: 3, Logger: zerolog.New(logs)})
	get := func(tok string) resp { return send(t, http.MethodGet, s.URL+"/v1/poison", tok, "", "") }
	const bad = "not-a-configured-token-01234"

	// Without a token nothing is counted (that is not a guess).
	for range 10 {
		problem(t, get(""), http.StatusUnauthorized, client.ProblemUnauthorized)
	}
	for range 3 {
		problem(t, get(bad), http.StatusUnauthorized, client.ProblemUnauthorized)
	}
	if l := logs.lines("failed authentication"); len(l) != 1 || !strings.Contains(l[0], `"level":"warn"`) || strings.Contains(l[0], bad) {
		t.Fatalf("after 3 failures, warn lines %q; want one, without the token", l)
	}
	// The burst is spent: the next request is refused for 1 s, and each
	// further failure doubles it: 2 s, 4 s.
	for i, wait := range []int{1, 2, 4} {
		r := get(apitest.OperatorToken)
		problem(t, r, http.StatusTooManyRequests, client.ProblemTooManyRequests)
		if ra := r.header.Get("Retry-After"); ra != strconv.Itoa(wait) {
			t.Fatalf("refusal %d: Retry-After %q, want %d", i+1, ra, wait)
		}
		advance(time.Duration(wait) * time.Second)
		problem(t, get(bad), http.StatusUnauthorized, client.ProblemUnauthorized)
	}
	// The dashboard counts and refuses the same address too.
	form := url.Values{"token": {bad}}
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/ui/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("dashboard login while refused: %d Retry-After %q", r.StatusCode, r.Header.Get("Retry-After"))
	}
	// Still one warn line within the minute; the next minute logs again,
	// with the count of failures since.
	if l := logs.lines("failed authentication"); len(l) != 1 {
		t.Fatalf("within a minute: %d warn lines, want 1:\n%s", len(l), strings.Join(l, "\n"))
	}
	advance(10 * time.Minute)
	problem(t, get(bad), http.StatusUnauthorized, client.ProblemUnauthorized)
	l := logs.lines("failed authentication")
	if len(l) != 2 || !strings.Contains(l[1], `"failures":`) {
		t.Fatalf("after a minute: warn lines %q, want a second one with the count", l)
	}
	// Failures are forgotten with time: after a quiet hour, a burst again.
	advance(time.Hour)
	for range 2 {
		problem(t, get(bad), http.StatusUnauthorized, client.ProblemUnauthorized)
	}
	if r := get(apitest.OperatorToken); r.code != http.StatusOK {
		t.Fatalf("after a quiet hour and 2 failures: %d", r.code)
	}
}
