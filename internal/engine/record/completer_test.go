package record_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// gatedGroup holds every BatchDeleteMany until release is closed, counts
// the calls, and records which commands' writes have returned.
type gatedGroup struct {
	storage.GroupCombiner
	release  chan struct{}
	calls    atomic.Int32
	mu       sync.Mutex
	returned map[string]bool
}

func (g *gatedGroup) BatchDeleteMany(ctx context.Context, items []storage.DeleteItem) ([]storage.DeleteResult, error) {
	g.calls.Add(1)
	<-g.release
	res, err := g.GroupCombiner.BatchDeleteMany(ctx, items)
	g.mu.Lock()
	for _, it := range items {
		g.returned[it.PartitionKey] = true
	}
	g.mu.Unlock()
	return res, err
}

// TestCompleterGroups: completions that arrive while groups are being
// written share the next write (50 completions, two held leaders: at most
// 4 writes); each is decided on its own (a stale ETag fails only its own
// command, whose message stays); the change hook runs for a command only
// after the write holding it returned (completed means durable); every
// other command is completed and its message deleted.
func TestCompleterGroups(t *testing.T) {
	t.Parallel()
	ctx := testenv.Ctx(t)
	st, err := embedded.Open(filepath.Join(t.TempDir(), "data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	gate := &gatedGroup{GroupCombiner: st, release: make(chan struct{}), returned: map[string]bool{}}
	var early, hooked atomic.Int32
	names := layout.Names{Prefix: "grp"}
	s, err := record.Open(ctx, st, names, record.Options{Changed: func(status model.Status, _ []model.Event) {
		gate.mu.Lock()
		if !gate.returned[status.ID] {
			early.Add(1)
		}
		gate.mu.Unlock()
		hooked.Add(1)
	}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	queue := names.Queue(model.DefaultQueue)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.NewString()
		if err := s.CreateAndEnqueue(ctx, record.NewCommand{ID: ids[i], Type: "t", Queue: model.DefaultQueue}, st, queue, ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	q, err := st.Queue(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	msgs := map[string]storage.Message{}
	for len(msgs) < n {
		ms, err := q.Dequeue(ctx, 32, time.Hour)
		if err != nil || len(ms) == 0 {
			t.Fatalf("dequeue: %d, %v", len(ms), err)
		}
		for _, m := range ms {
			msgs[m.Text] = m
		}
	}
	recs := make([]*record.Record, n)
	for i, id := range ids {
		if recs[i], err = s.Load(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// Command 0 is written by someone else after its load: stale.
	other := *recs[0]
	if err := s.Append(ctx, &other, model.Event{Kind: model.EventStepCompleted, Attempt: 1, Step: 1}); err != nil {
		t.Fatal(err)
	}
	hooked.Store(0)
	early.Store(0)
	c := record.NewCompleter(s, gate)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := msgs[ids[i]]
			var derr error
			derr, errs[i] = c.AppendAndDelete(ctx, recs[i], queue, m.ID, m.PopReceipt,
				model.Event{Kind: model.EventStarted, Attempt: 1, Worker: "w", MessageID: m.ID},
				model.Event{Kind: model.EventCompleted, Attempt: 1, Worker: "w"})
			if derr != nil {
				t.Errorf("command %d: delete: %v", i, derr)
			}
		}()
	}
	// Two leaders hold their writes; the others queue behind them.
	tick := time.NewTicker(time.Millisecond)
	for c.Pending() < n-2 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d completions pending, want %d", c.Pending(), n-2)
		case <-tick.C:
		}
	}
	tick.Stop()
	close(gate.release)
	wg.Wait()
	if calls := gate.calls.Load(); calls > 4 {
		t.Fatalf("%d completions took %d writes, want at most 4 (two held, then the queued ones in at most two groups)", n, calls)
	}
	if e := early.Load(); e != 0 {
		t.Fatalf("the change hook ran for %d commands before their write returned", e)
	}
	var ce *record.ConflictError
	if !errors.As(errs[0], &ce) || !errors.Is(errs[0], storage.ErrConflict) {
		t.Fatalf("stale command: %v, want a ConflictError", errs[0])
	}
	for i := 1; i < n; i++ {
		if errs[i] != nil {
			t.Fatalf("command %d: %v", i, errs[i])
		}
		if recs[i].Status.State != model.StateCompleted {
			t.Fatalf("command %d: record says %s after the completion", i, recs[i].Status.State)
		}
		got, err := s.Load(ctx, ids[i])
		if err != nil || got.Status.State != model.StateCompleted || got.EventSeq != 3 {
			t.Fatalf("command %d as stored: %v seq %d, %v", i, got.Status.State, got.EventSeq, err)
		}
	}
	if h := hooked.Load(); h != n-1 {
		t.Fatalf("change hook ran %d times, want %d", h, n-1)
	}
	if left, err := q.ApproximateCount(ctx); err != nil || left != 1 {
		t.Fatalf("%d messages left (%v), want 1: the stale command's", left, err)
	}
}
