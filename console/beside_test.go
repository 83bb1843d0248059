package console_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cmdq-dev/cmdq/console"
)

// TestBeside: the console gets /ui and everything under /ui/, the API
// every other path, by the raw path (no cleaning or redirect before the
// handler's own checks).
func TestBeside(t *testing.T) {
	t.Parallel()
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-Handler", name) })
	}
	h := console.Beside(named("api"), named("ui"))
	for path, want := range map[string]string{
		"/ui": "ui", "/ui/": "ui", "/ui/poison": "ui", "/ui/../v1/poison": "ui", "/ui//x": "ui",
		"/": "api", "/uix": "api", "/v1/commands": "api", "/healthz": "api", "/metrics": "api", "//ui/": "api", "/v1/../ui/": "api",
	} {
		req := httptest.NewRequest(http.MethodGet, "http://localhost/", nil)
		req.URL.Path = path
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if got := rec.Header().Get("X-Handler"); got != want {
			t.Errorf("%s went to %q, want %q", path, got, want)
		}
	}
}
