package record_test

import (
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// TestDeferralsRoundTrip: the deferrals (deferred events) are kept in the
// command row beside the events that make them, in the same batch, and
// read back the same on both drivers: Deferrals counts the deferred events
// since created or requeued, Deferred says the last outcome is one. A row
// that never deferred has neither property (a row written before they
// existed reads as 0 and false); once written, a requeue writes zeros.
func TestDeferralsRoundTrip(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		id := testenv.Create(t, s, "demo.Defer", `{}`)
		row := func() map[string]any {
			t.Helper()
			e, err := s.CommandsTable().Get(ctx, id, layout.RowCommand)
			if err != nil {
				t.Fatal(err)
			}
			return e.Properties
		}
		check := func(when string, deferrals int, deferred bool) {
			t.Helper()
			rec, err := s.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			st, err := r.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Deferrals != deferrals || rec.Deferred != deferred || st.Deferrals != deferrals || st.Deferred != deferred {
				t.Fatalf("%s: loaded deferrals %d deferred %v, read %d %v; want %d %v (row %v)", when, rec.Deferrals, rec.Deferred,
					st.Deferrals, st.Deferred, deferrals, deferred, row())
			}
		}
		rec, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		// A failure writes neither property.
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 1, Worker: "w"},
			model.Event{Kind: model.EventFailed, Attempt: 1, Worker: "w", Error: "boom"}); err != nil {
			t.Fatal(err)
		}
		if p := row(); p["Deferrals"] != nil || p["Deferred"] != nil {
			t.Fatalf("a command that never deferred has deferral properties: %v", p)
		}
		check("after a failure", 0, false)

		// A deferral: one batch (the events and the row), retrying, due at
		// its RunAt.
		due := time.Now().Add(time.Minute)
		env.Store.Reset()
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 2, Worker: "w"},
			model.Event{Kind: model.EventDeferred, Attempt: 2, Worker: "w", Error: "retry after 1m0s: 429", RunAt: due}); err != nil {
			t.Fatal(err)
		}
		if c := env.Store.Counts(); c["Batch"] != 1 || env.Store.Total() != 1 {
			t.Fatalf("a deferral's append cost %s, want Batch=1", env.Store)
		}
		if p := row(); p["Deferrals"] != int32(1) || p["Deferred"] != true || p["Status"] != "retrying" || p["Settled"] != int32(2) {
			t.Fatalf("row after a deferral: %v", p)
		}
		if !rec.RunAt.Equal(layout.Millis(due)) || rec.LastError != "retry after 1m0s: 429" {
			t.Fatalf("after a deferral: RunAt %v LastError %q", rec.RunAt, rec.LastError)
		}
		check("after a deferral", 1, true)
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 3, Worker: "w"},
			model.Event{Kind: model.EventDeferred, Attempt: 3, Worker: "w", Error: "again", RunAt: due}); err != nil {
			t.Fatal(err)
		}
		check("after two deferrals", 2, true)
		// A failure after them: the count stays, the flag goes.
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 4, Worker: "w"},
			model.Event{Kind: model.EventFailed, Attempt: 4, Worker: "w", Error: "boom"}); err != nil {
			t.Fatal(err)
		}
		check("after a failure after deferrals", 2, false)
		// A requeue starts the count again: zeros are written.
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventRequeued, By: "op"}); err != nil {
			t.Fatal(err)
		}
		if p := row(); p["Deferrals"] != int32(0) || p["Deferred"] != false {
			t.Fatalf("row after a requeue: %v", p)
		}
		check("after a requeue", 0, false)
	})
}
