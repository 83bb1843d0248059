package httpserve_test

import (
	"testing"

	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

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
