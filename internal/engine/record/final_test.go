package record_test

import (
	"errors"
	"testing"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// TestAppendRefusedOnFinal: the writer refuses an attempt's event on a
// command whose loaded projection is final — the defence behind the
// processor's rule that a superseded attempt writes nothing — and writes
// nothing for it (no event, no projection change, no poison entry). An
// operator's requeued and discarded on a poisoned command, and the
// completing attempt's own lease_lost, stay allowed.
func TestAppendRefusedOnFinal(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		r, s := testenv.OpenReader(t, env)
		ctx := testenv.Ctx(t)
		id := testenv.Create(t, s, "demo.Final", `{}`)
		rec, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 1, Worker: "w1"},
			model.Event{Kind: model.EventCompleted, Attempt: 1, Worker: "w1"}); err != nil {
			t.Fatal(err)
		}
		before := *rec
		refused := []model.Event{
			{Kind: model.EventStarted, Attempt: 2, Worker: "w2"},
			{Kind: model.EventStepCompleted, Attempt: 2, Worker: "w2", Step: 1},
			{Kind: model.EventFailed, Attempt: 2, Worker: "w2", Error: "boom"},
			{Kind: model.EventCompleted, Attempt: 2, Worker: "w2"},
			{Kind: model.EventLeaseLost, Attempt: 2, Worker: "w2"},
			{Kind: model.EventLeaseLost, Attempt: 1, Worker: "w2"}, // not the completing worker
			{Kind: model.EventRequeued, By: "op"},                  // requeue is for poisoned commands
			{Kind: model.EventDiscarded, By: "op"},
		}
		env.Store.Reset()
		for _, e := range refused {
			if err := s.Append(ctx, rec, e); !errors.Is(err, record.ErrFinal) {
				t.Fatalf("Append %s (attempt %d, %s) on a completed command: %v, want ErrFinal", e.Kind, e.Attempt, e.Worker, err)
			}
		}
		if err := s.Poison(ctx, rec, model.PoisonEntry{DequeueCount: 2, Reason: "ceiling", Worker: "w2"}); !errors.Is(err, record.ErrFinal) {
			t.Fatalf("Poison of a completed command: %v, want ErrFinal", err)
		}
		if env.Store.Total() != 0 {
			t.Fatalf("refused writes touched storage: %s", env.Store)
		}
		if rec.ETag != before.ETag || rec.EventSeq != before.EventSeq || rec.Status != before.Status {
			t.Fatalf("a refused Append changed the record: %+v, was %+v", rec, before)
		}
		if _, err := r.GetPoison(ctx, id); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("poison entry of a completed command: %v, want none", err)
		}
		// The completing attempt's own lease_lost (its lease ended before
		// its message was deleted) is written.
		if err := s.Append(ctx, rec, model.Event{Kind: model.EventLeaseLost, Attempt: 1, Worker: "w1", Note: "after completion"}); err != nil {
			t.Fatalf("lease_lost of the completing attempt: %v", err)
		}
		evs, err := r.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if k := kindsOf(evs); len(k) != 4 || k[3] != model.EventLeaseLost || rec.Status.State != model.StateCompleted {
			t.Fatalf("events %v, status %s", k, rec.Status.State)
		}

		// A poisoned command takes an operator's requeued, not attempt events.
		id2 := testenv.Create(t, s, "demo.Final", `{"n":2}`)
		rec2, err := s.Load(ctx, id2)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Poison(ctx, rec2, model.PoisonEntry{DequeueCount: 6, Reason: "ceiling", Worker: "w1"}); err != nil {
			t.Fatal(err)
		}
		for _, e := range []model.Event{{Kind: model.EventStarted, Attempt: 7, Worker: "w1"}, {Kind: model.EventFailed, Attempt: 6, Worker: "w1"}, {Kind: model.EventPoisoned, Attempt: 7, Worker: "w1"}} {
			if err := s.Append(ctx, rec2, e); !errors.Is(err, record.ErrFinal) {
				t.Fatalf("Append %s on a poisoned command: %v, want ErrFinal", e.Kind, err)
			}
		}
		if err := r.Requeue(ctx, id2, "op"); err != nil {
			t.Fatalf("requeue: %v", err)
		}
		// And a discarded command takes nothing.
		id3 := testenv.Create(t, s, "demo.Final", `{"n":3}`)
		rec3, _ := s.Load(ctx, id3)
		if err := s.Poison(ctx, rec3, model.PoisonEntry{DequeueCount: 6, Reason: "ceiling", Worker: "w1"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, rec3, model.Event{Kind: model.EventDiscarded, By: "op"}); err != nil {
			t.Fatalf("discard of a poisoned command: %v", err)
		}
		if err := s.Append(ctx, rec3, model.Event{Kind: model.EventRequeued, By: "op"}); !errors.Is(err, record.ErrFinal) {
			t.Fatalf("requeue of a discarded command: %v, want ErrFinal", err)
		}
	})
}

func kindsOf(evs []model.Event) []model.EventKind {
	out := make([]model.EventKind, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}
