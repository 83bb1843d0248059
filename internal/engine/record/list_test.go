package record_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// TestListCommandsFiltersAndLatency: a listing filtered by the start of a
// type (any case), the start of an ID (any case), a correlation ID and
// the issue time, which leaves the day tables before that day unread;
// its summary in 5-minute intervals with the latency from issue (or
// requeue) to the start of the first attempt, p50 and p95 per interval
// and over the range, and the outcomes per type and per queue; the start
// of each listed command's parameters and when its current attempt
// started. Both drivers.
func TestListCommandsFiltersAndLatency(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := ctxT(t)
		base := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
		c := newClock(base.Add(-3 * day)) // an old command, three days before
		r := openAt(t, env, c)
		s := r.Store
		mk := func(typ, queue, corr string) string {
			t.Helper()
			id := layout.NewDayID(c.now())
			if err := s.Create(ctx, record.NewCommand{ID: id, Type: typ, Params: []byte(`{"file":"` + strings.Repeat("x", 200) + `"}`), Queue: queue, CorrelationID: corr}); err != nil {
				t.Fatal(err)
			}
			return id
		}
		app := func(id string, evs ...model.Event) {
			t.Helper()
			rec, err := s.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Append(ctx, rec, evs...); err != nil {
				t.Fatal(err)
			}
		}
		started := func(at time.Time, n int) model.Event {
			return model.Event{Kind: model.EventStarted, Attempt: n, Time: at}
		}
		old := mk("Convert.Image", "images", "")
		app(old, started(base.Add(time.Minute), 1))

		// In the range: three first attempts that start 1 s, 2 s and 10 s
		// after issue in the first 5 minutes, one 4 s after a requeue in
		// the third.
		c.set(base.Add(time.Minute))
		a := mk("convert.image", "images", "order-1")
		app(a, started(base.Add(time.Minute+time.Second), 1), model.Event{Kind: model.EventCompleted, Attempt: 1, Time: base.Add(time.Minute + 2*time.Second)})
		b := mk("CONVERT.video", "slow", "order-2")
		app(b, started(base.Add(time.Minute+2*time.Second), 1), model.Event{Kind: model.EventFailed, Attempt: 1, Error: "x", Time: base.Add(time.Minute + 3*time.Second)},
			started(base.Add(2*time.Minute), 2)) // a retry: not a first attempt
		d := mk("mail.send", "commands", "order-1")
		app(d, started(base.Add(time.Minute+10*time.Second), 1), model.Event{Kind: model.EventFailed, Attempt: 1, Error: "x", Time: base.Add(time.Minute + 11*time.Second)},
			model.Event{Kind: model.EventPoisoned, Attempt: 1, Reason: "r", Time: base.Add(time.Minute + 11*time.Second)},
			model.Event{Kind: model.EventRequeued, By: "op", Time: base.Add(10 * time.Minute)},
			started(base.Add(10*time.Minute+4*time.Second), 1))
		c.set(base.Add(12 * time.Minute))

		q := model.CommandQuery{Since: base, Newest: true, Summary: true, Interval: 5 * time.Minute, ParamsPreview: 20}
		page, err := s.ListCommands(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		sum := page.Summary
		if len(page.Commands) != 4 || sum.IntervalMS != 300_000 || len(sum.Minutes) != 3 || !sum.Minutes[0].Start.Equal(base) {
			t.Fatalf("%d commands, intervals %d × %d ms from %v", len(page.Commands), len(sum.Minutes), sum.IntervalMS, sum.Minutes[0].Start)
		}
		m0, m2 := sum.Minutes[0], sum.Minutes[2]
		// old started three days and a minute after its issue: a sample
		// too (its first attempt), the slowest.
		if m0.Completed != 1 || m0.Failed != 2 || m0.Poisoned != 1 || m0.Started != 4 || m0.LatencyP50 != 2*time.Second || m0.LatencyP95 != 3*day+time.Minute {
			t.Fatalf("first interval %+v", m0)
		}
		if m2.Started != 1 || m2.LatencyP50 != 4*time.Second || m2.LatencyP95 != 4*time.Second || sum.Minutes[1].Started != 0 {
			t.Fatalf("third interval %+v, second %+v", m2, sum.Minutes[1])
		}
		if sum.Latency.Started != 5 || sum.Latency.LatencyP50 != 4*time.Second {
			t.Fatalf("range latency %+v", sum.Latency)
		}
		byType := map[string]model.GroupCounts{}
		for _, g := range sum.ByType {
			byType[g.Name] = g
		}
		if g := byType["mail.send"]; g.Commands != 1 || g.Failed != 1 || g.Poisoned != 1 || g.Started != 2 || g.LatencyP50 != 4*time.Second {
			t.Fatalf("by type mail.send %+v", g)
		}
		if sum.ByType[0].Name != "mail.send" || len(sum.ByQueue) != 3 || sum.ByQueue[0].Name != "commands" {
			t.Fatalf("by type %+v, by queue %+v: most events first", sum.ByType, sum.ByQueue)
		}
		if p := page.Params[a]; p != `{"file":"xxxxxxxx…` {
			t.Fatalf("params preview %q", p)
		}
		if got := page.Started[b]; !got.Equal(base.Add(2 * time.Minute)) {
			t.Fatalf("b's current attempt started %v, want its retry's start", got)
		}

		ids := func(q model.CommandQuery) []string {
			t.Helper()
			p, err := s.ListCommands(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, st := range p.Commands {
				out = append(out, st.ID)
			}
			slices.Sort(out)
			return out
		}
		sorted := func(xs ...string) []string { slices.Sort(xs); return xs }
		// A type prefix in any case; with Type too, the type must match.
		if got := ids(model.CommandQuery{TypePrefix: "Convert.", Since: base, Newest: true}); !slices.Equal(got, sorted(old, a, b)) {
			t.Fatalf("type prefix Convert.: %v", got)
		}
		if got := ids(model.CommandQuery{TypePrefix: "convert.I"}); !slices.Equal(got, sorted(old, a)) {
			t.Fatalf("type prefix convert.I (by ID): %v", got)
		}
		if got := ids(model.CommandQuery{CorrelationID: "order-1", Summary: true, Since: base}); !slices.Equal(got, sorted(a, d)) {
			t.Fatalf("correlation order-1: %v", got)
		}
		if got := ids(model.CommandQuery{IDPrefix: strings.ToUpper(d[:14]), Newest: true}); !slices.Equal(got, []string{d}) {
			t.Fatalf("ID prefix %s: %v", d[:14], got)
		}
		// Issued since the range's day: the old command's day table is not
		// read at all.
		env.Store.Reset()
		if got := ids(model.CommandQuery{IssuedSince: base.Add(-time.Hour), Since: base, Newest: true, Summary: true}); !slices.Equal(got, sorted(a, b, d)) {
			t.Fatalf("issued since: %v", got)
		}
		if n, tables := env.Store.Counts()["Query"], len(dayTables(t, env)); n != tables {
			t.Fatalf("issued since the range's day: %d queries; want %d (the base table and today's, not the old day's of %d tables)", n, tables, tables+1)
		}
		if _, err := s.ListCommands(ctx, model.CommandQuery{Interval: 90 * time.Second}); err == nil {
			t.Fatal("an interval of 90 s was accepted")
		}
	})
}
