package issuer_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// On a store implementing storage.Combiner (embedded), issuing is one
// durable commit: the issue batch and the enqueue together.
func TestIssueCombinedIsOneCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var notified []string
	iss, err := issuer.NewIssuer(st, issuer.IssuerOptions{Prefix: "comb", Wake: func(q string) { notified = append(notified, q) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := iss.Issue(ctx, chargeCard{Customer: "a", Cents: 1}); err != nil { // creates the queue and tables
		t.Fatal(err)
	}
	before := st.Stats().Commits
	res, err := iss.Issue(ctx, chargeCard{Customer: "b", Cents: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Stats().Commits - before; got != 1 {
		t.Errorf("issue took %d commits, want 1", got)
	}
	if len(notified) != 2 || notified[1] != "commands" {
		t.Errorf("Notify calls %q, want two for queue commands", notified)
	}
	names := layout.Names{Prefix: "comb"}
	s, err := record.Open(ctx, st, names, record.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.Load(ctx, res.ID)
	if err != nil || rec.Status.State != model.StatePending || string(rec.Params) != `{"customer":"b","cents":2}` {
		t.Fatalf("Load: %+v, %v; want pending with the params", rec, err)
	}
	q, err := st.Queue(ctx, names.Queue("commands"))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Dequeue(ctx, 32, time.Minute)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("Dequeue: %d messages, %v; want 2", len(msgs), err)
	}
	env, err := layout.ParseEnvelope(msgs[1].Text)
	if err != nil || env.ID != res.ID || env.Type != "billing.ChargeCard" {
		t.Errorf("second message %q (%v), want the envelope of %s", msgs[1].Text, err, res.ID)
	}
	// Re-issuing the same ID and params stores and enqueues nothing new.
	again, err := iss.Issue(ctx, chargeCard{Customer: "b", Cents: 2}, issuer.WithID(res.ID))
	if err != nil || !again.Existing {
		t.Fatalf("re-issue: %+v, %v; want Existing", again, err)
	}
	if n, _ := q.ApproximateCount(ctx); n != 2 {
		t.Errorf("queue holds %d messages after the idempotent re-issue, want 2", n)
	}
}
