package faultproxy_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

func open(t *testing.T, conn string) storage.Store {
	t.Helper()
	st, err := azure.Open(context.Background(), azure.Config{ConnectionString: conn,
		Retry: policy.RetryOptions{MaxRetries: 2, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond, TryTimeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func queue(t *testing.T, st storage.Store, name string) storage.Queue {
	t.Helper()
	q, err := st.Queue(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// behindHTTP returns an HTTP fault proxy in front of Azurite (its bursts
// seeded with seed) and a new queue reached through it and directly.
func behindHTTP(t *testing.T, seed uint64) (px *faultproxy.HTTP, through, direct storage.Queue) {
	t.Helper()
	conn := azurite.ConnectionString(t)
	px, err := faultproxy.StartHTTP(conn, faultproxy.HTTPOptions{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	name := "fp" + uuid.NewString()[:8]
	return px, queue(t, open(t, px.ConnectionString), name), queue(t, open(t, conn), name)
}

// counter returns a call that asks q for its count within d.
func counter(q storage.Queue) func(d time.Duration) error {
	return func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := q.ApproximateCount(ctx)
		return err
	}
}

// TestHTTPRules: Refuse loses the request (nothing lands); LoseAnswer lets
// it land and loses the answer, so the driver's transport retry lands a
// second copy of a non-idempotent request.
func TestHTTPRules(t *testing.T) {
	t.Parallel()
	px, through, direct := behindHTTP(t, 0)
	ctx := context.Background()

	r := px.Add(faultproxy.Match{Method: "POST", Path: "/messages"}, faultproxy.Refuse, -1)
	if _, err := through.Enqueue(ctx, "refused", 0, 0); err == nil {
		t.Fatal("enqueue through a refusing rule succeeded")
	}
	if n, _ := direct.ApproximateCount(ctx); n != 0 || r.Hits() != 3 {
		t.Fatalf("refused enqueue: %d messages landed, rule hit %d times (want 0 and 3 tries)", n, r.Hits())
	}
	px.Remove(r)

	l := px.Add(faultproxy.Match{Method: "POST", Path: "/messages"}, faultproxy.LoseAnswer, 1)
	if _, err := through.Enqueue(ctx, "twice", 0, 0); err != nil {
		t.Fatalf("enqueue whose first answer was lost: %v (the retry should succeed)", err)
	}
	if n, _ := direct.ApproximateCount(ctx); n != 2 || l.Hits() != 1 || len(l.Answers()) != 1 || l.Answers()[0] != 201 {
		t.Fatalf("lost answer: %d messages (want 2: the first try landed), hits %d, hidden answers %v", n, l.Hits(), l.Answers())
	}
}

// TestNet: Refuse makes calls fail at once, BlackHole makes them hang until
// their deadline, Restore brings both back.
func TestNet(t *testing.T) {
	t.Parallel()
	nw := faultproxy.NewNet(t, azurite.ConnectionString(t))
	count := counter(queue(t, open(t, nw.ConnectionString), "fp"+uuid.NewString()[:8]))
	if err := count(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	nw.Refuse(t)
	if err := count(5 * time.Second); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("refused: %v, want a connection error", err)
	}
	nw.Restore(t)
	if err := count(5 * time.Second); err != nil {
		t.Fatalf("after Refuse and Restore: %v", err)
	}
	nw.BlackHole(t)
	if err := count(500 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("black hole: %v, want the deadline to pass", err)
	}
	nw.Restore(t)
	if err := count(5 * time.Second); err != nil {
		t.Fatalf("after BlackHole and Restore: %v", err)
	}
}

// TestHTTPBusy: Busy answers 503 ServerBusy without forwarding (nothing
// lands; the driver sees the service's own error code), BusyAfter after the
// service applied the request (it landed); rules match by service and by
// function; Busy503 counts the answers.
func TestHTTPBusy(t *testing.T) {
	t.Parallel()
	px, through, direct := behindHTTP(t, 0)
	ctx := context.Background()

	// A table rule does not touch queue requests.
	px.Add(faultproxy.Match{Service: faultproxy.Table, Method: "POST"}, faultproxy.Busy, -1)
	b := px.Add(faultproxy.Match{Service: faultproxy.Queue, Func: func(r *http.Request, body []byte) bool {
		return r.Method == http.MethodPost && strings.Contains(string(body), "busy")
	}}, faultproxy.Busy, 3)
	if _, err := through.Enqueue(ctx, "busy", 0, 0); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("enqueue answered 503 on every try: %v, want storage.ErrUnavailable", err)
	}
	if n, _ := direct.ApproximateCount(ctx); n != 0 || b.Hits() != 3 || px.Busy503() != 3 {
		t.Fatalf("busy: %d messages landed, rule hit %d times, %d 503s; want 0, 3 tries, 3", n, b.Hits(), px.Busy503())
	}
	if _, err := through.Enqueue(ctx, "other", 0, 0); err != nil {
		t.Fatalf("a request no rule matches: %v", err)
	}
	a := px.Add(faultproxy.Match{Service: faultproxy.Queue, Method: "POST", Path: "/messages"}, faultproxy.BusyAfter, 1)
	if _, err := through.Enqueue(ctx, "twice", 0, 0); err != nil {
		t.Fatalf("enqueue whose first answer was 503 after landing: %v (the retry should succeed)", err)
	}
	if n, _ := direct.ApproximateCount(ctx); n != 3 || a.Hits() != 1 || len(a.Answers()) != 1 || a.Answers()[0] != 201 || px.Busy503() != 4 {
		t.Fatalf("busy after: %d messages (want 3: other, and twice twice), hits %d, hidden answers %v, %d 503s", n, a.Hits(), a.Answers(), px.Busy503())
	}
}

// TestHTTPBurst: SetBurst answers 503 to the chosen shares of requests,
// before or after applying them, and SetBurst(0, 0) ends it.
func TestHTTPBurst(t *testing.T) {
	t.Parallel()
	px, through, direct := behindHTTP(t, 42)
	ctx := context.Background()
	count := func() int {
		n, err := direct.ApproximateCount(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	px.SetBurst(1, 0)
	if _, err := through.Enqueue(ctx, "refused", 0, 0); err == nil || count() != 0 {
		t.Fatalf("burst before: %v, %d messages; want an error and none", err, count())
	}
	px.SetBurst(0, 1)
	if _, err := through.Enqueue(ctx, "applied", 0, 0); err == nil || count() != 3 {
		t.Fatalf("burst after: %v, %d messages; want an error and every try landed (3)", err, count())
	}
	px.SetBurst(0, 0)
	if _, err := through.Enqueue(ctx, "ok", 0, 0); err != nil || count() != 4 || px.Busy503() != 6 {
		t.Fatalf("after the burst: %v, %d messages, %d 503s", err, count(), px.Busy503())
	}
}

// TestNetOverlap: faults of a Net overlap the way the reliability suite
// schedules them: a service stopped twice opens again only when both are
// undone, dropping connections does not reopen a refused service, Heal
// undoes everything, and a toxic applies until removed.
func TestNetOverlap(t *testing.T) {
	t.Parallel()
	nw := faultproxy.NewNet(t, azurite.ConnectionString(t))
	count := counter(queue(t, open(t, nw.ConnectionString), "fp"+uuid.NewString()[:8]))
	refused := func(what string) {
		t.Helper()
		if err := count(5 * time.Second); err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: %v, want connections refused", what, err)
		}
	}
	nw.Stop(faultproxy.Queue)
	nw.Stop(faultproxy.Queue, faultproxy.Table)
	refused("stopped twice")
	if err := nw.Start(faultproxy.Queue); err != nil {
		t.Fatal(err)
	}
	refused("one of two stops undone")
	if err := nw.DropConnections(faultproxy.Queue); err != nil {
		t.Fatal(err)
	}
	refused("connections dropped while stopped")
	if err := nw.Start(faultproxy.Queue, faultproxy.Table); err != nil {
		t.Fatal(err)
	}
	if err := count(5 * time.Second); err != nil {
		t.Fatalf("both stops undone: %v", err)
	}
	rm, err := nw.AddToxic([]string{faultproxy.Queue}, faultproxy.Toxic{Type: "timeout", Stream: "upstream", Attrs: map[string]any{"timeout": 0}})
	if err != nil {
		t.Fatal(err)
	}
	if err := count(500 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout toxic: %v, want the deadline to pass", err)
	}
	rm()
	if err := count(5 * time.Second); err != nil {
		t.Fatalf("toxic removed: %v", err)
	}
	nw.Stop(faultproxy.Queue)
	if _, err := nw.AddToxic([]string{faultproxy.Queue}, faultproxy.Toxic{Type: "latency", Stream: "downstream", Attrs: map[string]any{"latency": 10000}}); err != nil {
		t.Fatal(err)
	}
	if err := nw.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := count(5 * time.Second); err != nil {
		t.Fatalf("after Heal: %v", err)
	}
}
