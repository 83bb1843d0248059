package console_test

import (
	"os"
	"testing"
	"time"
)

// browserDataDir returns a new Chromium profile directory, removed when
// the test ends. Not t.TempDir: Chromium's helper processes may still
// write into the profile for a moment after the browser has exited, and
// t.TempDir's removal then fails the test ("directory not empty"). The
// removal here is retried for up to 5 s, then left to the system's
// temporary directory clean-up.
func browserDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cmdq-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 50 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // retrying the removal
		}
		t.Logf("the browser profile %s could not be removed", dir)
	})
	return dir
}
