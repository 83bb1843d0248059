package read_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
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
		ctx := testenv.Ctx(t)
		base := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
		c := testenv.NewClock(base.Add(-3 * testenv.Day)) // an old command, three days before
		r := testenv.OpenAt(t, env, c)
		s := r.Store
		mk := func(typ, queue, corr string) string {
			t.Helper()
			id := layout.NewDayID(c.Now())
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
		c.Set(base.Add(time.Minute))
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
		c.Set(base.Add(12 * time.Minute))

		q := model.CommandQuery{Since: base, Newest: true, Summary: true, Interval: 5 * time.Minute, ParamsPreview: 20}
		page, err := r.ListCommands(ctx, q)
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
		if m0.Completed != 1 || m0.Failed != 2 || m0.Poisoned != 1 || m0.Started != 4 || m0.LatencyP50 != 2*time.Second || m0.LatencyP95 != 3*testenv.Day+time.Minute {
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
			p, err := r.ListCommands(ctx, q)
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
		// A queue, and issued before a time, in both orders.
		if got := ids(model.CommandQuery{Queue: "images"}); !slices.Equal(got, sorted(old, a)) {
			t.Fatalf("queue images (by ID): %v", got)
		}
		if got := ids(model.CommandQuery{Queue: "slow", Newest: true}); !slices.Equal(got, []string{b}) {
			t.Fatalf("queue slow (newest): %v", got)
		}
		if got := ids(model.CommandQuery{IssuedBefore: base}); !slices.Equal(got, []string{old}) {
			t.Fatalf("issued before the range (by ID): %v", got)
		}
		if got := ids(model.CommandQuery{IssuedSince: base, IssuedBefore: base.Add(time.Hour), Queue: "commands", Newest: true}); !slices.Equal(got, []string{d}) {
			t.Fatalf("issued in the range, queue commands: %v", got)
		}
		// Issued since the range's day: the old command's day table is not
		// read at all.
		env.Store.Reset()
		if got := ids(model.CommandQuery{IssuedSince: base.Add(-time.Hour), Since: base, Newest: true, Summary: true}); !slices.Equal(got, sorted(a, b, d)) {
			t.Fatalf("issued since: %v", got)
		}
		if n, tables := env.Store.Counts()["Query"], len(testenv.DayTables(t, env)); n != tables {
			t.Fatalf("issued since the range's day: %d queries; want %d (the base table and today's, not the old day's of %d tables)", n, tables, tables+1)
		}
		if _, err := r.ListCommands(ctx, model.CommandQuery{Interval: 90 * time.Second}); err == nil {
			t.Fatal("an interval of 90 s was accepted")
		}
	})
}

// TestListCommandsNewestAndSummary: a listing newest first, since a time,
// with the counts per state and the outcomes per minute read from the
// events, on both drivers.
func TestListCommandsNewestAndSummary(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		base := time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
		var now time.Time
		s, err := record.Open(testenv.Ctx(t), env.Store, layout.Names{Prefix: env.Prefix}, record.Options{Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		lr := &read.Reader{Store: s} // the listings read the Store only
		ctx := testenv.Ctx(t)
		at := func(min int) { now = base.Add(time.Duration(min)*time.Minute + 5*time.Second) }
		mk := func(typ string, min int, evs ...model.Event) string {
			t.Helper()
			at(min)
			id := testenv.Create(t, s, typ, `{}`)
			rec, err := s.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				if err := s.Append(ctx, rec, e); err != nil {
					t.Fatal(err)
				}
			}
			return id
		}
		old := mk("A", -90, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventCompleted, Attempt: 1}) // before the hour
		done := mk("A", 1, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventCompleted, Attempt: 1})
		retrying := mk("A", 2, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventFailed, Attempt: 1, Error: "x"})
		// Fails in minute 3, completes in minute 4 (the events say so; the
		// command is counted once, completed).
		rec := mk("B", 3, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventFailed, Attempt: 1, Error: "x"})
		r, err := s.Load(ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		at(4)
		if err := s.Append(ctx, r, model.Event{Kind: model.EventStarted, Attempt: 2}, model.Event{Kind: model.EventCompleted, Attempt: 2}); err != nil {
			t.Fatal(err)
		}
		pending := mk("A", 5)
		at(6)
		since := base // 30 minutes ago, whole minutes
		env.Store.Reset()
		page, err := lr.ListCommands(ctx, model.CommandQuery{Since: since, Newest: true, Summary: true, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if got := []string{page.Commands[0].ID, page.Commands[1].ID}; got[0] != pending || got[1] != rec || page.Continuation != "2" {
			t.Fatalf("newest first: %v (continuation %q), want %s %s", got, page.Continuation, pending, rec)
		}
		sum := page.Summary
		if sum == nil || sum.Counts[model.StateCompleted] != 2 || sum.Counts[model.StateRetrying] != 1 || sum.Counts[model.StatePending] != 1 || sum.Partial {
			t.Fatalf("summary counts %+v (old %s must not count)", sum, old)
		}
		// 5 command rows (each holds its created event; rec's its second
		// attempt too) and 8 event rows.
		if sum.Rows < 5+8 || env.Store.Counts()["Query"] != 1 {
			t.Fatalf("%d rows read in %s: want every row of the table, in one query", sum.Rows, env.Store)
		}
		if len(sum.Minutes) != 7 || !sum.Minutes[0].Start.Equal(base) {
			t.Fatalf("minutes from %s to now: %+v", base, sum.Minutes)
		}
		want := map[int][3]int{1: {1, 0, 0}, 2: {0, 1, 0}, 3: {0, 1, 0}, 4: {1, 0, 0}}
		for i, m := range sum.Minutes {
			if got := [3]int{m.Completed, m.Failed, m.Poisoned}; got != want[i] {
				t.Errorf("minute %d: %v, want %v", i, got, want[i])
			}
		}
		next, err := lr.ListCommands(ctx, model.CommandQuery{Since: since, Newest: true, Limit: 2, Continuation: page.Continuation})
		if err != nil || len(next.Commands) != 2 || next.Commands[0].ID != retrying || next.Commands[1].ID != done || next.Continuation != "" {
			t.Fatalf("second page: %+v %v", next, err)
		}
		// A type and a state filter: the counts keep every state of the type.
		b, err := lr.ListCommands(ctx, model.CommandQuery{Since: since, Newest: true, Summary: true, Type: "B", State: model.StatePending})
		if err != nil || len(b.Commands) != 0 || b.Summary.Counts[model.StateCompleted] != 1 || len(b.Summary.Counts) != 1 {
			t.Fatalf("type B, pending: %+v %v", b, err)
		}
		if b.Summary.Minutes[3].Failed != 1 || b.Summary.Minutes[1].Completed != 0 {
			t.Fatalf("type B minutes: %+v", b.Summary.Minutes)
		}
		// A scan limit stops early and says so.
		p, err := lr.ListCommands(ctx, model.CommandQuery{Summary: true, ScanLimit: 1})
		if err != nil || !p.Summary.Partial || p.Summary.Rows != 1 {
			t.Fatalf("scan limit: %+v %v", p.Summary, err)
		}
		if _, err := lr.ListCommands(ctx, model.CommandQuery{Newest: true, Continuation: "x"}); !errors.Is(err, model.ErrInvalidContinuation) {
			t.Fatalf("bad continuation: %v", err)
		}
	})
}

// TestListCommandsAcrossTables: ListCommands pages through the day tables
// and the base table; every command is listed once.
func TestListCommandsAcrossTables(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := testenv.Ctx(t)
		c := testenv.NewClock(testenv.Day0)
		r := testenv.OpenAt(t, env, c)
		want := map[string]bool{}
		for i := 0; i < 3; i++ {
			want[testenv.IssueAt(t, r.Store, c, "demo.A")] = true
		}
		c.Add(testenv.Day)
		for i := 0; i < 2; i++ {
			want[testenv.IssueAt(t, r.Store, c, "demo.A")] = true
		}
		for i := 0; i < 2; i++ {
			id := uuid.NewString()
			if err := r.Store.Create(ctx, record.NewCommand{ID: id, Type: "demo.A", Queue: model.DefaultQueue}); err != nil {
				t.Fatal(err)
			}
			want[id] = true
		}
		got := map[string]int{}
		q := model.CommandQuery{Limit: 2}
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatalf("more than 10 pages of 2 for %d commands", len(want))
			}
			page, err := r.ListCommands(ctx, q)
			if err != nil {
				t.Fatalf("ListCommands %+v: %v", q, err)
			}
			for _, st := range page.Commands {
				got[st.ID]++
			}
			if page.Continuation == "" {
				break
			}
			q.Continuation = page.Continuation
		}
		for id := range want {
			if got[id] != 1 {
				t.Fatalf("command %s listed %d times (all: %v)", id, got[id], got)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("listed %d commands, want %d", len(got), len(want))
		}
		all, err := r.ListCommands(ctx, model.CommandQuery{Newest: true, Limit: 100})
		if err != nil || len(all.Commands) != len(want) {
			t.Fatalf("newest first: %d commands %v, want %d", len(all.Commands), err, len(want))
		}
	})
}
