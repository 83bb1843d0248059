package enqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

func TestPoisonRequeueDiscard(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		names := layout.Names{Prefix: env.Prefix}
		base := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
		var ids []string
		for i := 0; i < 5; i++ {
			typ := "demo.A"
			if i%2 == 1 {
				typ = "demo.B"
			}
			id := testenv.Create(t, s, typ, `{}`)
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
		// to a requeue. Without the mark of a failed requeue, another
		// requeue is in progress (it removes the entry and enqueues): this
		// one does neither. With the mark (the entry put back by a requeue
		// that could neither enqueue nor mark it), a requeue queues the
		// command without another requeued event.
		other := testenv.Create(t, s, "demo.A", `{}`)
		orec, _ := s.Load(ctx, other)
		if err := s.Poison(ctx, orec, model.PoisonEntry{Reason: "x"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, orec, model.Event{Kind: model.EventRequeued}); err != nil {
			t.Fatal(err)
		}
		if err := r.Requeue(ctx, other, "bob"); !errors.Is(err, model.ErrNotPoisoned) {
			t.Fatalf("requeue while another one is in progress: %v, want ErrNotPoisoned", err)
		}
		if _, err := r.GetPoison(ctx, other); err != nil {
			t.Fatalf("the entry of a requeue in progress was removed: %v", err)
		}
		if _, err := s.PoisonTable().Upsert(ctx, storage.Entity{PartitionKey: other, Properties: map[string]any{"CommandID": other, "Type": "demo.A", record.RequeueFailedProp: true}}, storage.Replace); err != nil {
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
		ran := testenv.Create(t, s, "demo.A", `{}`)
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
		moving := testenv.Create(t, s, "demo.A", `{}`)
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

func TestRequeueEnqueueFailureMarks(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		id := testenv.Create(t, s, "demo.Requeue", `{}`)
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

// TestConcurrentRequeueEnqueuesAtOnce: of two requeues of one poisoned
// command, the second loads it after the first wrote its requeued event
// and before the first removed the entry (held there by a gate on the
// store). The second must leave it to the first (ErrNotPoisoned), which
// enqueues the command visible at once; it used to remove the entry
// itself and enqueue a recovery message invisible for a lease, so the
// command started a lease late.
func TestConcurrentRequeueEnqueuesAtOnce(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := testenv.Ctx(t)
		names := layout.Names{Prefix: env.Prefix}
		var gated atomic.Bool
		blocked, release := make(chan struct{}), make(chan struct{})
		st := instrument.Wrap(env.Store, instrument.Hooks{Before: func(op instrument.Op) error {
			if op == instrument.TableDelete && gated.CompareAndSwap(true, false) {
				close(blocked)
				<-release
			}
			return nil
		}})
		r, err := read.Open(ctx, st, names, record.Options{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := r.Store
		id := testenv.Create(t, s, "demo.Requeue", `{}`)
		rec, _ := s.Load(ctx, id)
		if err := s.Poison(ctx, rec, model.PoisonEntry{Reason: "permanent"}); err != nil {
			t.Fatal(err)
		}
		queue := names.Queue(model.DefaultQueue)
		before := env.Store.Queued(t, queue)
		gated.Store(true)
		first := make(chan error, 1)
		go func() { first <- r.Requeue(ctx, id, "alice") }()
		select {
		case <-blocked: // the first wrote its requeued event and is about to remove the entry
		case err := <-first:
			t.Fatalf("the first requeue ended before removing the entry: %v", err)
		}
		second := r.Requeue(ctx, id, "bob")
		close(release)
		if err := <-first; err != nil {
			t.Fatalf("first requeue: %v (second: %v)", err, second)
		}
		if !errors.Is(second, model.ErrNotPoisoned) {
			t.Fatalf("second requeue: %v, want ErrNotPoisoned", second)
		}
		if n := env.Store.Queued(t, queue); n != before+1 {
			t.Fatalf("%d messages after the requeues, want %d", n, before+1)
		}
		if msgs := env.Store.Messages(t, queue); len(msgs) != 1 {
			t.Fatalf("%d visible messages after the requeues, want 1 (due at once)", len(msgs))
		}
		evs, _ := r.Events(ctx, id)
		n := 0
		for _, e := range evs {
			if e.Kind == model.EventRequeued {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d requeued events, want 1", n)
		}
	})
}

// TestRequeueAfterHalfDoneRequeue: a requeue that wrote its requeued event
// and then stopped (its process died) leaves the entry without the mark
// of a failed requeue; once that is older than record.RequeueInFlight, a
// requeue enqueues the command (a recovery message, delayed).
func TestRequeueAfterHalfDoneRequeue(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := testenv.Ctx(t)
		clock := testenv.NewClock(time.Now())
		r := testenv.OpenAt(t, env, clock)
		s := r.Store
		id := testenv.Create(t, s, "demo.Requeue", `{}`)
		rec, _ := s.Load(ctx, id)
		if err := s.Poison(ctx, rec, model.PoisonEntry{Reason: "permanent"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventRequeued, By: "alice"}); err != nil {
			t.Fatal(err)
		}
		if err := r.Requeue(ctx, id, "bob"); !errors.Is(err, model.ErrNotPoisoned) {
			t.Fatalf("requeue just after another's requeued event: %v, want ErrNotPoisoned", err)
		}
		clock.Add(record.RequeueInFlight + time.Second)
		if err := r.Requeue(ctx, id, "bob"); err != nil {
			t.Fatalf("requeue after a requeue that stopped half-way: %v", err)
		}
		if n := env.Store.Queued(t, layout.Names{Prefix: env.Prefix}.Queue(model.DefaultQueue)); n != 1 {
			t.Fatalf("%d messages, want 1", n)
		}
	})
}
