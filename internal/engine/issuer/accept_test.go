package issuer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/reconcile"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

// Requests of the Azure driver that the fault proxy refuses.
var (
	enqueueReq = faultproxy.Match{Method: "POST", Path: "/messages"}
	markerReq  = faultproxy.Match{Path: layout.UnqueuedPartition}
)

// proxied opens an Azure store on Azurite through an HTTP fault proxy, with
// quick transport retries (so a refused request fails in milliseconds), and
// a direct store for looking at what landed.
func proxied(t *testing.T) (through, direct storage.Store, px *faultproxy.HTTP) {
	t.Helper()
	conn := azurite.ConnectionString(t)
	px = faultproxy.NewHTTP(t, conn)
	open := func(cs string) storage.Store {
		st, err := azure.Open(context.Background(), azure.Config{ConnectionString: cs,
			Retry: policy.RetryOptions{MaxRetries: 2, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	return open(px.ConnectionString), open(conn), px
}

// proxiedIssuer is an Issuer without background enqueue retries on a
// store behind the fault proxy (proxied), with a fresh prefix.
func proxiedIssuer(t *testing.T) (is *issuer.Issuer, direct storage.Store, px *faultproxy.HTTP, prefix string) {
	t.Helper()
	through, direct, px := proxied(t)
	prefix = "t" + uuid.NewString()[:8]
	is, err := issuer.NewIssuer(through, issuer.IssuerOptions{Prefix: prefix, EnqueueRetry: -1})
	if err != nil {
		t.Fatal(err)
	}
	return is, direct, px, prefix
}

func messages(t *testing.T, st storage.Store, queue string) []storage.Message {
	t.Helper()
	q, err := st.Queue(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Peek(context.Background(), storage.MaxDequeue)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// queued counts the messages of queue, visible or delayed.
func queued(t *testing.T, st storage.Store, queue string) int {
	t.Helper()
	q, err := st.Queue(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	n, err := q.ApproximateCount(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func hasMarker(t *testing.T, st storage.Store, prefix, id string) bool {
	t.Helper()
	tbl, err := st.Table(context.Background(), layout.Names{Prefix: prefix}.CommandsTable())
	if err != nil {
		t.Fatal(err)
	}
	_, err = tbl.Get(context.Background(), layout.UnqueuedPartition, id)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// TestNotAcceptedWhenNeitherEnqueuedNorMarked: storage refuses the enqueue
// and the marker after the issue batch landed. The command is stored but
// nothing would ever queue it, so Issue must not report it accepted
// (ErrEnqueueFailed, which the API answers 202): it returns ErrNotAccepted.
// The client's re-issue with the same ID queues it.
func TestNotAcceptedWhenNeitherEnqueuedNorMarked(t *testing.T) {
	t.Parallel()
	is, direct, px, prefix := proxiedIssuer(t)
	ctx := context.Background()
	rq, rm := px.Add(enqueueReq, faultproxy.Refuse, -1), px.Add(markerReq, faultproxy.Refuse, -1)
	res, err := is.Issue(ctx, chargeCard{"c1", 100})
	if !errors.Is(err, model.ErrNotAccepted) || errors.Is(err, model.ErrEnqueueFailed) || res.ID == "" {
		t.Fatalf("Issue with enqueue and marker refused: %v (result %+v), want ErrNotAccepted and not ErrEnqueueFailed", err, res)
	}
	if rq.Hits() != 1 || rm.Hits() == 0 {
		t.Fatalf("the proxy refused %d enqueues and %d marker writes; want one enqueue: it is sent without transport retries", rq.Hits(), rm.Hits())
	}
	r, err := read.Open(ctx, direct, layout.Names{Prefix: prefix}, record.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := r.Get(ctx, res.ID); err != nil || st.State != model.StatePending {
		t.Fatalf("stored command %+v %v", st, err)
	}
	if n := len(messages(t, direct, prefix+"-commands")); n != 0 || hasMarker(t, direct, prefix, res.ID) {
		t.Fatalf("%d messages, marker %v: the refused requests landed", n, hasMarker(t, direct, prefix, res.ID))
	}

	// Storage is back; the client retries with the same ID.
	px.Remove(rq)
	px.Remove(rm)
	again, err := is.Issue(ctx, chargeCard{"c1", 100}, issuer.WithID(res.ID))
	if err != nil || !again.Existing || again.ID != res.ID {
		t.Fatalf("re-issue: %+v %v", again, err)
	}
	if vis, all := len(messages(t, direct, prefix+"-commands")), queued(t, direct, prefix+"-commands"); vis != 0 || all != 1 {
		t.Fatalf("after the re-issue: %d messages visible of %d, want one, delayed (a recovery)", vis, all)
	}
}

// TestIssueBatchRetriedAfterLostAnswer: the issue batch lands but its answer
// is lost (the connection reset after the service answered), so the
// driver's transport retry sends it again and meets the row its first try
// wrote. That is this issue's own write, not an existing command: Issue
// answers a new command (not Existing) and enqueues it at once, as after
// an answered batch, not as a recovery (no requeued event, no delayed
// message).
func TestIssueBatchRetriedAfterLostAnswer(t *testing.T) {
	t.Parallel()
	is, direct, px, prefix := proxiedIssuer(t)
	ctx := context.Background()
	lost := px.Add(faultproxy.Match{Method: "POST", Path: "$batch", Body: `"` + layout.CreatedInRowProp + `"`}, faultproxy.LoseAnswer, 1)
	res, err := is.Issue(ctx, chargeCard{"c1", 100})
	if err != nil || res.Existing || res.ID == "" {
		t.Fatalf("Issue with the batch's answer lost: %+v %v, want a new command", res, err)
	}
	if lost.Hits() != 1 || len(lost.Answers()) != 1 || lost.Answers()[0] != 202 {
		t.Fatalf("the proxy lost %d answers %v, want one, of a batch that landed (202)", lost.Hits(), lost.Answers())
	}
	if vis, all := len(messages(t, direct, prefix+"-commands")), queued(t, direct, prefix+"-commands"); vis != 1 || all != 1 {
		t.Fatalf("%d messages visible of %d, want one, at once (not a delayed recovery)", vis, all)
	}
	r, err := read.Open(ctx, direct, layout.Names{Prefix: prefix}, record.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := r.Events(ctx, res.ID)
	if err != nil || len(evs) != 1 || evs[0].Kind != model.EventCreated {
		t.Fatalf("events %+v %v, want the created event only", evs, err)
	}

	// A re-issue of the same ID is still an existing command.
	again, err := is.Issue(ctx, chargeCard{"c1", 100}, issuer.WithID(res.ID))
	if err != nil || !again.Existing || again.ID != res.ID {
		t.Fatalf("re-issue: %+v %v, want the existing command", again, err)
	}
}

// TestEnqueueRetriedInBackground: while the process lives, the Issuer
// itself queues a command whose enqueue failed once storage answers again
// (within seconds, not at the reconciler's next pass), and removes the
// marker it wrote; a command it could not even mark is marked as soon as
// the table answers.
func TestEnqueueRetriedInBackground(t *testing.T) {
	t.Parallel()
	through, direct, px := proxied(t)
	prefix := "t" + uuid.NewString()[:8]
	n := &notes{}
	is, err := issuer.NewIssuer(through, issuer.IssuerOptions{Prefix: prefix, Wake: n.notify, WakeAt: n.notifyAt, EnqueueRetry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = is.Close() })
	ctx := context.Background()
	rq, rm := px.Add(enqueueReq, faultproxy.Refuse, -1), px.Add(markerReq, faultproxy.Refuse, -1)
	unmarked, err := is.Issue(ctx, chargeCard{"c1", 1})
	if !errors.Is(err, model.ErrNotAccepted) {
		t.Fatalf("issue 1: %v", err)
	}
	px.Remove(rm) // the table answers again, the queue does not
	marked, err := is.Issue(ctx, chargeCard{"c2", 2})
	if !errors.Is(err, model.ErrEnqueueFailed) || errors.Is(err, model.ErrNotAccepted) {
		t.Fatalf("issue 2: %v", err)
	}
	waitFor(t, 10*time.Second, "the background retry to mark command 1", func() bool { return hasMarker(t, direct, prefix, unmarked.ID) })
	if !hasMarker(t, direct, prefix, marked.ID) || is.PendingEnqueues() != 2 {
		t.Fatalf("marker of command 2 %v, pending %d", hasMarker(t, direct, prefix, marked.ID), is.PendingEnqueues())
	}
	px.Remove(rq)
	waitFor(t, 10*time.Second, "the background retries to queue both", func() bool { return is.PendingEnqueues() == 0 })
	if n := queued(t, direct, prefix+"-commands"); n != 2 {
		t.Fatalf("%d messages after the retries, want 2", n)
	}
	for _, id := range []string{unmarked.ID, marked.ID} {
		if hasMarker(t, direct, prefix, id) {
			t.Fatalf("marker of %s left after it was queued", id)
		}
	}
	if got := n.get(); len(got) != 2 {
		t.Fatalf("Notify calls %v, want one per queued command", got)
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// TestReconcileKeepsMarkerWhenEnqueueFails: a reconciler pass whose enqueue
// fails leaves the marker (claimed), so a later pass queues the command; it
// is never stranded by a pass that removed the marker first.
func TestReconcileKeepsMarkerWhenEnqueueFails(t *testing.T) {
	t.Parallel()
	through, direct, px := proxied(t)
	prefix := "t" + uuid.NewString()[:8]
	ctx := context.Background()
	s, err := record.Open(ctx, direct, layout.Names{Prefix: prefix}, record.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	if err := s.Create(ctx, record.NewCommand{ID: id, Type: "billing.ChargeCard", Queue: "commands"}); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkUnqueued(ctx, id, "commands"); err != nil {
		t.Fatal(err)
	}
	// The queue refuses, and so does any attempt to write the marker anew.
	rq := px.Add(enqueueReq, faultproxy.Refuse, -1)
	rm := px.Add(faultproxy.Match{Method: "PUT", Path: layout.UnqueuedPartition}, faultproxy.Refuse, -1)
	opts := reconcile.Options{MarkerGrace: -1}
	rep, err := reconcilePass(t, ctx, through, prefix, opts, nil)
	if err == nil || rep.Enqueued != 0 || rq.Hits() == 0 {
		t.Fatalf("pass with the queue refusing: %+v %v", rep, err)
	}
	if !hasMarker(t, direct, prefix, id) {
		t.Fatal("the failed pass removed the marker: nothing would ever queue the command")
	}
	px.Remove(rq)
	px.Remove(rm)
	rep, err = reconcilePass(t, ctx, through, prefix, opts, nil)
	if err != nil || rep.Enqueued != 1 {
		t.Fatalf("second pass: %+v %v", rep, err)
	}
	if hasMarker(t, direct, prefix, id) || queued(t, direct, prefix+"-commands") != 1 {
		t.Fatalf("after the second pass: marker %v, %d messages", hasMarker(t, direct, prefix, id), queued(t, direct, prefix+"-commands"))
	}
}
