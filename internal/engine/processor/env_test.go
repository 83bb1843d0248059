package processor_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

// env is one test's storage: a real driver, a unique prefix, an issuer and
// a reader.
type env struct {
	t      *testing.T
	driver string
	store  storage.Store
	// open returns another handle on the same storage (Azure: a new client;
	// embedded: the same store, since one file has one owner).
	open   func() storage.Store
	prefix string
	reader *read.Reader
}

var prefixSeq atomic.Int64

func newPrefix() string {
	return fmt.Sprintf("t%x%d", rand.Uint32()&0xffffff, prefixSeq.Add(1))
}

// eachDriver runs f as parallel subtests on the embedded store and on Azurite.
func eachDriver(t *testing.T, f func(t *testing.T, e *env)) {
	t.Helper()
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		f(t, newEnv(t, "embedded", st, func() storage.Store { return st }))
	})
	t.Run("azure", func(t *testing.T) {
		t.Parallel()
		conn := azurite.ConnectionString(t)
		open := func() storage.Store {
			st, err := azure.Open(context.Background(), azure.Config{ConnectionString: conn})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		}
		f(t, newEnv(t, "azure", open(), open))
	})
}

func newEnv(t *testing.T, driver string, st storage.Store, open func() storage.Store) *env {
	e := &env{t: t, driver: driver, store: st, open: open, prefix: newPrefix()}
	r, err := read.Open(context.Background(), st, layout.Names{Prefix: e.prefix}, record.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.reader = r
	return e
}

// cfg returns a fast test configuration.
func (e *env) cfg() processor.Config {
	return processor.Config{
		Prefix:            e.prefix,
		Worker:            "w-" + e.driver,
		MinPollInterval:   10 * time.Millisecond,
		MaxPollInterval:   50 * time.Millisecond,
		DrainTimeout:      2 * time.Second,
		ReconcileInterval: model.NoReconcile,
	}
}

func (e *env) issuer(notify func(string)) *issuer.Issuer {
	i, err := issuer.NewIssuer(e.store, issuer.IssuerOptions{Prefix: e.prefix, Wake: notify})
	if err != nil {
		e.t.Fatal(err)
	}
	return i
}

func (e *env) issue(i *issuer.Issuer, cmd issuer.Command) string {
	e.t.Helper()
	res, err := i.Issue(context.Background(), cmd)
	if err != nil {
		e.t.Fatalf("issue %s: %v", cmd.CommandType(), err)
	}
	return res.ID
}

func (e *env) queue(name string) storage.Queue {
	e.t.Helper()
	q, err := e.store.Queue(context.Background(), layout.Names{Prefix: e.prefix}.Queue(name))
	if err != nil {
		e.t.Fatal(err)
	}
	return q
}

// start runs p.Run in the background; the returned stop cancels it and
// waits for Run to return.
func start(t *testing.T, p *processor.Processor) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("Run did not return within 15s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newProc(t *testing.T, st storage.Store, reg *registry.Registry, cfg processor.Config) *processor.Processor {
	t.Helper()
	p, err := processor.New(st, reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// eventually polls cond every 10ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// waitState waits until the command reaches state.
func (e *env) waitState(id string, state model.State, timeout time.Duration) model.Status {
	e.t.Helper()
	var st model.Status
	eventually(e.t, timeout, fmt.Sprintf("command %s to be %s", id, state), func() bool {
		var err error
		st, err = e.reader.Get(context.Background(), id)
		if err != nil {
			e.t.Fatalf("get %s: %v", id, err)
		}
		return st.State == state
	})
	return st
}

func (e *env) events(id string) []model.Event {
	e.t.Helper()
	evs, err := e.reader.Events(context.Background(), id)
	if err != nil {
		e.t.Fatalf("events %s: %v", id, err)
	}
	return evs
}

func kinds(evs []model.Event) []model.EventKind {
	out := make([]model.EventKind, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

func equalKinds(got []model.EventKind, want ...model.EventKind) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// waitQueueEmpty waits until the queue holds no message at all.
func (e *env) waitQueueEmpty(name string, timeout time.Duration) {
	e.t.Helper()
	q := e.queue(name)
	eventually(e.t, timeout, "queue "+name+" to be empty", func() bool {
		n, err := q.ApproximateCount(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		return n == 0
	})
}

// Test command types.

type okCmd struct {
	N int `json:"n"`
}

func (okCmd) CommandType() string { return "test.ok" }

type otherCmd struct{}

func (otherCmd) CommandType() string { return "test.other" }

type stepCmd struct{}

func (stepCmd) CommandType() string { return "test.steps" }

func register[T issuer.Command](t *testing.T, reg *registry.Registry, fn registry.Handler[T], opts registry.Options) {
	t.Helper()
	if err := registry.Register(reg, fn, opts); err != nil {
		t.Fatal(err)
	}
}

// fastRetry retries after 20ms, without jitter.
var fastRetry = model.RetryPolicy{Base: 20 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: model.NoJitter}

// faultyStore wraps a real store and fails chosen queue operations.
type faultyStore struct {
	storage.Store
	failEnqueue atomic.Bool
	failDequeue atomic.Bool
	dequeues    atomic.Int64
}

var errInjected = errors.New("injected fault: storage unreachable")

func (f *faultyStore) Queue(ctx context.Context, name string) (storage.Queue, error) {
	q, err := f.Store.Queue(ctx, name)
	if err != nil {
		return nil, err
	}
	return &faultyQueue{Queue: q, f: f}, nil
}

type faultyQueue struct {
	storage.Queue
	f *faultyStore
}

func (q *faultyQueue) Enqueue(ctx context.Context, text string, d, ttl time.Duration) (storage.Message, error) {
	if q.f.failEnqueue.Load() {
		return storage.Message{}, errInjected
	}
	return q.Queue.Enqueue(ctx, text, d, ttl)
}

func (q *faultyQueue) Dequeue(ctx context.Context, max int, vis time.Duration) ([]storage.Message, error) {
	q.f.dequeues.Add(1)
	if q.f.failDequeue.Load() {
		return nil, errInjected
	}
	return q.Queue.Dequeue(ctx, max, vis)
}

// onPoll returns an observer that calls f for every dequeue (an
// ObservedPolled observation).
func onPoll(f func(model.Observation)) model.Observer {
	return model.ObserverFunc(func(o model.Observation) {
		if o.Kind == model.ObservedPolled {
			f(o)
		}
	})
}
