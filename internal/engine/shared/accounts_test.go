package shared_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/reconcile"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/retention"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/multi"
)

// keep lends a store to a multi store without letting it close it.
type keep struct{ storage.Store }

func (keep) Close() error { return nil }

// TestAccountAddedOldCommands: commands issued on two accounts (Azurite
// instances) before a third is added (from three days later) are read,
// requeued (the message goes to the command's own account) and swept by
// the deployment with three accounts: the expired day table is dropped
// from every account.
func TestAccountAddedOldCommands(t *testing.T) {
	t.Parallel()
	ctx := testenv.Ctx(t)
	var raw []storage.Store
	for _, cs := range azurite.ConnectionStrings(t, 3) {
		st, err := azure.Open(ctx, azure.Config{ConnectionString: cs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		raw = append(raw, st)
	}
	members := func(n int, from time.Time) *multi.Store {
		var ms []multi.Member
		for i := range n {
			m := multi.Member{Name: fmt.Sprintf("account %d", i), Store: keep{raw[i]}}
			if i == 2 {
				m.From = from
			}
			ms = append(ms, m)
		}
		s, err := multi.New(ms, multi.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	prefix := fmt.Sprintf("acc%d", time.Now().UnixNano()%1e9)
	names := layout.Names{Prefix: prefix}
	c := testenv.NewClock(testenv.Day0)
	before := members(2, time.Time{})
	r1, err := read.Open(ctx, before, names, record.Options{Now: c.Now}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var done []string
	for range 8 {
		id := testenv.IssueAt(t, r1.Store, c, "demo.Done")
		testenv.Complete(t, r1.Store, id)
		done = append(done, id)
	}
	poisoned := testenv.IssueAt(t, r1.Store, c, "demo.Bad")
	testenv.PoisonAt5(t, r1.Store, poisoned)
	pending := testenv.IssueAt(t, r1.Store, c, "demo.Wait")
	if err := r1.Enqueue(ctx, pending, "demo.Wait", model.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	// Shared rows written before the account is added: a pause and a
	// marker (of a command whose enqueue "failed").
	if _, err := r1.SetPaused(ctx, "held", true, "test:before"); err != nil {
		t.Fatal(err)
	}
	marked := testenv.IssueAt(t, r1.Store, c, "demo.Wait")
	if err := r1.MarkUnqueued(ctx, marked, model.DefaultQueue); err != nil {
		t.Fatal(err)
	}

	after := members(3, testenv.Day0.Truncate(testenv.Day).Add(3*testenv.Day))
	r2, err := read.Open(ctx, after, names, record.Options{Now: c.Now}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Read: every command where it was, one account each.
	for _, id := range append([]string{poisoned, pending}, done...) {
		if a, b := before.MemberOf(id), after.MemberOf(id); a != b {
			t.Fatalf("command %s moved from account %d to %d", id, a, b)
		}
		if _, err := r2.Get(ctx, id); err != nil {
			t.Fatalf("Get %s after the account was added: %v", id, err)
		}
	}
	if _, err := r2.GetPoison(ctx, poisoned); err != nil {
		t.Fatalf("GetPoison after the account was added: %v", err)
	}
	// The shared rows: the pause holds, and the first read copies it to
	// the new account; the marker is found where it was.
	rows, err := r2.ReadControl(ctx)
	if err != nil || !rows["held"].Paused {
		t.Fatalf("control rows after the account was added: %+v, %v; want held paused", rows, err)
	}
	if e, err := storage.ReplicasOf(r2.CommandsTable())[2].Get(ctx, shared.ControlPartition, "held"); err != nil || e.Properties["Paused"] != true {
		t.Fatalf("the new account's control row of held after a read: %v, %v; want paused", e.Properties, err)
	}
	rrep, err := reconcile.Pass(ctx, r2.Enqueuer, reconcile.Options{MarkerGrace: time.Hour, Now: c.Now})
	if err != nil || rrep.Markers != 1 || rrep.Waiting != 1 {
		t.Fatalf("reconcile after the account was added: %+v, %v; want the marker made before found (waiting its grace)", rrep, err)
	}
	testenv.Complete(t, r2.Store, marked)
	// Requeue: the command is pending again and its message is in its own
	// account, beside the pending command's.
	if err := r2.Requeue(ctx, poisoned, "test:op"); err != nil {
		t.Fatal(err)
	}
	q, err := after.Queue(ctx, names.Queue(model.DefaultQueue))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := q.Dequeue(ctx, 32, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, m := range ms {
		env, err := layout.ParseEnvelope(m.Text)
		if err != nil {
			t.Fatal(err)
		}
		k, _, _ := strings.Cut(m.ID, ":")
		if acc, _ := strconv.Atoi(k); acc != after.MemberOf(env.ID) {
			t.Fatalf("message of %s is in account %d, its rows in account %d", env.ID, acc, after.MemberOf(env.ID))
		}
		got[env.ID] = true
		if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil {
			t.Fatal(err)
		}
	}
	if !got[poisoned] || !got[pending] || len(ms) != 2 {
		t.Fatalf("messages after the requeue: %v, want the requeued and the pending command's", got)
	}
	testenv.Complete(t, r2.Store, poisoned)
	testenv.Complete(t, r2.Store, pending)
	// Sweep, past the retention: the day table goes from every account.
	table := names.TableOf(pending)
	c.Add(10 * testenv.Day)
	rep, err := retention.Sweep(ctx, r2.Store, retention.Options{})
	if err != nil || !slices.Contains(rep.Dropped, table) {
		t.Fatalf("sweep: %+v, %v; want %s dropped", rep, err, table)
	}
	for i, st := range raw {
		tables, err := st.Tables(ctx, names.CommandsTable())
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(tables, table) {
			t.Errorf("account %d still has %s after the sweep", i, table)
		}
	}
	if _, err := r2.Get(ctx, done[0]); !errors.Is(err, model.ErrExpired) {
		t.Fatalf("Get after the sweep: %v, want ErrExpired", err)
	}
}
