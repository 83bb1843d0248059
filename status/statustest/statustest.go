// Package statustest runs tests of code above storage against every real
// driver — the embedded store (a fresh file per test) and Azure Storage via
// Azurite (fresh names per test) — and wraps a store to count its
// operations or inject an Enqueue failure. It never mocks storage: every
// operation reaches the real driver.
//
// A test binary that uses it needs
//
//	func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }
package statustest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"path/filepath"
	"sort"
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
)

// Env is one driver's environment for a test.
type Env struct {
	// Driver is "embedded" or "azure".
	Driver string
	// Store is the counting wrapper around the real store.
	Store *Counting
	// Prefix is a name prefix unique to the test (Azurite is shared by the
	// test binary).
	Prefix string
}

// Each runs fn as parallel subtests "embedded" and "azure".
func Each(t *testing.T, fn func(t *testing.T, env Env)) {
	t.Helper()
	for _, driver := range []string{"embedded", "azure"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			fn(t, Open(t, driver))
		})
	}
}

// Open opens a fresh store of the named driver, closed when the test ends.
func Open(t testing.TB, driver string) Env {
	t.Helper()
	var st storage.Store
	switch driver {
	case "embedded":
		s, err := embedded.Open(filepath.Join(t.TempDir(), "x.db"), nil)
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
var ErrInjected = errors.New("statustest: injected enqueue failure")

// Counting wraps a real store and counts every queue and table operation by
// name ("Enqueue", "Dequeue", "Batch", "Query", …). It can make Enqueue fail.
type Counting struct {
	storage.Store
	mu     sync.Mutex
	counts map[string]int
	// FailEnqueue, while true, makes every Enqueue return ErrInjected
	// without reaching the store.
	FailEnqueue atomic.Bool
}

// NewCounting wraps st.
func NewCounting(st storage.Store) *Counting {
	return &Counting{Store: st, counts: map[string]int{}}
}

func (c *Counting) inc(op string) {
	c.mu.Lock()
	c.counts[op]++
	c.mu.Unlock()
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
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
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
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	for i, k := range keys {
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
	q, err := c.Store.Queue(ctx, name)
	if err != nil {
		return nil, err
	}
	return &countingQueue{Queue: q, c: c}, nil
}

// Table returns the counting wrapper of the named table (opening is not counted).
func (c *Counting) Table(ctx context.Context, name string) (storage.Table, error) {
	t, err := c.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return &countingTable{Table: t, c: c}, nil
}

type countingQueue struct {
	storage.Queue
	c *Counting
}

func (q *countingQueue) Enqueue(ctx context.Context, text string, delay, ttl time.Duration) (storage.Message, error) {
	q.c.inc("Enqueue")
	if q.c.FailEnqueue.Load() {
		return storage.Message{}, ErrInjected
	}
	return q.Queue.Enqueue(ctx, text, delay, ttl)
}

func (q *countingQueue) Dequeue(ctx context.Context, max int, vis time.Duration) ([]storage.Message, error) {
	q.c.inc("Dequeue")
	return q.Queue.Dequeue(ctx, max, vis)
}

func (q *countingQueue) UpdateVisibility(ctx context.Context, id, pr string, vis time.Duration) (string, time.Time, error) {
	q.c.inc("UpdateVisibility")
	return q.Queue.UpdateVisibility(ctx, id, pr, vis)
}

func (q *countingQueue) Delete(ctx context.Context, id, pr string) error {
	q.c.inc("DeleteMessage")
	return q.Queue.Delete(ctx, id, pr)
}

func (q *countingQueue) Peek(ctx context.Context, max int) ([]storage.Message, error) {
	q.c.inc("Peek")
	return q.Queue.Peek(ctx, max)
}

func (q *countingQueue) ApproximateCount(ctx context.Context) (int, error) {
	q.c.inc("ApproximateCount")
	return q.Queue.ApproximateCount(ctx)
}

type countingTable struct {
	storage.Table
	c *Counting
}

func (t *countingTable) Insert(ctx context.Context, e storage.Entity) (string, error) {
	t.c.inc("Insert")
	return t.Table.Insert(ctx, e)
}

func (t *countingTable) Get(ctx context.Context, pk, rk string) (storage.Entity, error) {
	t.c.inc("Get")
	return t.Table.Get(ctx, pk, rk)
}

func (t *countingTable) Update(ctx context.Context, e storage.Entity, mode storage.UpdateMode, ifMatch string) (string, error) {
	t.c.inc("Update")
	return t.Table.Update(ctx, e, mode, ifMatch)
}

func (t *countingTable) Upsert(ctx context.Context, e storage.Entity, mode storage.UpdateMode) (string, error) {
	t.c.inc("Upsert")
	return t.Table.Upsert(ctx, e, mode)
}

func (t *countingTable) Delete(ctx context.Context, pk, rk, ifMatch string) error {
	t.c.inc("DeleteEntity")
	return t.Table.Delete(ctx, pk, rk, ifMatch)
}

func (t *countingTable) Query(ctx context.Context, q storage.Query) (storage.Page, error) {
	t.c.inc("Query")
	return t.Table.Query(ctx, q)
}

func (t *countingTable) Batch(ctx context.Context, pk string, ops []storage.BatchOp) ([]string, error) {
	t.c.inc("Batch")
	return t.Table.Batch(ctx, pk, ops)
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
