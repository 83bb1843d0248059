package layout_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// day0 is the issue day of the IDs in these tests.
var day0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

const day = 24 * time.Hour

func TestDayIDs(t *testing.T) {
	t.Parallel()
	n := layout.Names{Prefix: "cmdq"}
	id := layout.NewDayID(day0)
	u := uuid.MustParse(id)
	if u.Version() != 8 || u.Variant() != uuid.RFC4122 || model.ValidateID(id) != nil {
		t.Fatalf("NewDayID = %s: version %d variant %v", id, u.Version(), u.Variant())
	}
	if d, ok := layout.IDDay(id); !ok || d != layout.DayOf(day0) || n.TableOf(id) != "cmdqcommands20260302" {
		t.Fatalf("IDDay(%s) = %d %v, table %s", id, d, ok, n.TableOf(id))
	}
	v7 := uuid.Must(uuid.NewV7()).String()
	if n.TableOf(v7) != n.DayTable(layout.DayOf(time.Now())) {
		t.Fatalf("TableOf(v7 %s) = %s", v7, n.TableOf(v7))
	}
	if v4 := uuid.NewString(); n.TableOf(v4) != "cmdqcommands" {
		t.Fatalf("TableOf(v4) = %s, want the base table", n.TableOf(v4))
	}
	// A UUIDv7 of 1970 carries no plausible day: base table.
	if old := "00000000-0001-7000-8000-000000000000"; n.TableOf(old) != "cmdqcommands" {
		t.Fatalf("TableOf(%s) = %s, want the base table", old, n.TableOf(old))
	}
	if d, ok := n.ParseDayTable("cmdqcommands20260302"); !ok || d != layout.DayOf(day0) {
		t.Fatalf("ParseDayTable = %d %v", d, ok)
	}
	for _, bad := range []string{"cmdqcommands", "cmdqpoison", "cmdqcommands20261302", "cmdqxcommands20260302", "cmdqcommands2026030"} {
		if _, ok := n.ParseDayTable(bad); ok {
			t.Fatalf("ParseDayTable(%q) accepted", bad)
		}
	}
	// The issue window: 2 days back, 1 ahead.
	if err := layout.CheckIssueWindow(layout.NewDayID(day0.Add(-2*day)), day0); err != nil {
		t.Fatalf("2 days back refused: %v", err)
	}
	if err := layout.CheckIssueWindow(layout.NewDayID(day0.Add(day)), day0); err != nil {
		t.Fatalf("1 day ahead refused: %v", err)
	}
	for _, off := range []time.Duration{-3 * day, 2 * day} {
		err := layout.CheckIssueWindow(layout.NewDayID(day0.Add(off)), day0)
		if !errors.Is(err, model.ErrIDOutsideWindow) || !strings.Contains(err.Error(), "leave the ID empty") {
			t.Fatalf("offset %v: %v, want ErrOutsideWindow saying what to do", off, err)
		}
	}
	if err := layout.CheckIssueWindow(uuid.NewString(), day0); err != nil {
		t.Fatalf("UUIDv4 refused: %v", err)
	}
}

// TestDayTableName: DayTable writes the date by hand; it names the same
// table as time.Format would, for every day an ID can carry (0 to 65535,
// a version 8 ID's 16 bits) and for the far days a version 7 ID's
// timestamp can reach (years past 9999 take time.Format's own form).
func TestDayTableName(t *testing.T) {
	t.Parallel()
	for _, n := range []layout.Names{{Prefix: "cmdq"}, {Prefix: "p" + strings.Repeat("x", 40)}} {
		days := []int{3_000_000, 3_200_000}
		for d := 0; d <= 65535; d++ {
			days = append(days, d)
		}
		for _, d := range days {
			if got, want := n.DayTable(d), n.CommandsTable()+layout.DayTime(d).Format("20060102"); got != want {
				t.Fatalf("DayTable(%d) = %q, want %q", d, got, want)
			}
		}
	}
}
