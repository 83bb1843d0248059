package issuer_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/reconcile"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

type chargeCard struct {
	Customer string `json:"customer"`
	Cents    int    `json:"cents"`
}

func (chargeCard) CommandType() string { return "billing.ChargeCard" }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type notes struct {
	mu     sync.Mutex
	queues []string
}

func (n *notes) notify(q string) { n.mu.Lock(); n.queues = append(n.queues, q); n.mu.Unlock() }

// notifyAt notes a wake-up for a message that becomes visible at a later
// time (IssuerOptions.WakeAt), as notify does for one visible at once.
func (n *notes) notifyAt(q string, _ time.Time) { n.notify(q) }
func (n *notes) get() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.queues...)
}

func newIssuer(t *testing.T, env testenv.Env, mod func(*issuer.IssuerOptions)) (*issuer.Issuer, *notes) {
	t.Helper()
	n := &notes{}
	o := issuer.IssuerOptions{Prefix: env.Prefix, Wake: n.notify, WakeAt: n.notifyAt}
	if mod != nil {
		mod(&o)
	}
	is, err := issuer.NewIssuer(env.Store, o)
	if err != nil {
		t.Fatal(err)
	}
	return is, n
}

// routeFunc routes like an IssuerOptions.Routes whose QueueOf returns f's
// queue ("" = unknown type).
type routeFunc func(cmdType string) string

func (f routeFunc) QueueOf(cmdType string) (string, bool) {
	q := f(cmdType)
	return q, q != ""
}

// CheckParams accepts every params (a router without Go types).
func (f routeFunc) CheckParams(string, []byte) error { return nil }

// reconcile runs one reconciler pass on st for prefix, with the processor's
// default graces where opts leaves them zero, waking wake (may be nil).
func reconcilePass(t *testing.T, ctx context.Context, st storage.Store, prefix string, opts reconcile.Options, wake func(string)) (reconcile.Report, error) {
	t.Helper()
	names := layout.Names{Prefix: prefix}
	rec, err := record.Open(ctx, st, names, record.Options{Now: opts.Now})
	if err != nil {
		return reconcile.Report{}, err
	}
	if opts.MarkerGrace == 0 {
		opts.MarkerGrace = model.DefaultReconcileGrace
	}
	if opts.PendingGrace == 0 {
		opts.PendingGrace = model.DefaultReconcileStaleAfter
	}
	enq := enqueue.NewEnqueuer(st, names, rec, wake)
	if wake != nil {
		enq.SetWakeAt(func(q string, _ time.Time) { wake(q) }) // a recovery's message is delayed
	}
	return reconcile.Pass(ctx, enq, opts)
}

func reader(t *testing.T, env testenv.Env) *read.Reader {
	t.Helper()
	r, err := read.Open(ctxT(t), env.Store.Store, layout.Names{Prefix: env.Prefix}, record.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "billing.ChargeCard", "A-b_c.9", "x" + strings.Repeat("y", 127)} {
		if err := model.ValidateType(ok); err != nil {
			t.Errorf("ValidateType(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "9a", ".a", "a b", "a/b", "é", "x" + strings.Repeat("y", 128)} {
		if err := model.ValidateType(bad); !errors.Is(err, model.ErrInvalidType) {
			t.Errorf("ValidateType(%q): %v", bad, err)
		}
	}
	id := uuid.NewString()
	if err := model.ValidateID(id); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"", strings.ToUpper(id), "{" + id + "}", "urn:uuid:" + id, strings.ReplaceAll(id, "-", ""), "~unqueued", "x"} {
		if err := model.ValidateID(bad); !errors.Is(err, model.ErrInvalidID) {
			t.Errorf("ValidateID(%q): %v", bad, err)
		}
	}
	if err := model.ValidateID(uuid.NewString()); err != nil {
		t.Error(err)
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	err := issuer.IssuerOptions{Prefix: "Bad-", MaxParamsBytes: model.MaxParamsBytes + 1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "prefix") || !strings.Contains(err.Error(), "MaxParamsBytes") {
		t.Fatalf("want both problems reported: %v", err)
	}
	if _, err := issuer.NewIssuer(nil, issuer.IssuerOptions{}); err == nil {
		t.Fatal("NewIssuer(nil) succeeded")
	}
}

func TestIssueCostAndMessage(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := ctxT(t)
		is, n := newIssuer(t, env, nil)
		env.Store.Reset()
		res, err := is.Issue(ctx, chargeCard{Customer: "c1", Cents: 500}, issuer.WithCorrelationID("req-7"))
		if err != nil {
			t.Fatal(err)
		}
		// The first issue of the day in a process also registers the
		// day table (one upsert, once per process and day table).
		if c := env.Store.Counts(); c["Batch"] != 1 || c["Enqueue"] != 1 || c["Upsert"] != 1 || env.Store.Total() != 3 {
			t.Fatalf("first Issue cost %s, want Batch=1 Enqueue=1 Upsert=1", env.Store)
		}
		if model.ValidateID(res.ID) != nil || res.Existing || res.Queue != "commands" {
			t.Fatalf("result %+v", res)
		}
		if got := n.get(); len(got) != 1 || got[0] != "commands" {
			t.Fatalf("Notify calls %v", got)
		}
		msgs := env.Store.Messages(t, env.Prefix+"-commands")
		if len(msgs) != 1 || !msgs[0].ExpiresAt.IsZero() {
			t.Fatalf("queue messages %+v", msgs)
		}
		st, err := reader(t, env).Get(ctx, res.ID)
		if err != nil || st.State != model.StatePending || st.CorrelationID != "req-7" || st.Type != "billing.ChargeCard" {
			t.Fatalf("status %+v %v", st, err)
		}
		rec, _ := reader(t, env).Store.Load(ctx, res.ID)
		var back chargeCard
		if err := json.Unmarshal(rec.Params, &back); err != nil || back != (chargeCard{"c1", 500}) {
			t.Fatalf("params %s", rec.Params)
		}
		// The issue's own message carries what its first delivery would
		// read: the record it rebuilds equals the stored one, ETag included.
		env2, err := layout.ParseEnvelope(msgs[0].Text)
		if err != nil || env2.ID != res.ID || env2.Type != "billing.ChargeCard" || !env2.First.Usable() {
			t.Fatalf("message %s: %+v, %v", msgs[0].Text, env2, err)
		}
		fr := record.FirstRecord(env2)
		if fr.ETag != rec.ETag || string(fr.Params) != string(rec.Params) || fr.ParamsHash != rec.ParamsHash || !fr.IssuedAt.Equal(rec.IssuedAt) ||
			fr.EventSeq != rec.EventSeq || fr.Status != rec.Status {
			t.Fatalf("record from the message %+v\nstored %+v", fr, rec)
		}
		// Every later issue: one batch and one enqueue, nothing else.
		env.Store.Reset()
		if _, err := is.Issue(ctx, chargeCard{Customer: "c2", Cents: 1}); err != nil {
			t.Fatal(err)
		}
		if c := env.Store.Counts(); c["Batch"] != 1 || c["Enqueue"] != 1 || env.Store.Total() != 2 {
			t.Fatalf("Issue cost %s, want Batch=1 Enqueue=1", env.Store)
		}
	})
}

func TestIdempotentIssue(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := ctxT(t)
		is, n := newIssuer(t, env, nil)
		id := uuid.NewString()
		first, err := is.Issue(ctx, chargeCard{"c1", 1}, issuer.WithID(id))
		if err != nil || first.ID != id || first.Existing {
			t.Fatalf("first issue %+v %v", first, err)
		}
		env.Store.Reset()
		again, err := is.IssueRaw(ctx, model.Raw{ID: id, Type: "billing.ChargeCard", Params: json.RawMessage(" {\n \"customer\": \"c1\", \"cents\": 1 }")})
		if err != nil || again.ID != id || !again.Existing {
			t.Fatalf("re-issue %+v %v", again, err)
		}
		// Still pending and never started: the first issue may have stopped
		// before its enqueue, so the re-issue makes sure a message exists,
		// as a recovery: a requeued event (its first delivery claims the
		// command before running) and a message delayed by the recovery
		// delay (the first one, if any, runs first).
		if c := env.Store.Counts(); c["Enqueue"] != 1 || c["Batch"] != 2 || env.Store.Total() != 4 {
			t.Fatalf("re-issue of a pending command cost %s, want the failed batch, one read, the requeued batch and one enqueue", env.Store)
		}
		if vis, all := len(env.Store.Messages(t, env.Prefix+"-commands")), env.Store.Queued(t, env.Prefix+"-commands"); vis != 1 || all != 2 {
			t.Fatalf("%d messages visible of %d, want the first visible and the second delayed", vis, all)
		}
		if evs, _ := reader(t, env).Events(ctx, id); len(evs) != 2 || evs[1].Kind != model.EventRequeued || evs[1].By != issuer.By {
			t.Fatalf("events after the re-issue %+v, want created and requeued by the issuer", evs)
		}
		if len(n.get()) != 2 {
			t.Fatalf("Notify calls %v", n.get())
		}
		// Once a processor started it, a re-issue enqueues nothing.
		rec, err := reader(t, env).Store.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := reader(t, env).Store.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
		env.Store.Reset()
		again, err = is.Issue(ctx, chargeCard{"c1", 1}, issuer.WithID(id))
		if err != nil || !again.Existing {
			t.Fatalf("re-issue of a running command %+v %v", again, err)
		}
		if c := env.Store.Counts(); c["Enqueue"] != 0 {
			t.Fatalf("re-issue of a running command enqueued: %s", env.Store)
		}
		if _, err := is.Issue(ctx, chargeCard{"c1", 2}, issuer.WithID(id)); !errors.Is(err, model.ErrIDConflict) {
			t.Fatalf("different params: %v", err)
		}
		if _, err := is.IssueRaw(ctx, model.Raw{ID: id, Type: "billing.Other", Params: json.RawMessage(`{"customer":"c1","cents":1}`)}); !errors.Is(err, model.ErrIDConflict) {
			t.Fatalf("different type: %v", err)
		}
	})
}

func TestIssueRejectsBadInput(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := ctxT(t)
		is, _ := newIssuer(t, env, func(o *issuer.IssuerOptions) { o.MaxParamsBytes = 1000 })
		env.Store.Reset()
		cases := []struct {
			raw  model.Raw
			want error
			text string
		}{
			{model.Raw{Type: "bad type"}, model.ErrInvalidType, "letter"},
			{model.Raw{Type: "ok", ID: "NOT-A-UUID"}, model.ErrInvalidID, "UUID"},
			{model.Raw{Type: "ok", Params: json.RawMessage(`{"a":`)}, model.ErrInvalidParams, "JSON"},
			{model.Raw{Type: "ok", CorrelationID: strings.Repeat("c", 300)}, model.ErrInvalidParams, "256"},
			{model.Raw{Type: "ok", Params: json.RawMessage(`{"s":"` + strings.Repeat("x", 1000) + `"}`)}, model.ErrParamsTooLarge, "over the 1000-byte limit"},
		}
		for _, c := range cases {
			_, err := is.IssueRaw(ctx, c.raw)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("IssueRaw(%+v): %v, want %v mentioning %q", c.raw.Type, err, c.want, c.text)
			}
		}
		if _, err := is.Issue(ctx, nil); !errors.Is(err, model.ErrInvalidType) {
			t.Errorf("Issue(nil): %v", err)
		}
		if env.Store.Total() != 0 {
			t.Fatalf("bad input reached storage: %s", env.Store)
		}
		routed, _ := newIssuer(t, env, func(o *issuer.IssuerOptions) { o.Routes = routeFunc(func(string) string { return "Bad_Queue" }) })
		if _, err := routed.IssueRaw(ctx, model.Raw{Type: "ok"}); !errors.Is(err, storage.ErrInvalidName) {
			t.Errorf("bad route: %v", err)
		}
	})
}

func TestLargeParamsFit(t *testing.T) {
	t.Parallel()
	// The default limit must really fit in one entity on every driver, for
	// ASCII (1 UTF-16 unit per byte) and for 2-byte UTF-8 characters.
	ascii := `{"s":"` + strings.Repeat("x", model.MaxParamsBytes-8) + `"}`
	accented := `{"s":"` + strings.Repeat("é", (model.MaxParamsBytes-8)/2) + `"}`
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := ctxT(t)
		is, _ := newIssuer(t, env, nil)
		r := reader(t, env)
		for _, p := range []string{ascii, accented} {
			res, err := is.IssueRaw(ctx, model.Raw{Type: "demo.Big", Params: json.RawMessage(p)})
			if err != nil {
				t.Fatalf("issue %d bytes: %v", len(p), err)
			}
			rec, err := r.Store.Load(ctx, res.ID)
			if err != nil || string(rec.Params) != p {
				t.Fatalf("round trip of %d bytes failed: %v", len(p), err)
			}
		}
		_, err := is.IssueRaw(ctx, model.Raw{Type: "demo.Big", Params: json.RawMessage(ascii[:len(ascii)-2] + `xx"}`)})
		if !errors.Is(err, model.ErrParamsTooLarge) || !strings.Contains(err.Error(), "512000") {
			t.Fatalf("just over the limit: %v", err)
		}
	})
}

func TestRouting(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := ctxT(t)
		is, n := newIssuer(t, env, func(o *issuer.IssuerOptions) {
			o.Routes = routeFunc(func(typ string) string {
				if strings.HasPrefix(typ, "slow.") {
					return "slow"
				}
				return ""
			})
		})
		res, err := is.IssueRaw(ctx, model.Raw{Type: "slow.Report"})
		if err != nil || res.Queue != "slow" {
			t.Fatalf("%+v %v", res, err)
		}
		if msgs := env.Store.Messages(t, env.Prefix+"-slow"); len(msgs) != 1 {
			t.Fatalf("%d messages on the slow queue", len(msgs))
		}
		if st, _ := reader(t, env).Get(ctx, res.ID); st.Queue != "slow" {
			t.Fatalf("stored queue %q", st.Queue)
		}
		if got := n.get(); len(got) != 1 || got[0] != "slow" {
			t.Fatalf("Notify %v", got)
		}
	})
}

func TestEnqueueFailureAndReconcile(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := ctxT(t)
		// The Issuer's own background retry is off: this is the reconciler's test.
		is, n := newIssuer(t, env, func(o *issuer.IssuerOptions) { o.EnqueueRetry = -1 })
		queue := env.Prefix + "-commands"
		env.Store.FailEnqueue.Store(true)
		res, err := is.Issue(ctx, chargeCard{"c9", 9})
		env.Store.FailEnqueue.Store(false)
		if !errors.Is(err, model.ErrEnqueueFailed) || !errors.Is(err, testenv.ErrInjected) || !strings.Contains(err.Error(), "reconciler") {
			t.Fatalf("Issue with failing enqueue: %v", err)
		}
		if model.ValidateID(res.ID) != nil {
			t.Fatalf("result ID %q", res.ID)
		}
		if len(n.get()) != 0 {
			t.Fatal("Notify called after a failed enqueue")
		}
		r := reader(t, env)
		if st, err := r.Get(ctx, res.ID); err != nil || st.State != model.StatePending {
			t.Fatalf("stored command %+v %v", st, err)
		}
		if _, err := r.Store.CommandsTable().Get(ctx, layout.UnqueuedPartition, res.ID); err != nil {
			t.Fatalf("marker: %v", err)
		}
		if len(env.Store.Messages(t, queue)) != 0 {
			t.Fatal("message despite failed enqueue")
		}
		// Inside the grace period: left for later.
		rep, err := reconcilePass(t, ctx, env.Store, env.Prefix, reconcile.Options{}, nil)
		if err != nil || rep.Markers != 1 || rep.Waiting != 1 || rep.Enqueued != 0 {
			t.Fatalf("reconcile inside grace: %+v %v", rep, err)
		}
		// Past the grace period: enqueued, marker gone, Notify called.
		later := func() time.Time { return time.Now().Add(model.DefaultReconcileGrace + time.Second) }
		rn := &notes{}
		rep, err = reconcilePass(t, ctx, env.Store, env.Prefix, reconcile.Options{Now: later}, rn.notify)
		if err != nil || rep.Markers != 1 || rep.Enqueued != 1 {
			t.Fatalf("reconcile: %+v %v", rep, err)
		}
		// A recovery: requeued, and the message delayed.
		if vis, all := len(env.Store.Messages(t, queue)), env.Store.Queued(t, queue); vis != 0 || all != 1 {
			t.Fatalf("messages after reconcile: %d visible of %d, want one, delayed", vis, all)
		}
		if evs, _ := r.Events(ctx, res.ID); len(evs) != 2 || evs[1].Kind != model.EventRequeued || evs[1].By != reconcile.By {
			t.Fatalf("events after reconcile %+v, want created and requeued by the reconciler", evs)
		}
		if _, err := r.Store.CommandsTable().Get(ctx, layout.UnqueuedPartition, res.ID); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("marker after reconcile: %v", err)
		}
		if got := rn.get(); len(got) != 1 || got[0] != "commands" {
			t.Fatalf("reconcile Notify %v", got)
		}
		// Nothing left: one query.
		env.Store.Reset()
		rep, err = reconcilePass(t, ctx, env.Store, env.Prefix, reconcile.Options{Now: later}, nil)
		if err != nil || rep != (reconcile.Report{}) {
			t.Fatalf("idle reconcile: %+v %v", rep, err)
		}
		if c := env.Store.Counts(); c["Query"] != 1 || env.Store.Total() != 1 {
			t.Fatalf("idle reconcile cost %s, want Query=1", env.Store)
		}
	})
}

func TestReconcileClearsMarkerOfFinishedCommand(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := ctxT(t)
		is, _ := newIssuer(t, env, nil)
		r := reader(t, env)
		res, err := is.Issue(ctx, chargeCard{"c", 1})
		if err != nil {
			t.Fatal(err)
		}
		rec, _ := r.Store.Load(ctx, res.ID)
		if err := r.Store.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventCompleted, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
		if err := r.Store.MarkUnqueued(ctx, res.ID, "commands"); err != nil {
			t.Fatal(err)
		}
		gone := uuid.NewString()
		if err := r.Store.MarkUnqueued(ctx, gone, "commands"); err != nil {
			t.Fatal(err)
		}
		env.Store.Reset()
		rep, err := reconcilePass(t, ctx, env.Store, env.Prefix, reconcile.Options{MarkerGrace: -1}, nil)
		if err != nil || rep.Markers != 2 || rep.Cleared != 2 || rep.Enqueued != 0 {
			t.Fatalf("%+v %v", rep, err)
		}
		if env.Store.Counts()["Enqueue"] != 0 {
			t.Fatalf("enqueued a finished command: %s", env.Store)
		}
	})
}

func TestReconcilePendingScan(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := ctxT(t)
		r := reader(t, env)
		is, _ := newIssuer(t, env, nil)
		// A process that crashed between the batch and the enqueue: stored, no message, no marker.
		orphan := uuid.NewString()
		if err := r.Store.Create(ctx, record.NewCommand{ID: orphan, Type: "demo.Orphan", Queue: "commands"}); err != nil {
			t.Fatal(err)
		}
		// A normally issued, completed command must not be touched.
		done, _ := is.Issue(ctx, chargeCard{"c", 1})
		rec, _ := r.Store.Load(ctx, done.ID)
		_ = r.Store.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventCompleted, Attempt: 1})
		queue := env.Prefix + "-commands"
		before := env.Store.Queued(t, queue)

		// Young pending commands are left alone.
		rep, err := reconcilePass(t, ctx, env.Store, env.Prefix, reconcile.Options{ScanPending: true}, nil)
		if err != nil || rep.Enqueued != 0 || rep.Scanned != 2 {
			t.Fatalf("scan inside grace: %+v %v", rep, err)
		}
		later := time.Now().Add(model.DefaultReconcileStaleAfter + time.Minute)
		opts := reconcile.Options{ScanPending: true, Now: func() time.Time { return later }}
		rep, err = reconcilePass(t, ctx, env.Store, env.Prefix, opts, nil)
		if err != nil || rep.Enqueued != 1 || rep.Scanned != 2 {
			t.Fatalf("scan: %+v %v", rep, err)
		}
		if all, vis := env.Store.Queued(t, queue), len(env.Store.Messages(t, queue)); all != before+1 || vis != before {
			t.Fatalf("%d messages (%d visible), want %d and the new one delayed", all, vis, before+1)
		}
		evs, _ := r.Events(ctx, orphan)
		if last := evs[len(evs)-1]; last.Kind != model.EventRequeued || last.By != reconcile.By {
			t.Fatalf("last event %+v", last)
		}
		// The requeued event moved UpdatedAt: the next run does not enqueue again.
		rep, err = reconcilePass(t, ctx, env.Store, env.Prefix, opts, nil)
		if err != nil || rep.Enqueued != 0 {
			t.Fatalf("second scan: %+v %v", rep, err)
		}
		// A scan-only pass (the processor's daily run) skips the marker
		// query: one request per small table (the issued command's day
		// table, and the base table that holds the UUIDv4 orphan).
		env.Store.Reset()
		opts.SkipMarkers = true
		rep, err = reconcilePass(t, ctx, env.Store, env.Prefix, opts, nil)
		if err != nil || rep.Enqueued != 0 || rep.Markers != 0 || rep.Scanned != 2 || env.Store.Total() != 2 {
			t.Fatalf("scan-only pass: %+v %v, cost %s (want 2 queries: day table and base table)", rep, err, env.Store)
		}
	})
}

// TestIDsOrderedOnLocalStores: the embedded store (a storage.Combiner) gets
// time-ordered IDs by default, so new commands' rows sort together; other
// stores get random ones; Options.NewID overrides both.
func TestIDsOrderedOnLocalStores(t *testing.T) {
	t.Parallel()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := ctxT(t)
	is, err := issuer.NewIssuer(st, issuer.IssuerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prev := ""
	for i := 0; i < 50; i++ {
		res, err := is.Issue(ctx, chargeCard{"c", i})
		if err != nil {
			t.Fatal(err)
		}
		if u := uuid.MustParse(res.ID); u.Version() != 7 {
			t.Fatalf("ID %s is version %d, want 7", res.ID, u.Version())
		}
		if res.ID <= prev {
			t.Fatalf("ID %s does not sort after %s", res.ID, prev)
		}
		prev = res.ID
	}
	// A store without the local fast path (here: the embedded store behind
	// a plain wrapper, as Azure would be) gets random version-8 IDs that
	// carry the issue day.
	is, err = issuer.NewIssuer(plainStore{st}, issuer.IssuerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := is.Issue(ctx, chargeCard{"c", -1})
	if day, ok := layout.IDDay(res.ID); err != nil || uuid.MustParse(res.ID).Version() != 8 || !ok || day != layout.DayOf(time.Now()) {
		t.Fatalf("issue on a plain store: %+v %v, want a version-8 ID carrying today", res, err)
	}
	is, err = issuer.NewIssuer(st, issuer.IssuerOptions{NewID: func() string { return "0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10" }})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := is.Issue(ctx, chargeCard{"c", -2}); err != nil || res.ID != "0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10" {
		t.Fatalf("Options.NewID ignored: %+v %v", res, err)
	}
}

// plainStore hides every optional interface of the store it wraps.
type plainStore struct{ storage.Store }
