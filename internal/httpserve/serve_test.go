package httpserve_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// TestBeside: the console gets /ui and everything under /ui/, the API
// every other path, by the raw path (no cleaning or redirect before the
// handler's own checks).
func TestBeside(t *testing.T) {
	t.Parallel()
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-Handler", name) })
	}
	h := httpserve.Beside(named("api"), named("ui"))
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

// TestSettings: every problem is reported, and zero fields take their
// defaults.
func TestSettings(t *testing.T) {
	t.Parallel()
	bad := httpserve.Settings{RequestTimeout: -1, StorageTryTimeout: -1, MaxStream: -1, BasePath: "cmdq/",
		AllowedHosts: []string{"https://x"}, Tokens: httpserve.Tokens{"short": {httpserve.RoleReader}}}
	if n := len(bad.Problems()); n != 6 {
		t.Fatalf("%d problems, want 6: %v", n, bad.Problems())
	}
	d := httpserve.Settings{StorageMaxRetries: -1}.WithDefaults()
	if d.RequestTimeout != httpserve.DefaultRequestTimeout || d.StorageTryTimeout != httpserve.DefaultRequestTimeout/4 ||
		d.StorageMaxRetries != 0 || d.MaxStream != httpserve.DefaultMaxStream {
		t.Fatalf("defaults %+v", d)
	}
	if d := (httpserve.Settings{}).WithDefaults(); d.StorageMaxRetries != httpserve.DefaultStorageMaxRetries {
		t.Fatalf("StorageMaxRetries default %d", d.StorageMaxRetries)
	}
}
