package api_test

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// TestFailedAuthInARow: failures are counted in a row, as documented: the
// address may fail AuthFailureBurst times, and the next request is
// refused (it was the one after the next); a success resets the count (it
// did not). It moves the limiter's clock, so it does not run in parallel.
func TestFailedAuthInARow(t *testing.T) {
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	defer api.SetAuthClock(clock)()

	s := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), AuthFailureBurst: 3})
	get := func(tok string) resp { return send(t, http.MethodGet, s.URL+"/v1/poison", tok, "", "") }
	const bad = "not-a-configured-token-01234"

	// Two failures, a success, two failures, a success…: never three in a
	// row, never refused.
	for range 5 {
		for range 2 {
			problem(t, get(bad), http.StatusUnauthorized, client.ProblemUnauthorized)
		}
		if r := get(apitest.OperatorToken); r.code != http.StatusOK {
			t.Fatalf("a valid token after 2 failures in a row: %d %s", r.code, r.body)
		}
	}
	// Three in a row: the fourth request is refused, whatever it carries.
	for range 3 {
		problem(t, get(bad), http.StatusUnauthorized, client.ProblemUnauthorized)
	}
	r := get(apitest.OperatorToken)
	problem(t, r, http.StatusTooManyRequests, client.ProblemTooManyRequests)
	if ra := r.header.Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After %q, want 1", ra)
	}
	// Each further failure doubles the refusal.
	for _, wait := range []int{2, 4} {
		advance(time.Duration(wait/2) * time.Second)
		problem(t, get(bad), http.StatusUnauthorized, client.ProblemUnauthorized)
		r := get(apitest.OperatorToken)
		problem(t, r, http.StatusTooManyRequests, client.ProblemTooManyRequests)
		if ra := r.header.Get("Retry-After"); ra != strconv.Itoa(wait) {
			t.Fatalf("Retry-After %q, want %d", ra, wait)
		}
	}
	// After the refusal a success resets the count: three failures again
	// before the next refusal.
	advance(4 * time.Second)
	if r := get(apitest.OperatorToken); r.code != http.StatusOK {
		t.Fatalf("after the refusal: %d", r.code)
	}
	for range 3 {
		problem(t, get(bad), http.StatusUnauthorized, client.ProblemUnauthorized)
	}
	r = get(bad)
	problem(t, r, http.StatusTooManyRequests, client.ProblemTooManyRequests)
	if ra := r.header.Get("Retry-After"); ra != "1" {
		t.Fatalf("after a reset: Retry-After %q, want 1 (the first refusal again)", ra)
	}
}
