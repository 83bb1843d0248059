package main

import (
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// TestParseRates: --rate TYPE=N/DURATION gives Config.Rates; a limit
// below 1, an interval of 0 or less, a malformed value or a type given
// twice is refused with an error that names the flag and says what to
// give.
func TestParseRates(t *testing.T) {
	got, err := parseRates([]string{"demo.sleep=10/1s", " billing.charge = 5 / 1m "})
	if err != nil || len(got) != 2 || got["demo.sleep"] != (cmdq.Rate{Limit: 10, Per: time.Second}) ||
		got["billing.charge"] != (cmdq.Rate{Limit: 5, Per: time.Minute}) {
		t.Fatalf("parseRates: %v %v", got, err)
	}
	if got, err := parseRates(nil); got != nil || err != nil {
		t.Fatalf("no --rate: %v %v", got, err)
	}
	for _, c := range []struct{ val, want string }{
		{"demo.sleep=0/1s", "at least 1"},
		{"demo.sleep=-3/1s", "at least 1"},
		{"demo.sleep=10/0s", "1ms to 8784h"},
		{"demo.sleep=10/-1s", "1ms to 8784h"},
		{"demo.sleep=10/1", "TYPE=N/DURATION"},
		{"demo.sleep=10", "TYPE=N/DURATION"},
		{"demo.sleep=ten/1s", "TYPE=N/DURATION"},
		{"=10/1s", "TYPE=N/DURATION"},
		{"9lives=10/1s", "type name"},
	} {
		_, err := parseRates([]string{c.val})
		if err == nil || !strings.Contains(err.Error(), "--rate") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--rate %s: %v, want an error saying %q", c.val, err, c.want)
		}
	}
	if _, err := parseRates([]string{"demo.sleep=1/1s", "demo.sleep=2/1s"}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a type given twice: %v", err)
	}
}
