package periodic_test

import (
	"errors"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/periodic"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestNextIsTheSameEverywhere: a tick does not depend on when or where
// it is computed: intervals are aligned to the zero time, cron specs are
// in UTC unless they name a zone.
func TestNextIsTheSameEverywhere(t *testing.T) {
	for _, tc := range []struct{ spec, from, want string }{
		{"@every 2s", "2026-03-01T10:00:01.3Z", "2026-03-01T10:00:02Z"},
		{"@every 2s", "2026-03-01T10:00:02Z", "2026-03-01T10:00:04Z"},
		{"@every 1h", "2026-03-01T10:59:59.999Z", "2026-03-01T11:00:00Z"},
		{"@every 90m", "2026-03-01T00:10:00Z", "2026-03-01T01:30:00Z"},
		{"*/15 * * * *", "2026-03-01T10:07:00+09:00", "2026-03-01T01:15:00Z"},
		{"0 2 * * *", "2026-03-01T03:00:00Z", "2026-03-02T02:00:00Z"},
		{"*/5 * * * * *", "2026-03-01T10:00:01Z", "2026-03-01T10:00:05Z"},
		{"CRON_TZ=Europe/Paris 0 2 * * *", "2026-03-01T03:00:00Z", "2026-03-02T01:00:00Z"},
		{"@hourly", "2026-03-01T10:00:00Z", "2026-03-01T11:00:00Z"},
	} {
		s, err := periodic.Parse(tc.spec)
		if err != nil {
			t.Fatalf("%q: %v", tc.spec, err)
		}
		if got := s.Next(at(tc.from)).UTC(); !got.Equal(at(tc.want)) {
			t.Errorf("%q after %s: %s, want %s", tc.spec, tc.from, got, tc.want)
		}
	}
}

// TestLast: the latest n ticks in (after, now], oldest first, for an
// interval and a cron spec, however far back they are.
func TestLast(t *testing.T) {
	every, _ := periodic.Parse("@every 2s")
	got := periodic.Last(every, 3, at("2026-03-01T10:00:00Z"), at("2026-03-01T10:00:07.5Z"))
	want := []time.Time{at("2026-03-01T10:00:02Z"), at("2026-03-01T10:00:04Z"), at("2026-03-01T10:00:06Z")}
	if !equal(got, want) {
		t.Fatalf("every 2s: %v, want %v", got, want)
	}
	if got := periodic.Last(every, 3, at("2026-03-01T10:00:04Z"), at("2026-03-01T10:00:07Z")); !equal(got, []time.Time{at("2026-03-01T10:00:06Z")}) {
		t.Fatalf("after bounds it: %v", got)
	}
	daily, _ := periodic.Parse("0 2 * * *")
	got = periodic.Last(daily, 2, time.Time{}, at("2026-03-10T01:00:00Z"))
	want = []time.Time{at("2026-03-08T02:00:00Z"), at("2026-03-09T02:00:00Z")}
	if !equal(got, want) {
		t.Fatalf("daily: %v, want %v", got, want)
	}
	if p := periodic.Prev(daily, at("2026-03-09T02:00:00Z"), at("2026-03-10T01:00:00Z")); !p.IsZero() {
		t.Fatalf("Prev after the last tick: %s, want none", p)
	}
}

func equal(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// TestParseRefuses: malformed specs wrap ErrInvalidSchedule.
func TestParseRefuses(t *testing.T) {
	for _, spec := range []string{"", "* * *", "61 * * * *", "@fortnightly", "@every", "@every 0s", "@every 999ms", "CRON_TZ=Nowhere/Atlantis 0 2 * * *"} {
		if _, err := periodic.Parse(spec); !errors.Is(err, model.ErrInvalidSchedule) {
			t.Errorf("Parse(%q): %v, want ErrInvalidSchedule", spec, err)
		}
	}
}

// TestDerivedIDs: a tick's ID and a unique key's ID are the same wherever
// they are derived, carry the day (of the tick, of the bucket's start)
// and change with each input.
func TestDerivedIDs(t *testing.T) {
	tick := at("2026-03-01T02:00:00Z")
	id := layout.TickID("reports.nightly", tick)
	if id != layout.TickID("reports.nightly", tick.In(time.FixedZone("x", 3600))) {
		t.Fatal("a tick's ID depends on the time's zone")
	}
	if day, ok := layout.IDDay(id); !ok || day != layout.DayOf(tick) {
		t.Fatalf("tick ID %s carries day %d %v, want %d", id, day, ok, layout.DayOf(tick))
	}
	if id == layout.TickID("reports.nightly", tick.Add(time.Second)) || id == layout.TickID("reports.other", tick) {
		t.Fatal("tick IDs collide")
	}
	if model.ValidateID(id) != nil {
		t.Fatalf("tick ID %s is not a valid command ID", id)
	}
	u := layout.UniqueID("orders.Ship", "order-42", time.Hour, at("2026-03-01T10:05:00Z"))
	if u != layout.UniqueID("orders.Ship", "order-42", time.Hour, at("2026-03-01T10:59:59.999Z")) {
		t.Fatal("one hour's bucket gives two IDs")
	}
	for _, other := range []string{
		layout.UniqueID("orders.Ship", "order-42", time.Hour, at("2026-03-01T11:00:00Z")),
		layout.UniqueID("orders.Ship", "order-43", time.Hour, at("2026-03-01T10:05:00Z")),
		layout.UniqueID("orders.Bill", "order-42", time.Hour, at("2026-03-01T10:05:00Z")),
		layout.UniqueID("orders.Ship", "order-42", 2*time.Hour, at("2026-03-01T10:05:00Z")),
	} {
		if other == u {
			t.Fatal("unique IDs of another bucket, key, type or window collide")
		}
	}
	week := layout.UniqueID("orders.Ship", "k", 7*24*time.Hour, at("2026-03-05T10:00:00Z")) // a Thursday
	if day, _ := layout.IDDay(week); layout.DayTime(day).Weekday() != time.Monday {
		t.Fatalf("a week's bucket starts on %s, want Monday", layout.DayTime(day).Weekday())
	}
}
