package record_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, env testenv.Env) (*enqueue.Reader, *record.Store) {
	t.Helper()
	r, err := enqueue.OpenReader(ctxT(t), env.Store, layout.Names{Prefix: env.Prefix}, record.Options{}, nil)
	if err != nil {
		t.Fatalf("OpenReader: %v", err)
	}
	return r, r.Store
}

func create(t *testing.T, s *record.Store, typ, params string) string {
	t.Helper()
	id := uuid.NewString()
	if err := s.Create(ctxT(t), record.NewCommand{ID: id, Type: typ, Params: []byte(params), CorrelationID: "corr-1", Queue: model.DefaultQueue}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return id
}

func TestCreateLoad(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := open(t, env)
		ctx := ctxT(t)
		env.Store.Reset()
		id := create(t, s, "demo.Create", `{"a":1}`)
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
		_, s := open(t, env)
		ctx := ctxT(t)
		id := create(t, s, "demo.Big", params)
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
		_, s := open(t, env)
		ctx := ctxT(t)
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

func TestAppendConflict(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := open(t, env)
		ctx := ctxT(t)
		id := create(t, s, "demo.Append", `{}`)
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
		r, s := open(t, env)
		ctx := ctxT(t)
		id := create(t, s, "demo.Steps", `{}`)
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

func TestPoisonRequeueDiscard(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := open(t, env)
		ctx := ctxT(t)
		names := layout.Names{Prefix: env.Prefix}
		base := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
		var ids []string
		for i := 0; i < 5; i++ {
			typ := "demo.A"
			if i%2 == 1 {
				typ = "demo.B"
			}
			id := create(t, s, typ, `{}`)
			ids = append(ids, id)
			rec, err := s.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			env.Store.Reset()
			err = s.Poison(ctx, rec, model.PoisonEntry{DequeueCount: 6, Reason: "ceiling", PoisonedAt: base.Add(time.Duration(i) * time.Minute), Worker: "w"},
				model.Event{Kind: model.EventStarted, Attempt: 6}, model.Event{Kind: model.EventFailed, Attempt: 6, Error: fmt.Sprint("err ", i)})
			if err != nil {
				t.Fatal(err)
			}
			if c := env.Store.Counts(); c["Upsert"] != 1 || c["Batch"] != 1 || env.Store.Total() != 2 {
				t.Fatalf("Poison cost %s, want Upsert=1 Batch=1", env.Store)
			}
			if rec.Status.State != model.StatePoisoned || rec.LastError != fmt.Sprint("err ", i) {
				t.Fatalf("poisoned record %+v", rec)
			}
		}
		// Newest first; type filter; paging.
		page, err := r.ListPoison(ctx, model.PoisonQuery{})
		if err != nil || len(page.Entries) != 5 || page.Continuation != "" {
			t.Fatalf("list all: %+v %v", page, err)
		}
		for i, e := range page.Entries {
			want := ids[4-i]
			if e.CommandID != want || e.DequeueCount != 6 || e.Reason != "ceiling" || e.Queue != "commands" || e.LastError != fmt.Sprint("err ", 4-i) {
				t.Fatalf("entry %d: %+v, want command %s", i, e, want)
			}
		}
		var got []string
		q := model.PoisonQuery{Type: "demo.A", Limit: 2}
		for pages := 0; ; pages++ {
			p, err := r.ListPoison(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Entries) > 2 || pages > 3 {
				t.Fatalf("page too large or too many pages: %+v", p)
			}
			for _, e := range p.Entries {
				if e.Type != "demo.A" {
					t.Fatalf("filter leaked %+v", e)
				}
				got = append(got, e.CommandID)
			}
			if p.Continuation == "" {
				break
			}
			q.Continuation = p.Continuation
		}
		if strings.Join(got, ",") != strings.Join([]string{ids[4], ids[2], ids[0]}, ",") {
			t.Fatalf("paged demo.A: %v", got)
		}
		if _, err := r.ListPoison(ctx, model.PoisonQuery{Continuation: "nope"}); !errors.Is(err, model.ErrInvalidContinuation) {
			t.Fatalf("bad continuation: %v", err)
		}
		if _, err := r.ListPoison(ctx, model.PoisonQuery{Limit: 5000}); !errors.Is(err, storage.ErrInvalidArgument) {
			t.Fatalf("bad limit: %v", err)
		}
		entry, err := r.GetPoison(ctx, ids[1])
		if err != nil || entry.Type != "demo.B" || !entry.PoisonedAt.Equal(base.Add(time.Minute)) || entry.Worker != "w" {
			t.Fatalf("GetPoison: %+v %v", entry, err)
		}

		// Requeue: pending, requeued event, new message, entry gone.
		queueName := names.Queue("commands")
		before := len(env.Store.Messages(t, queueName))
		if err := r.Requeue(ctx, ids[1], "alice"); err != nil {
			t.Fatal(err)
		}
		st, _ := r.Get(ctx, ids[1])
		if st.State != model.StatePending || st.Attempts != 0 || st.LastError != "" || st.Worker != "w" {
			t.Fatalf("after requeue: %+v", st)
		}
		evs, _ := r.Events(ctx, ids[1])
		if last := evs[len(evs)-1]; last.Kind != model.EventRequeued || last.By != "alice" || last.Worker != "" {
			t.Fatalf("last event %+v", last)
		}
		msgs := env.Store.Messages(t, queueName)
		if len(msgs) != before+1 || msgs[len(msgs)-1].Text != (layout.Envelope{ID: ids[1], Type: "demo.B"}).Marshal() {
			t.Fatalf("messages after requeue: %+v", msgs)
		}
		if _, err := r.GetPoison(ctx, ids[1]); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("entry after requeue: %v", err)
		}
		if err := r.Requeue(ctx, ids[1], "alice"); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("second requeue: %v", err)
		}

		// Discard.
		if err := r.Discard(ctx, ids[3], "bob"); err != nil {
			t.Fatal(err)
		}
		if st, _ := r.Get(ctx, ids[3]); st.State != model.StateDiscarded {
			t.Fatalf("after discard: %+v", st)
		}
		if _, err := r.GetPoison(ctx, ids[3]); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("entry after discard: %v", err)
		}
		page, _ = r.ListPoison(ctx, model.PoisonQuery{})
		if len(page.Entries) != 3 {
			t.Fatalf("%d entries left, want 3", len(page.Entries))
		}

		// The entry of a command requeued and never started since is left
		// to a requeue (one may be in progress: removing the entry is its
		// claim), which queues the command without another requeued event.
		other := create(t, s, "demo.A", `{}`)
		orec, _ := s.Load(ctx, other)
		if err := s.Poison(ctx, orec, model.PoisonEntry{Reason: "x"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, orec, model.Event{Kind: model.EventRequeued}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PoisonTable().Upsert(ctx, storage.Entity{PartitionKey: other, Properties: map[string]any{"CommandID": other, "Type": "demo.A"}}, storage.Replace); err != nil {
			t.Fatal(err)
		}
		if err := r.Discard(ctx, other, "bob"); !errors.Is(err, model.ErrNotPoisoned) {
			t.Fatalf("discard of pending command: %v", err)
		}
		if _, err := r.GetPoison(ctx, other); err != nil {
			t.Fatalf("entry of a requeued command removed by a discard: %v", err)
		}
		if err := r.Requeue(ctx, other, "bob"); err != nil {
			t.Fatalf("requeue of a requeued command with its entry: %v", err)
		}
		if _, err := r.GetPoison(ctx, other); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("entry kept after the requeue: %v", err)
		}
		if evs, _ := r.Events(ctx, other); evs[len(evs)-1].Kind != model.EventRequeued || evs[len(evs)-2].Kind != model.EventPoisoned {
			t.Fatalf("events %+v, want one requeued event after poisoned", evs)
		}

		// A stale entry of a command that ran since is cleaned up, not
		// acted on.
		ran := create(t, s, "demo.A", `{}`)
		rrec, _ := s.Load(ctx, ran)
		if err := s.Append(ctx, rrec, model.Event{Kind: model.EventStarted, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PoisonTable().Upsert(ctx, storage.Entity{PartitionKey: ran, Properties: map[string]any{"CommandID": ran, "Type": "demo.A"}}, storage.Replace); err != nil {
			t.Fatal(err)
		}
		if err := r.Discard(ctx, ran, "bob"); !errors.Is(err, model.ErrNotPoisoned) {
			t.Fatalf("discard of running command: %v", err)
		}
		if _, err := r.GetPoison(ctx, ran); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("stale entry kept: %v", err)
		}

		// A move in progress: Poison has written the entry of attempt 1 of
		// a running command, not yet its poisoned event. A requeue or a
		// discard then is refused and keeps the entry (removing it would
		// leave the command poisoned with none); once the move ends, the
		// requeue works.
		moving := create(t, s, "demo.A", `{}`)
		mrec, _ := s.Load(ctx, moving)
		if err := s.Append(ctx, mrec, model.Event{Kind: model.EventStarted, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PoisonTable().Upsert(ctx, storage.Entity{PartitionKey: moving, Properties: map[string]any{"CommandID": moving, "Type": "demo.A", "Attempts": int32(1)}}, storage.Replace); err != nil {
			t.Fatal(err)
		}
		for _, act := range []func(context.Context, string, string) error{r.Requeue, r.Discard} {
			if err := act(ctx, moving, "bob"); !errors.Is(err, model.ErrNotPoisoned) || !strings.Contains(err.Error(), "being moved") {
				t.Fatalf("requeue or discard during the move: %v, want ErrNotPoisoned (being moved)", err)
			}
			if _, err := r.GetPoison(ctx, moving); err != nil {
				t.Fatalf("the entry of a move in progress was removed: %v", err)
			}
		}
		if err := s.Poison(ctx, mrec, model.PoisonEntry{DequeueCount: 1, Reason: "permanent", Worker: "w"}, model.Event{Kind: model.EventFailed, Attempt: 1, Error: "no"}); err != nil {
			t.Fatal(err)
		}
		if err := r.Requeue(ctx, moving, "bob"); err != nil {
			t.Fatalf("requeue once the move ended: %v", err)
		}
	})
}

func TestPoisonConflictRemovesEntry(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := open(t, env)
		ctx := ctxT(t)
		id := create(t, s, "demo.Race", `{}`)
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
		r, s := open(t, env)
		ctx := ctxT(t)
		id := create(t, s, "demo.Long", `{}`)
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

func TestRequeueEnqueueFailureMarks(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := open(t, env)
		ctx := ctxT(t)
		id := create(t, s, "demo.Requeue", `{}`)
		rec, _ := s.Load(ctx, id)
		if err := s.Poison(ctx, rec, model.PoisonEntry{Reason: "permanent"}); err != nil {
			t.Fatal(err)
		}
		env.Store.FailEnqueue.Store(true)
		err := r.Requeue(ctx, id, "carol")
		env.Store.FailEnqueue.Store(false)
		if !errors.Is(err, testenv.ErrInjected) || !strings.Contains(err.Error(), "reconciler") {
			t.Fatalf("Requeue with failing enqueue: %v", err)
		}
		if st, _ := r.Get(ctx, id); st.State != model.StatePending {
			t.Fatalf("status %s, want pending", st.State)
		}
		if m, err := s.CommandsTable().Get(ctx, layout.UnqueuedPartition, id); err != nil || m.Properties["Queue"] != "commands" {
			t.Fatalf("marker %+v %v", m, err)
		}
		if _, err := r.GetPoison(ctx, id); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("poison entry kept: %v", err)
		}
	})
}

// TestEventTimesNeverGoBack: the history reads in order even when an event
// carries an older time than the one before it (a skewed worker clock, or a
// poisoned event whose time was taken before the failed event's).
func TestEventTimesNeverGoBack(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := open(t, env)
		ctx := ctxT(t)
		id := create(t, s, "demo.Times", `{}`)
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
		r, s := open(t, env)
		ctx := ctxT(t)
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
		m := rows()
		if len(m) != 2 {
			t.Fatalf("rows after Create: %v, want a:cmd and e:0000000001", keys(m))
		}
		row, ok := m[layout.RowCommand]
		if !ok || m[layout.EventRowKey(1)].RowKey == "" {
			t.Fatalf("rows after Create: %v", keys(m))
		}
		want := map[string]any{
			"Type": "demo.Layout", "Params": `{"k":"v"}`, "CorrelationID": "c-9", "Queue": "slow",
			"Status": "pending", "Attempts": int32(0), "Step": int32(0), "LastError": "", "Worker": "", "EventSeq": int64(1),
		}
		for k, v := range want {
			if row.Properties[k] != v {
				t.Fatalf("a:cmd %s = %#v, want %#v (all: %v)", k, row.Properties[k], v, row.Properties)
			}
		}
		if w, _ := row.Properties["WriteID"].(string); len(w) != 16 || m[layout.EventRowKey(1)].Properties["WriteID"] != w {
			t.Fatalf("write ID of the issue batch: a:cmd %#v, event %#v", row.Properties["WriteID"], m[layout.EventRowKey(1)].Properties["WriteID"])
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
		if len(m) != 6 {
			t.Fatalf("rows after two appends: %v, want a:cmd and 5 events", keys(m))
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
		_, s := open(t, env)
		ctx := ctxT(t)
		id := create(t, s, "demo.BigErr", params)
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

// TestListCommandsNewestAndSummary: a listing newest first, since a time,
// with the counts per state and the outcomes per minute read from the
// events, on both drivers.
func TestListCommandsNewestAndSummary(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		base := time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
		var now time.Time
		s, err := record.Open(ctxT(t), env.Store, layout.Names{Prefix: env.Prefix}, record.Options{Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		at := func(min int) { now = base.Add(time.Duration(min)*time.Minute + 5*time.Second) }
		mk := func(typ string, min int, evs ...model.Event) string {
			t.Helper()
			at(min)
			id := create(t, s, typ, `{}`)
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
		page, err := s.ListCommands(ctx, model.CommandQuery{Since: since, Newest: true, Summary: true, Limit: 2})
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
		if sum.Rows < 5+12 || env.Store.Counts()["Query"] != 1 {
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
		next, err := s.ListCommands(ctx, model.CommandQuery{Since: since, Newest: true, Limit: 2, Continuation: page.Continuation})
		if err != nil || len(next.Commands) != 2 || next.Commands[0].ID != retrying || next.Commands[1].ID != done || next.Continuation != "" {
			t.Fatalf("second page: %+v %v", next, err)
		}
		// A type and a state filter: the counts keep every state of the type.
		b, err := s.ListCommands(ctx, model.CommandQuery{Since: since, Newest: true, Summary: true, Type: "B", State: model.StatePending})
		if err != nil || len(b.Commands) != 0 || b.Summary.Counts[model.StateCompleted] != 1 || len(b.Summary.Counts) != 1 {
			t.Fatalf("type B, pending: %+v %v", b, err)
		}
		if b.Summary.Minutes[3].Failed != 1 || b.Summary.Minutes[1].Completed != 0 {
			t.Fatalf("type B minutes: %+v", b.Summary.Minutes)
		}
		// A scan limit stops early and says so.
		p, err := s.ListCommands(ctx, model.CommandQuery{Summary: true, ScanLimit: 1})
		if err != nil || !p.Summary.Partial || p.Summary.Rows != 1 {
			t.Fatalf("scan limit: %+v %v", p.Summary, err)
		}
		if _, err := s.ListCommands(ctx, model.CommandQuery{Newest: true, Continuation: "x"}); !errors.Is(err, model.ErrInvalidContinuation) {
			t.Fatalf("bad continuation: %v", err)
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
		s, err := record.Open(ctxT(t), env.Store, layout.Names{Prefix: env.Prefix}, record.Options{Changed: func(st model.Status, evs []model.Event) {
			got = append(got, change{st, evs})
		}})
		if err != nil {
			t.Fatal(err)
		}
		id := create(t, s, "A", `{}`)
		rec, err := s.Load(ctxT(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctxT(t), rec, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventStepCompleted, Attempt: 1, Step: 1}); err != nil {
			t.Fatal(err)
		}
		if err := s.Poison(ctxT(t), rec, model.PoisonEntry{Reason: "r", DequeueCount: 1}); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].st.State != model.StateRunning || len(got[0].evs) != 2 || got[0].evs[0].Seq != 2 || got[0].evs[1].Seq != 3 ||
			got[1].st.State != model.StatePoisoned || len(got[1].evs) != 1 || got[1].evs[0].Kind != model.EventPoisoned || got[1].evs[0].Seq != 4 {
			t.Fatalf("changes: %+v", got)
		}
		// A failed append reports nothing.
		stale := *rec
		stale.ETag = "W/\"stale\""
		if err := s.Append(ctxT(t), &stale, model.Event{Kind: model.EventStarted, Attempt: 2}); err == nil {
			t.Fatal("an append on a stale ETag landed")
		}
		if len(got) != 2 {
			t.Fatalf("a failed append was reported: %+v", got[2:])
		}
	})
}
