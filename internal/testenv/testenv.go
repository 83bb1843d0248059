// Package testenv runs tests of code above storage against every real
// driver — the embedded store (a fresh file per test) and Azure Storage via
// Azurite (fresh names per test) — and wraps a store to count its
// operations or inject an Enqueue failure. It never mocks storage: every
// operation reaches the real driver.
//
// A test binary that uses it needs
//
//	func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/embedded"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// Env is one driver's environment for a test.
type Env struct {
	// Driver is "embedded" or "azure".
	Driver string
	// Store is the counting wrapper around the real store; Store.Store is
	// the real store itself, uncounted (with the embedded driver's
	// storage.Combiner, which the wrapper hides).
	Store *Counting
	// Prefix is a name prefix unique to the test (Azurite is shared by the
	// test binary).
	Prefix string
}

// drivers are the names of the real drivers, in the order Each runs them.
var drivers = []string{"embedded", "azure"}

// Each runs fn as parallel subtests "embedded" and "azure", each with a
// fresh store of its driver (Open).
func Each(t *testing.T, fn func(t *testing.T, env Env)) {
	t.Helper()
	EachDriver(t, func(t *testing.T, driver string) { fn(t, Open(t, driver)) })
}

// EachDriver runs fn as parallel subtests named for the drivers
// ("embedded", "azure"), opening nothing: for a test that hands the
// driver to something else to open (a `cmdq serve` process, say).
func EachDriver(t *testing.T, fn func(t *testing.T, driver string)) {
	t.Helper()
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			fn(t, driver)
		})
	}
}

// Open opens a fresh store of the named driver, closed when the test ends.
func Open(t testing.TB, driver string) Env {
	t.Helper()
	var st storage.Store
	switch driver {
	case "embedded":
		s, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
		if err != nil {
			t.Fatalf("open embedded store: %v", err)
		}
		st = s
	case "azure":
		cs := azurite.ConnectionString(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := azure.Open(ctx, azure.Config{ConnectionString: cs})
		if err != nil {
			t.Fatalf("open azure store: %v", err)
		}
		st = s
	default:
		t.Fatalf("unknown driver %q", driver)
	}
	t.Cleanup(func() { _ = st.Close() })
	var b [5]byte
	_, _ = rand.Read(b[:])
	return Env{Driver: driver, Store: NewCounting(st), Prefix: "t" + hex.EncodeToString(b[:])}
}

// ErrInjected is the error FailEnqueue makes Enqueue return.
var ErrInjected = errors.New("testenv: injected enqueue failure")

// opNames are the counters' names, by operation.
var opNames = [instrument.NumOps]string{
	instrument.QueueEnqueue: "Enqueue", instrument.QueueDequeue: "Dequeue",
	instrument.QueueUpdateVisibility: "UpdateVisibility", instrument.QueueDelete: "DeleteMessage",
	instrument.QueuePeek: "Peek", instrument.QueueCount: "ApproximateCount",
	instrument.TableInsert: "Insert", instrument.TableGet: "Get", instrument.TableUpdate: "Update",
	instrument.TableUpsert: "Upsert", instrument.TableDelete: "DeleteEntity", instrument.TableQuery: "Query",
	instrument.TableBatch: "Batch",
}

// Counting wraps a real store and counts every queue and table operation by
// name ("Enqueue", "Dequeue", "Batch", "Query", …). It can make Enqueue fail.
// It does not implement storage.Combiner: code under test takes its
// two-call path. The embedded Store is the real store, uncounted.
type Counting struct {
	storage.Store
	counted storage.Store
	mu      sync.Mutex
	counts  map[string]int
	// FailEnqueue, while true, makes every Enqueue return ErrInjected
	// without reaching the store.
	FailEnqueue atomic.Bool
}

// NewCounting wraps st.
func NewCounting(st storage.Store) *Counting {
	c := &Counting{Store: st, counts: map[string]int{}}
	c.counted = instrument.Wrap(st, instrument.Hooks{Before: c.before})
	return c
}

// before counts op and fails an Enqueue while FailEnqueue is set.
func (c *Counting) before(op instrument.Op) error {
	c.mu.Lock()
	c.counts[opNames[op]]++
	c.mu.Unlock()
	if op == instrument.QueueEnqueue && c.FailEnqueue.Load() {
		return ErrInjected
	}
	return nil
}

// Reset zeroes the counters.
func (c *Counting) Reset() {
	c.mu.Lock()
	c.counts = map[string]int{}
	c.mu.Unlock()
}

// Counts returns a copy of the counters.
func (c *Counting) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// Total returns the number of operations counted.
func (c *Counting) Total() int {
	n := 0
	for _, v := range c.Counts() {
		n += v
	}
	return n
}

// String lists the counters, sorted ("Batch=1 Enqueue=1").
func (c *Counting) String() string {
	m := c.Counts()
	var sb strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(k + "=" + strconv.Itoa(m[k]))
	}
	return sb.String()
}

// Queue returns the counting wrapper of the named queue. Opening a queue is
// not counted (drivers cache it).
func (c *Counting) Queue(ctx context.Context, name string) (storage.Queue, error) {
	return c.counted.Queue(ctx, name)
}

// Table returns the counting wrapper of the named table (opening is not counted).
func (c *Counting) Table(ctx context.Context, name string) (storage.Table, error) {
	return c.counted.Table(ctx, name)
}

// Messages peeks up to 32 messages of the named storage queue (not counted).
func (c *Counting) Messages(t testing.TB, queue string) []storage.Message {
	t.Helper()
	q, err := c.Store.Queue(context.Background(), queue)
	if err != nil {
		t.Fatalf("open queue %s: %v", queue, err)
	}
	msgs, err := q.Peek(context.Background(), storage.MaxDequeue)
	if err != nil {
		t.Fatalf("peek %s: %v", queue, err)
	}
	return msgs
}

// Queued returns how many messages queue holds, visible or not (those
// enqueued with a visibility delay included), read past the counter.
func (c *Counting) Queued(t testing.TB, queue string) int {
	t.Helper()
	q, err := c.Store.Queue(context.Background(), queue)
	if err != nil {
		t.Fatalf("open queue %s: %v", queue, err)
	}
	n, err := q.ApproximateCount(context.Background())
	if err != nil {
		t.Fatalf("count %s: %v", queue, err)
	}
	return n
}
