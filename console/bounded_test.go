package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// deepParams is a params object whose one value is nested depth arrays
// deep: {"a":[[[…]]]} (about 2 × depth bytes).
func deepParams(depth int) string {
	return `{"a":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
}

// issueDeep issues a command with params through the server's client
// (the API's checks included: the same path as POST /v1/commands).
func issueDeep(t testing.TB, srv *apitest.Server, params string) string {
	t.Helper()
	res, err := srv.Client.IssueRaw(context.Background(), cmdq.Raw{Type: "demo.Deep", Params: json.RawMessage(params)})
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

// viewBytes returns the bytes the process allocated while serving one
// GET of path (runtime.MemStats.TotalAlloc: what the view allocates,
// which load does not change), and the page.
func viewBytes(t testing.TB, base, path string) (uint64, string) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%.2000s", path, r.StatusCode, err, body)
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, string(body)
}

// TestCommandPageBoundsDeepParams: 19.8 KB of params nested 9,900 deep
// (and a 59 KB variant) made one view of the command page allocate about
// 900 MB (2.3 GB) and take seconds: the page indented them whole before
// cutting to 64 KiB. Rendering is now bounded in size and depth before it
// is done: one view allocates well under 50 MB. (Its time is measured by
// BenchmarkCommandPageDeepParams; docs/dashboard.md has the figures.)
func TestCommandPageBoundsDeepParams(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{})
	for _, depth := range []int{9900, 9999} {
		params := deepParams(depth)
		if depth == 9999 {
			// The 59 KB variant: deep nesting with some breadth.
			params = `{"a":` + strings.Repeat(`[1.5,`, depth) + "1" + strings.Repeat("]", depth) + `}`
		}
		id := issueDeep(t, srv, params)
		n, body := viewBytes(t, srv.URL, "/ui/commands/"+id)
		const limit = 50 << 20
		if n > limit {
			t.Errorf("depth %d (%d bytes of params): one view allocated %d MB, want under %d MB", depth, len(params), n>>20, limit>>20)
		}
		if !strings.Contains(body, "Parameters (") {
			t.Errorf("depth %d: the page shows no parameters:\n%.3000s", depth, body)
		}
		t.Logf("depth %d, %d bytes of params: one view allocated %.1f MB", depth, len(params), float64(n)/(1<<20))
	}
}

// BenchmarkCommandPageDeepParams measures one view of the command page of
// a command whose params are nested 9,900 deep (19.8 KB): its time and
// bytes allocated per view (go test -run '^$' -bench CommandPageDeepParams
// -benchmem ./console).
func BenchmarkCommandPageDeepParams(b *testing.B) {
	srv := apitest.Start(b, apitest.Options{})
	id := issueDeep(b, srv, deepParams(9900))
	b.ReportAllocs()
	for b.Loop() {
		r, err := http.Get(srv.URL + "/ui/commands/" + id)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
		if r.StatusCode != http.StatusOK {
			b.Fatalf("status %d", r.StatusCode)
		}
	}
}

// TestLoginNextStaysInConsole: the login's next is a console path after
// cleaning: /ui/..//evil.example was accepted (it starts with /ui/) and the
// redirect, cleaned, went to /evil.example, outside the console.
func TestLoginNextStaysInConsole(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	for _, next := range []string{
		"/ui/..//evil.example", "/ui/../evil", "/ui/./../v1/poison", "/ui/%2e%2e/evil", "/ui/..%2F..%2Fevil",
		"/ui/../ui/../x", "/ui/..", "/ui/login/../../metrics",
	} {
		b := newBrowser(t, srv.URL)
		loc := b.post("/ui/login", url.Values{"token": {apitest.ReaderToken}, "next": {next}}).location(t, http.StatusSeeOther)
		if loc != "/ui/" {
			t.Errorf("next=%q redirects to %q, want /ui/", next, loc)
		}
	}
	// Console paths are kept, cleaned, with their query.
	for next, want := range map[string]string{
		"/ui/poison?type=A": "/ui/poison?type=A",
		"/ui/./poison":      "/ui/poison",
		"/ui/x/../queues":   "/ui/queues",
	} {
		b := newBrowser(t, srv.URL)
		if loc := b.post("/ui/login", url.Values{"token": {apitest.ReaderToken}, "next": {next}}).location(t, http.StatusSeeOther); loc != want {
			t.Errorf("next=%q redirects to %q, want %q", next, loc, want)
		}
	}
}
