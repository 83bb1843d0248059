package days

import (
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
)

// TestTableOfKeepsNames: tableOf names the same table as layout's TableOf
// for IDs of many days (more than it keeps), for a day named again after
// the bound was reached, and for an ID without a day.
func TestTableOfKeepsNames(t *testing.T) {
	names := layout.Names{Prefix: "cmdq"}
	tb := New(nil, names, nil, time.Now)
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var ids []string
	for i := range maxDayNames + 10 {
		ids = append(ids, layout.NewDayID(start.AddDate(0, 0, i)))
	}
	ids = append(ids, ids[0], ids[len(ids)-1], "not-a-uuid", "0b9e1c52-5a0f-4c8e-9d61-3f2a7c4b8e10")
	for _, id := range ids {
		if got, want := tb.tableOf(id), names.TableOf(id); got != want {
			t.Fatalf("tableOf(%s) = %q, want %q", id, got, want)
		}
	}
	if n := len(tb.dayNames); n != maxDayNames {
		t.Fatalf("%d day names kept, want the bound %d", n, maxDayNames)
	}
}
