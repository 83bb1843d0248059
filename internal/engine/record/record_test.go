package record_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

func TestCreateLoad(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		env.Store.Reset()
		id := testenv.Create(t, s, "demo.Create", `{"a":1}`)
		if c := env.Store.Counts(); c["Batch"] != 1 || env.Store.Total() != 1 {
			t.Fatalf("Create cost %s, want Batch=1", env.Store)
		}
		env.Store.Reset()
		rec, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if c := env.Store.Counts(); c["Get"] != 1 || env.Store.Total() != 1 {
			t.Fatalf("Load cost %s, want Get=1 (one point read)", env.Store)
		}
		if rec.ID != id || rec.Type != "demo.Create" || string(rec.Params) != `{"a":1}` || rec.Status.State != model.StatePending ||
			rec.CorrelationID != "corr-1" || rec.Queue != "commands" || rec.EventSeq != 1 || rec.ETag == "" ||
			rec.ParamsHash != record.HashParams([]byte(`{"a":1}`)) || rec.CreatedAt.IsZero() || rec.CreatedAt.Location() != time.UTC {
			t.Fatalf("loaded record: %+v", rec)
		}
		env.Store.Reset()
		got, err := r.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if c := env.Store.Counts(); c["Get"] != 1 || env.Store.Total() != 1 {
			t.Fatalf("Reader.Get cost %s, want Get=1 (one point read)", env.Store)
		}
		if got != rec.Status {
			t.Fatalf("Reader.Get %+v, Load %+v", got, rec.Status)
		}
		evs, err := r.Events(ctx, id)
		if err != nil || len(evs) != 1 || evs[0].Kind != model.EventCreated || evs[0].Seq != 1 {
			t.Fatalf("events %+v, %v", evs, err)
		}
		if err := s.Create(ctx, record.NewCommand{ID: id, Type: "demo.Create", Queue: model.DefaultQueue}); !errors.Is(err, storage.ErrExists) {
			t.Fatalf("second Create: %v, want ErrExists", err)
		}
		for _, bad := range []string{uuid.NewString(), "", layout.UnqueuedPartition} {
			if _, err := r.Get(ctx, bad); !errors.Is(err, model.ErrNotFound) {
				t.Fatalf("Get(%q): %v, want ErrNotFound", bad, err)
			}
		}
		if _, err := r.Events(ctx, uuid.NewString()); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("Events(unknown): %v", err)
		}
	})
}

func TestParamsSplitRoundTrip(t *testing.T) {
	t.Parallel()
	// 3 chunks' worth, with multi-byte and surrogate-pair characters on the boundaries.
	var sb strings.Builder
	sb.WriteString(`{"s":"`)
	for sb.Len() < 200_000 {
		sb.WriteString("abcdé€😀")
	}
	sb.WriteString(`"}`)
	params := sb.String()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		_, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		id := testenv.Create(t, s, "demo.Big", params)
		rec, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if string(rec.Params) != params {
			t.Fatalf("params did not round-trip: %d bytes back, %d sent", len(rec.Params), len(params))
		}
		e, err := s.CommandsTable().Get(ctx, id, layout.RowCommand)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for k, v := range e.Properties {
			if strings.HasPrefix(k, "Params") && k != "ParamsHash" {
				n++
				if u := len(utf16.Encode([]rune(v.(string)))); u > layout.ParamsChunkUnits {
					t.Fatalf("%s has %d UTF-16 units", k, u)
				}
			}
		}
		if n < 4 {
			t.Fatalf("params split into %d properties, want ≥ 4", n)
		}
	})
}

func TestParamsTooLarge(t *testing.T) {
	t.Parallel()
	params := `{"s":"` + strings.Repeat("x", layout.MaxParamsChunks*layout.ParamsChunkUnits) + `"}`
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		_, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		id := uuid.NewString()
		env.Store.Reset()
		err := s.Create(ctx, record.NewCommand{ID: id, Type: "demo.Huge", Params: []byte(params), Queue: model.DefaultQueue})
		if !errors.Is(err, record.ErrParamsTooLarge) || !errors.Is(err, storage.ErrTooLarge) || !strings.Contains(err.Error(), "524288") {
			t.Fatalf("Create huge: %v", err)
		}
		if env.Store.Total() != 0 {
			t.Fatalf("oversize Create reached storage: %s", env.Store)
		}
		if _, err := s.Load(ctx, id); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("Load after failed Create: %v", err)
		}
	})
}

// TestParamsOverEntityLimit: params that split into the allowed chunks but
// make the command row larger than an entity may be (the driver's check)
// give ErrParamsTooLarge too, and nothing is stored.
func TestParamsOverEntityLimit(t *testing.T) {
	t.Parallel()
	n := layout.MaxParamsChunks*layout.ParamsChunkUnits - 20
	params := `{"s":"` + strings.Repeat("x", n-8) + `"}`
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		_, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		id := uuid.NewString()
		err := s.Create(ctx, record.NewCommand{ID: id, Type: "demo.Huge", Params: []byte(params), Queue: model.DefaultQueue})
		if !errors.Is(err, record.ErrParamsTooLarge) || !errors.Is(err, storage.ErrTooLarge) {
			t.Fatalf("Create of %d-unit params: %v, want ErrParamsTooLarge", len(params), err)
		}
		if _, err := s.Load(ctx, id); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("Load after failed Create: %v", err)
		}
	})
}

func TestAppendConflict(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		id := testenv.Create(t, s, "demo.Append", `{}`)
		a, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := s.Load(ctx, id)
		env.Store.Reset()
		if err := s.Append(ctx, a, model.Event{Kind: model.EventStarted, Attempt: 1, Worker: "w1"},
			model.Event{Kind: model.EventCompleted, Attempt: 1, Worker: "w1"}); err != nil {
			t.Fatal(err)
		}
		if c := env.Store.Counts(); c["Batch"] != 1 || env.Store.Total() != 1 {
			t.Fatalf("Append cost %s, want Batch=1", env.Store)
		}
		if a.Status.State != model.StateCompleted || a.EventSeq != 3 || a.Attempts != 1 {
			t.Fatalf("record after Append: %+v", a)
		}
		before := *b
		env.Store.Reset()
		err = s.Append(ctx, b, model.Event{Kind: model.EventStarted, Attempt: 2, Worker: "w2"})
		if !errors.Is(err, storage.ErrConflict) {
			t.Fatalf("stale Append: %v, want ErrConflict", err)
		}
		// The conflict carries the command as it is now. Telling a lost race
		// from this write having landed (its answer lost) takes two point
		// reads: the command row, and the event row this write would have
		// started at (a later write may have followed it).
		var ce *record.ConflictError
		if !errors.As(err, &ce) || ce.Current == nil || ce.Current.ETag != a.ETag || ce.Current.WriteID != a.WriteID || a.WriteID == "" ||
			ce.Current.Status != a.Status || ce.Current.EventSeq != 3 {
			t.Fatalf("conflict %#v, want the current command (record %+v)", err, a)
		}
		if c := env.Store.Counts(); c["Batch"] != 1 || c["Get"] != 2 || env.Store.Total() != 3 {
			t.Fatalf("stale Append cost %s, want Batch=1 Get=2", env.Store)
		}
		if b.ETag != before.ETag || b.EventSeq != before.EventSeq || b.Status != before.Status {
			t.Fatalf("failed Append changed the record")
		}
		got, err := r.Get(ctx, id)
		if err != nil || got.State != model.StateCompleted || got.Worker != "w1" {
			t.Fatalf("Get: %+v %v", got, err)
		}
		// The stored projection equals the replay of the stored events.
		evs, err := r.Events(ctx, id)
		if err != nil || len(evs) != 3 {
			t.Fatalf("events: %d %v", len(evs), err)
		}
		replay := model.Status{ID: id, Type: got.Type, CorrelationID: got.CorrelationID, Queue: got.Queue}
		for _, e := range evs {
			layout.Apply(&replay, e)
		}
		if replay != got {
			t.Fatalf("replay %+v != stored %+v", replay, got)
		}
		if err := s.Append(ctx, a); !errors.Is(err, storage.ErrInvalidArgument) {
			t.Fatalf("Append without events: %v", err)
		}
		if err := s.Append(ctx, a, model.Event{Kind: "bogus"}); !errors.Is(err, storage.ErrInvalidArgument) {
			t.Fatalf("Append bogus kind: %v", err)
		}
	})
}

func TestEventsPaging(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		id := testenv.Create(t, s, "demo.Steps", `{}`)
		rec, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		const total = 1 + 11*layout.MaxEventsPerAppend // > 1000: more than one page
		step := 0
		for rec.EventSeq < total {
			evs := make([]model.Event, layout.MaxEventsPerAppend)
			for i := range evs {
				step++
				evs[i] = model.Event{Kind: model.EventStepCompleted, Step: step, Note: fmt.Sprint("step ", step)}
			}
			if err := s.Append(ctx, rec, evs...); err != nil {
				t.Fatal(err)
			}
		}
		env.Store.Reset()
		got, err := r.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != total {
			t.Fatalf("%d events, want %d", len(got), total)
		}
		if env.Store.Counts()["Query"] < 2 {
			t.Fatalf("expected paging, got %s", env.Store)
		}
		for i, e := range got {
			if e.Seq != int64(i+1) {
				t.Fatalf("event %d has seq %d", i, e.Seq)
			}
			if i > 0 && (e.Kind != model.EventStepCompleted || e.Step != i || e.Note != fmt.Sprint("step ", i)) {
				t.Fatalf("event %d: %+v", i, e)
			}
		}
		if st, _ := r.Get(ctx, id); st.Step != total-1 {
			t.Fatalf("projection step %d, want %d", st.Step, total-1)
		}
	})
}

func TestPoisonConflictRemovesEntry(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		id := testenv.Create(t, s, "demo.Race", `{}`)
		stale, _ := s.Load(ctx, id)
		fresh, _ := s.Load(ctx, id)
		if err := s.Append(ctx, fresh, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventCompleted, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
		if err := s.Poison(ctx, stale, model.PoisonEntry{Reason: "ceiling"}); !errors.Is(err, storage.ErrConflict) {
			t.Fatalf("Poison on stale record: %v, want ErrConflict", err)
		}
		if _, err := r.GetPoison(ctx, id); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("poison entry of a completed command: %v", err)
		}
	})
}

func TestTruncatesLongText(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		id := testenv.Create(t, s, "demo.Long", `{}`)
		rec, _ := s.Load(ctx, id)
		long := strings.Repeat("é", 100_000)
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventFailed, Error: long, Detail: long}); err != nil {
			t.Fatal(err)
		}
		evs, err := r.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		e := evs[1]
		if n := len([]rune(e.Error)); n > layout.MaxTextUnits || !strings.HasSuffix(e.Error, "[truncated]") {
			t.Fatalf("error kept %d runes", n)
		}
		if n := len([]rune(e.Detail)); n > layout.MaxDetailUnits || n < layout.MaxDetailUnits-20 {
			t.Fatalf("detail kept %d runes", n)
		}
	})
}

// TestEventTimesNeverGoBack: the history reads in order even when an event
// carries an older time than the one before it (a skewed worker clock, or a
// poisoned event whose time was taken before the failed event's).
func TestEventTimesNeverGoBack(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		id := testenv.Create(t, s, "demo.Times", `{}`)
		rec, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		past := rec.Status.CreatedAt.Add(-time.Hour)
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 1, Time: past},
			model.Event{Kind: model.EventFailed, Attempt: 1, Error: "boom"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Poison(ctx, rec, model.PoisonEntry{Reason: "test", DequeueCount: 1, PoisonedAt: past},
			model.Event{Kind: model.EventFailed, Attempt: 1, Error: "boom again"}); err != nil {
			t.Fatal(err)
		}
		evs, err := r.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 5 {
			t.Fatalf("got %d events, want 5: %+v", len(evs), evs)
		}
		for i := 1; i < len(evs); i++ {
			if evs[i].Time.Before(evs[i-1].Time) {
				t.Fatalf("event %d (%s at %s) is older than event %d (%s at %s)", i, evs[i].Kind, evs[i].Time, i-1, evs[i-1].Kind, evs[i-1].Time)
			}
		}
	})
}

// TestCommandRowLayout checks the data layout: one a:cmd row holding the
// command and its projection, events beside it, nothing else; appends merge
// the projection into a:cmd without dropping or resending the parameters,
// and clear LastError by writing "".
func TestCommandRowLayout(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		id := uuid.NewString()
		env.Store.Reset()
		if err := s.Create(ctx, record.NewCommand{ID: id, Type: "demo.Layout", Params: []byte(`{"k":"v"}`), CorrelationID: "c-9", Queue: "slow"}); err != nil {
			t.Fatal(err)
		}
		rows := func() map[string]storage.Entity {
			t.Helper()
			page, err := s.CommandsTable().Query(ctx, storage.Query{PartitionKey: id})
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]storage.Entity{}
			for _, e := range page.Entities {
				m[e.RowKey] = e
			}
			return m
		}
		// The command row alone: it holds the created event
		// (layout.CreatedInRowProp).
		m := rows()
		row, ok := m[layout.RowCommand]
		if len(m) != 1 || !ok {
			t.Fatalf("rows after Create: %v, want a:cmd alone", keys(m))
		}
		want := map[string]any{
			"Type": "demo.Layout", "Params": `{"k":"v"}`, "CorrelationID": "c-9", "Queue": "slow",
			"Status": "pending", "Attempts": int32(0), "Step": int32(0), "LastError": "", "Worker": "", "EventSeq": int64(1),
			layout.CreatedInRowProp: true,
		}
		for k, v := range want {
			if row.Properties[k] != v {
				t.Fatalf("a:cmd %s = %#v, want %#v (all: %v)", k, row.Properties[k], v, row.Properties)
			}
		}
		if w, _ := row.Properties["WriteID"].(string); len(w) != 16 {
			t.Fatalf("write ID of the issue batch: a:cmd %#v", row.Properties["WriteID"])
		}
		if evs, err := r.Events(ctx, id); err != nil || len(evs) != 1 || evs[0].Seq != 1 || evs[0].Kind != model.EventCreated ||
			!evs[0].Time.Equal(layout.TimeProp(row, "IssuedAt")) || !evs[0].RunAt.IsZero() {
			t.Fatalf("events after Create: %+v, %v; want created at IssuedAt", evs, err)
		}

		// A command issued with a run-at time: its created event carries
		// it, in a row of its own, written by the same batch.
		later := uuid.NewString()
		runAt := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
		if err := s.Create(ctx, record.NewCommand{ID: later, Type: "demo.Layout", Params: []byte(`{}`), Queue: "slow", RunAt: runAt}); err != nil {
			t.Fatal(err)
		}
		page, err := s.CommandsTable().Query(ctx, storage.Query{PartitionKey: later})
		if err != nil || len(page.Entities) != 2 || layout.BoolProp(page.Entities[0], layout.CreatedInRowProp) ||
			layout.StrProp(page.Entities[0], "WriteID") != layout.StrProp(page.Entities[1], "WriteID") {
			t.Fatalf("rows of a scheduled command: %+v, %v; want a:cmd and its created row, one write", page.Entities, err)
		}
		if evs, err := r.Events(ctx, later); err != nil || len(evs) != 1 || evs[0].Kind != model.EventCreated || !evs[0].RunAt.Equal(runAt) {
			t.Fatalf("events of a scheduled command: %+v, %v; want created with RunAt %s", evs, err, runAt)
		}

		rec, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.ETag != row.ETag {
			t.Fatalf("Load ETag %q, stored row ETag %q", rec.ETag, row.ETag)
		}
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 1, Worker: "w1"},
			model.Event{Kind: model.EventFailed, Attempt: 1, Worker: "w1", Error: "boom"}); err != nil {
			t.Fatal(err)
		}
		row = rows()[layout.RowCommand]
		if row.Properties["LastError"] != "boom" || row.Properties["Status"] != "retrying" || row.Properties["Params"] != `{"k":"v"}` ||
			row.Properties["ParamsHash"] != record.HashParams([]byte(`{"k":"v"}`)) || row.ETag != rec.ETag {
			t.Fatalf("a:cmd after failed attempt: %v (etag %q, record %q)", row.Properties, row.ETag, rec.ETag)
		}
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 2, Worker: "w2", MessageID: "msg-2"}); err != nil {
			t.Fatal(err)
		}
		// The started event names its queue message, which owns the
		// command (a:cmd Owner) until its outcome.
		if m = rows(); m[layout.RowCommand].Properties["Owner"] != "msg-2" || m[layout.EventRowKey(4)].Properties["MessageID"] != "msg-2" || rec.Owner != "msg-2" {
			t.Fatalf("owner after started: a:cmd %#v, event %#v, record %q", m[layout.RowCommand].Properties["Owner"], m[layout.EventRowKey(4)].Properties["MessageID"], rec.Owner)
		}
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventCompleted, Attempt: 2, Worker: "w2"}); err != nil {
			t.Fatal(err)
		}
		m = rows()
		if len(m) != 5 {
			t.Fatalf("rows after three appends: %v, want a:cmd and 4 events", keys(m))
		}
		row = m[layout.RowCommand]
		if v, ok := row.Properties["LastError"]; !ok || v != "" {
			t.Fatalf("LastError after completion: %#v (present %v), want \"\"", v, ok)
		}
		back, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if string(back.Params) != `{"k":"v"}` || back.Type != "demo.Layout" || back.CorrelationID != "c-9" || back.Queue != "slow" ||
			back.Status.State != model.StateCompleted || back.Attempts != 2 || back.LastError != "" || back.Worker != "w2" || back.EventSeq != 5 || back.Settled != 2 || back.Owner != "msg-2" {
			t.Fatalf("loaded after completion: %+v", back)
		}
		got, err := r.Get(ctx, id)
		if err != nil || got != back.Status {
			t.Fatalf("Reader.Get %+v %v, want %+v", got, err, back.Status)
		}
	})
}

func keys(m map[string]storage.Entity) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestLongErrorFitsBesideLargeParams: parameters near the entity limit leave
// less room than MaxTextUnits for LastError in the shared row; the append
// still succeeds, cutting the projection's copy (the event keeps its own).
func TestLongErrorFitsBesideLargeParams(t *testing.T) {
	t.Parallel()
	// 15.9 chunks of parameters: about 1,042,000 bytes of the 1 MiB row.
	params := `{"s":"` + strings.Repeat("x", 15*layout.ParamsChunkUnits+29_000) + `"}`
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		_, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		id := testenv.Create(t, s, "demo.BigErr", params)
		rec, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		long := strings.Repeat("e", 3*layout.MaxTextUnits)
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventFailed, Attempt: 1, Worker: strings.Repeat("w", 3*layout.MaxTextUnits), Error: long}); err != nil {
			t.Fatalf("append of a long error beside large params: %v", err)
		}
		back, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if string(back.Params) != params {
			t.Fatalf("params changed: %d bytes back, %d sent", len(back.Params), len(params))
		}
		if back.Status.State != model.StateRetrying || !strings.HasSuffix(back.LastError, "[truncated]") || len(back.LastError) >= layout.MaxTextUnits {
			t.Fatalf("status %s, LastError of %d bytes (want cut below %d)", back.Status.State, len(back.LastError), layout.MaxTextUnits)
		}
		row, err := s.CommandsTable().Get(ctx, id, layout.RowCommand)
		if err != nil {
			t.Fatal(err)
		}
		if n := storage.EntitySize(row); n > storage.MaxEntityBytes {
			t.Fatalf("row is %d bytes", n)
		}
	})
}

// TestChangedHook: every landed append is passed to Options.Changed with
// the status after it and the events written.
func TestChangedHook(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		type change struct {
			st  model.Status
			evs []model.Event
		}
		var got []change
		s, err := record.Open(testenv.Ctx(t), env.Store, layout.Names{Prefix: env.Prefix}, record.Options{Changed: func(st model.Status, evs []model.Event) {
			got = append(got, change{st, evs})
		}})
		if err != nil {
			t.Fatal(err)
		}
		id := testenv.Create(t, s, "A", `{}`)
		rec, err := s.Load(testenv.Ctx(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(testenv.Ctx(t), rec, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventStepCompleted, Attempt: 1, Step: 1}); err != nil {
			t.Fatal(err)
		}
		if err := s.Poison(testenv.Ctx(t), rec, model.PoisonEntry{Reason: "r", DequeueCount: 1}); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].st.State != model.StateRunning || len(got[0].evs) != 2 || got[0].evs[0].Seq != 2 || got[0].evs[1].Seq != 3 ||
			got[1].st.State != model.StatePoisoned || len(got[1].evs) != 1 || got[1].evs[0].Kind != model.EventPoisoned || got[1].evs[0].Seq != 4 {
			t.Fatalf("changes: %+v", got)
		}
		// A failed append reports nothing.
		stale := *rec
		stale.ETag = "W/\"stale\""
		if err := s.Append(testenv.Ctx(t), &stale, model.Event{Kind: model.EventStarted, Attempt: 2}); err == nil {
			t.Fatal("an append on a stale ETag landed")
		}
		if len(got) != 2 {
			t.Fatalf("a failed append was reported: %+v", got[2:])
		}
	})
}

// TestCreateRecreatesMissingDayTable: a day table deleted under a process
// that has it open (by hand, or by another process) is created again by the
// next insert, which is retried once.
func TestCreateRecreatesMissingDayTable(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := testenv.Ctx(t)
		c := testenv.NewClock(time.Now())
		r := testenv.OpenAt(t, env, c)
		first := testenv.IssueAt(t, r.Store, c, "demo.Done")
		table := (layout.Names{Prefix: env.Prefix}).TableOf(first)
		if err := env.Store.DeleteTable(ctx, table); err != nil {
			t.Fatal(err)
		}
		second := testenv.IssueAt(t, r.Store, c, "demo.Done")
		if st, err := r.Get(ctx, second); err != nil || st.State != model.StatePending {
			t.Fatalf("command issued after its day table was deleted: %+v %v", st, err)
		}
		if got := testenv.DayTables(t, env); !slices.Equal(got, []string{table}) {
			t.Fatalf("day tables %q, want [%s] again", got, table)
		}
	})
}

// TestCompletionSharesStartedRow: an attempt that starts and completes in
// one append writes no event row (the command row carries StartedAt and
// StartedSeq), read back as two events with their own numbers and times;
// a later write (a lease_lost) first writes their row (a started row with
// CompletedAt, the completion's write ID), so the history stays whole. A
// completion the command row cannot give back exactly (a worker name past
// the text limit) takes the started row with CompletedAt at once; one that
// says more than its time (a note), or follows another attempt's start,
// or comes in a later append, keeps a row of its own.
func TestCompletionSharesStartedRow(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		rows := func(id string) []storage.Entity {
			t.Helper()
			page, err := s.CommandsTable().Query(ctx, storage.Query{PartitionKey: id, RowKeyPrefix: layout.EventRowPrefix})
			if err != nil {
				t.Fatal(err)
			}
			return page.Entities
		}
		load := func(id string) *record.Record {
			t.Helper()
			rec, err := s.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return rec
		}
		id := testenv.Create(t, s, "demo.OneRow", `{}`)
		rec := load(id)
		// The times come after the command's creation: an append moves an
		// event older than the one before it up to that one's time (on a
		// loaded machine the create took more than a millisecond).
		at := time.Now().UTC().Truncate(time.Millisecond)
		started := model.Event{Kind: model.EventStarted, Attempt: 1, Worker: "w1", Time: at, MessageID: "m1"}
		completed := model.Event{Kind: model.EventCompleted, Attempt: 1, Worker: "w1", Time: at.Add(7 * time.Millisecond)}
		if err := s.Append(ctx, rec, started, completed); err != nil {
			t.Fatal(err)
		}
		completion := rec.WriteID
		if got := rows(id); len(got) != 0 {
			t.Fatalf("event rows %+v, want none (the command row holds created, started and completed)", got)
		}
		cmd, err := s.CommandsTable().Get(ctx, id, layout.RowCommand)
		if err != nil {
			t.Fatal(err)
		}
		if layout.IntProp(cmd, layout.StartedSeqProp) != 2 || !layout.TimeProp(cmd, layout.StartedAtProp).Equal(at) {
			t.Fatalf("command row %+v, want StartedSeq 2 and StartedAt %s", cmd.Properties, at)
		}
		want := []model.Event{
			{Seq: 2, Kind: model.EventStarted, Time: at, Attempt: 1, Worker: "w1", MessageID: "m1"},
			{Seq: 3, Kind: model.EventCompleted, Time: completed.Time, Attempt: 1, Worker: "w1"},
		}
		evs, err := r.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 3 || evs[0].Kind != model.EventCreated || !equalEvents(evs[1:], want) {
			t.Fatalf("events %+v, want created then %+v", evs, want)
		}
		if rec.EventSeq != 3 || rec.Status.State != model.StateCompleted {
			t.Fatalf("record after the append: seq %d, state %s", rec.EventSeq, rec.Status.State)
		}

		// The completion's own worker learns its delete failed: lease_lost
		// after it, from the record in hand and from one loaded again.
		lost := model.Event{Kind: model.EventLeaseLost, Attempt: 1, Worker: "w1", Note: "the message was taken"}
		for _, fresh := range []bool{false, true} {
			id, rec := id, rec
			if fresh {
				id = testenv.Create(t, s, "demo.OneRow", `{}`)
				rec = load(id)
				if err := s.Append(ctx, rec, started, completed); err != nil {
					t.Fatal(err)
				}
				completion = rec.WriteID
				rec = load(id)
			}
			before, err := r.Events(ctx, id)
			if err != nil || len(before) != 3 {
				t.Fatalf("fresh %v: events %+v, %v", fresh, before, err)
			}
			if err := s.Append(ctx, rec, lost); err != nil {
				t.Fatalf("fresh %v: lease_lost after the completion: %v", fresh, err)
			}
			got := rows(id)
			if len(got) != 2 || got[0].RowKey != layout.EventRowKey(2) || layout.StrProp(got[0], "WriteID") != completion ||
				!layout.TimeProp(got[0], layout.CompletedAtProp).Equal(before[2].Time) || got[1].RowKey != layout.EventRowKey(4) {
				t.Fatalf("fresh %v: event rows %+v, want started with CompletedAt (write %s), lease_lost", fresh, got, completion)
			}
			evs, err := r.Events(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 4 || !equalEvents(evs[:3], before) || evs[3].Kind != model.EventLeaseLost || evs[3].Seq != 4 {
				t.Fatalf("fresh %v: events %+v, want %+v, lease_lost 4", fresh, evs, before)
			}
			// A second lease_lost writes no second started row.
			if err := s.Append(ctx, rec, lost); err != nil || len(rows(id)) != 3 {
				t.Fatalf("fresh %v: a second lease_lost: %v, %d event rows, want 3", fresh, err, len(rows(id)))
			}
		}

		// A worker name past the text limit: the command row would give
		// back the name cut, so the started row holds the completion.
		long := strings.Repeat("w", layout.MaxTextUnits+1)
		id = testenv.Create(t, s, "demo.StartedRow", `{}`)
		if err := s.Append(ctx, load(id), model.Event{Kind: model.EventStarted, Attempt: 1, Worker: long}, model.Event{Kind: model.EventCompleted, Attempt: 1, Worker: long}); err != nil {
			t.Fatal(err)
		}
		if got := rows(id); len(got) != 1 || layout.TimeProp(got[0], layout.CompletedAtProp).IsZero() {
			t.Fatalf("a long worker name: event rows %+v, want a started row with CompletedAt", got)
		}
		if back, err := r.Events(ctx, id); err != nil || len(back) != 3 || back[2].Kind != model.EventCompleted || back[2].Seq != 3 {
			t.Fatalf("a long worker name: events %+v, %v", back, err)
		}

		for name, evs := range map[string][]model.Event{
			"a note on the completion": {started, {Kind: model.EventCompleted, Attempt: 1, Worker: "w1", Note: "done late"}},
			"another attempt's start":  {{Kind: model.EventStarted, Attempt: 2, Worker: "w1"}, completed},
			"another worker's start":   {{Kind: model.EventStarted, Attempt: 1, Worker: "w2"}, completed},
		} {
			id := testenv.Create(t, s, "demo.TwoRows", `{}`)
			if err := s.Append(ctx, load(id), evs...); err != nil {
				t.Fatal(err)
			}
			if got := rows(id); len(got) != 2 || layout.TimeProp(got[0], layout.CompletedAtProp) != (time.Time{}) {
				t.Fatalf("%s: %d event rows (%+v), want 2 without CompletedAt", name, len(got), got)
			}
			back, err := r.Events(ctx, id)
			if err != nil || len(back) != 3 || back[2].Kind != model.EventCompleted || back[2].Seq != 3 || back[2].Note != evs[1].Note {
				t.Fatalf("%s: events %+v, %v", name, back, err)
			}
		}

		// Started alone (a long handler), completed by a later append.
		id = testenv.Create(t, s, "demo.Later", `{}`)
		rec = load(id)
		if err := s.Append(ctx, rec, started); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, rec, completed); err != nil {
			t.Fatal(err)
		}
		if got := rows(id); len(got) != 2 {
			t.Fatalf("started and completed in two appends: %d event rows, want 2", len(got))
		}
	})
}

// equalEvents compares events field by field (times with Equal).
func equalEvents(a, b []model.Event) bool {
	return slices.EqualFunc(a, b, func(x, y model.Event) bool {
		tx, ty := x.Time, y.Time
		x.Time, y.Time = time.Time{}, time.Time{}
		return x == y && tx.Equal(ty)
	})
}
