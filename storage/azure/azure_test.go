package azure_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

var (
	sharedOnce  sync.Once
	sharedStore *azure.Store
	sharedErr   error
)

// openStore returns one Store shared by the tests, on Azurite (or the
// account in AZURE_STORAGE_CONNECTION_STRING).
func openStore(t testing.TB) *azure.Store {
	t.Helper()
	conn := azurite.ConnectionString(t)
	sharedOnce.Do(func() {
		sharedStore, sharedErr = azure.Open(context.Background(), azure.Config{
			ConnectionString: conn,
			Retry:            policy.RetryOptions{MaxRetries: 2, RetryDelay: 50 * time.Millisecond, TryTimeout: 30 * time.Second},
		})
	})
	if sharedErr != nil {
		t.Fatalf("Open: %v", sharedErr)
	}
	return sharedStore
}

func unique(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newQueue(t testing.TB) storage.Queue {
	t.Helper()
	q, err := openStore(t).Queue(ctxT(t), unique("q"))
	if err != nil {
		t.Fatalf("Queue: %v", err)
	}
	return q
}

func newTable(t testing.TB) storage.Table {
	t.Helper()
	tb, err := openStore(t).Table(ctxT(t), unique("t"))
	if err != nil {
		t.Fatalf("Table: %v", err)
	}
	return tb
}

func dequeueOne(t *testing.T, q storage.Queue, vis time.Duration) storage.Message {
	t.Helper()
	ms, err := q.Dequeue(ctxT(t), 1, vis)
	if err != nil {
		t.Fatalf("Dequeue: %v", err)
	}
	if len(ms) != 1 {
		t.Fatalf("Dequeue returned %d messages, want 1", len(ms))
	}
	return ms[0]
}

func TestUpdateVisibilityKeepsText(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	q := newQueue(t)
	text := `{"id":"42","type":"x"} <&> ünïcode ✓`
	if _, err := q.Enqueue(ctx, text, 0, 0); err != nil {
		t.Fatal(err)
	}
	m := dequeueOne(t, q, 30*time.Second)
	before := time.Now()
	pr, next, err := q.UpdateVisibility(ctx, m.ID, m.PopReceipt, 0)
	if err != nil {
		t.Fatalf("UpdateVisibility: %v", err)
	}
	if pr == "" || pr == m.PopReceipt {
		t.Fatalf("new pop receipt %q, want a fresh non-empty one (old %q)", pr, m.PopReceipt)
	}
	if next.After(before.Add(2 * time.Second)) {
		t.Fatalf("next visible %v, want about now (%v) for visibility 0", next, before)
	}
	m2 := dequeueOne(t, q, 30*time.Second)
	if m2.Text != text {
		t.Fatalf("text after UpdateVisibility = %q, want %q", m2.Text, text)
	}
	if m2.DequeueCount != 2 {
		t.Fatalf("DequeueCount = %d, want 2", m2.DequeueCount)
	}
	// Visibility is applied (not the SDK's default 0): extend and check the
	// message stays hidden.
	_, next, err = q.UpdateVisibility(ctx, m2.ID, m2.PopReceipt, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(next); d < 0 || d > 3*time.Second {
		t.Fatalf("next visible in %v, want about 2s (1.5s rounded up)", d)
	}
	if ms, err := q.Dequeue(ctx, 1, time.Second); err != nil || len(ms) != 0 {
		t.Fatalf("Dequeue right after extending: %d messages, err %v; want none", len(ms), err)
	}
}

func TestLeaseErrors(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	q := newQueue(t)
	if _, err := q.Enqueue(ctx, "a", 0, 0); err != nil {
		t.Fatal(err)
	}
	m := dequeueOne(t, q, 30*time.Second)
	pr, _, err := q.UpdateVisibility(ctx, m.ID, m.PopReceipt, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.UpdateVisibility(ctx, m.ID, m.PopReceipt, time.Second); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("UpdateVisibility with stale receipt: %v, want ErrLeaseLost", err)
	}
	if err := q.Delete(ctx, m.ID, m.PopReceipt); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("Delete with stale receipt: %v, want ErrLeaseLost", err)
	}
	var re *azcore.ResponseError
	err = q.Delete(ctx, m.ID, m.PopReceipt)
	if !errors.As(err, &re) || !strings.Contains(err.Error(), re.ErrorCode) {
		t.Fatalf("error %v should wrap *azcore.ResponseError and name its code", err)
	}
	if err := q.Delete(ctx, m.ID, pr); err != nil {
		t.Fatalf("Delete with current receipt: %v", err)
	}
	if err := q.Delete(ctx, m.ID, pr); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("second Delete: %v, want ErrNotFound", err)
	}
	if _, _, err := q.UpdateVisibility(ctx, m.ID, pr, time.Second); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("UpdateVisibility of deleted message: %v, want ErrLeaseLost", err)
	}
}

func TestEnqueueTimes(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	q := newQueue(t)
	before := time.Now()
	m, err := q.Enqueue(ctx, "x", 2500*time.Millisecond, storage.NoExpiry)
	if err != nil {
		t.Fatal(err)
	}
	if !m.ExpiresAt.IsZero() {
		t.Fatalf("ExpiresAt = %v, want zero for NoExpiry", m.ExpiresAt)
	}
	// 2.5 s is sent as 3 s; InsertedAt is cut to the second and
	// NextVisibleAt is not early: the answer's arrival plus 3 s.
	if d := m.NextVisibleAt.Sub(m.InsertedAt); d < 3*time.Second || d > 5*time.Second {
		t.Fatalf("NextVisibleAt-InsertedAt = %v, want 3s (2.5s rounded up) to 5s (the second InsertedAt is cut to, and the answer's way back)", d)
	}
	if !m.NextVisibleAt.After(before.Add(3 * time.Second)) {
		t.Fatalf("NextVisibleAt = %s, early: the call started at %s and 3 s were sent", m.NextVisibleAt.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano))
	}
	// A dequeue at NextVisibleAt finds the message: no wake-up is early.
	time.Sleep(time.Until(m.NextVisibleAt))
	ms, err := q.Dequeue(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Dequeue at NextVisibleAt: %d messages, %v; want the message", len(ms), err)
	}
	before = time.Now()
	_, next, err := q.UpdateVisibility(ctx, ms[0].ID, ms[0].PopReceipt, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if !next.After(before.Add(2 * time.Second)) {
		t.Fatalf("UpdateVisibility's next visible time %s is early: the call started at %s and 2 s were sent", next.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano))
	}
	time.Sleep(time.Until(next))
	if ms, err = q.Dequeue(ctx, 1, time.Minute); err != nil || len(ms) != 1 {
		t.Fatalf("Dequeue at UpdateVisibility's next visible time: %d messages, %v; want the message", len(ms), err)
	}
	m, err = q.Enqueue(ctx, "y", 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if d := m.ExpiresAt.Sub(m.InsertedAt); d != time.Hour {
		t.Fatalf("ExpiresAt-InsertedAt = %v, want 1h", d)
	}
	if m.InsertedAt.Location() != time.UTC {
		t.Fatalf("InsertedAt not UTC: %v", m.InsertedAt)
	}
	if _, err := q.Enqueue(ctx, "bad\x01text", 0, 0); !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("Enqueue with control character: %v, want ErrInvalidArgument", err)
	}
}

func TestPropertyTypesRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	tb := newTable(t)
	ts := time.Date(2024, 5, 6, 7, 8, 9, 123456700, time.UTC)
	props := map[string]any{
		"S": "it's \"quoted\"", "B": []byte{0, 1, 2, 255}, "T": true, "I32": int32(-7),
		"I64": int64(math.MaxInt64), "I64small": int64(3), "F": 3.0, "Fneg": -0.5, "Big": 1e300,
		"NaN": math.NaN(), "Inf": math.Inf(1), "When": ts, "Empty": "",
	}
	etag, err := tb.Insert(ctx, storage.Entity{PartitionKey: "p'1", RowKey: "r", Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tb.Get(ctx, "p'1", "r")
	if err != nil {
		t.Fatal(err)
	}
	if got.ETag != etag {
		t.Fatalf("Get ETag %q, Insert returned %q", got.ETag, etag)
	}
	if got.Timestamp.IsZero() || got.PartitionKey != "p'1" {
		t.Fatalf("Get returned %+v", got)
	}
	for k, want := range props {
		v, ok := got.Properties[k]
		if !ok {
			t.Errorf("property %s missing", k)
			continue
		}
		switch w := want.(type) {
		case []byte:
			if b, ok := v.([]byte); !ok || string(b) != string(w) {
				t.Errorf("%s = %#v, want %#v", k, v, w)
			}
		case float64:
			f, ok := v.(float64)
			if !ok || !(f == w || math.IsNaN(f) && math.IsNaN(w)) {
				t.Errorf("%s = %#v (%T), want %#v", k, v, v, w)
			}
		case time.Time:
			if tt, ok := v.(time.Time); !ok || !tt.Equal(w) || tt.Location() != time.UTC {
				t.Errorf("%s = %#v, want %v UTC", k, v, w)
			}
		default:
			if v != want {
				t.Errorf("%s = %#v (%T), want %#v (%T)", k, v, v, want, want)
			}
		}
	}
	page, err := tb.Query(ctx, storage.Query{PartitionKey: "p'1"})
	if err != nil || len(page.Entities) != 1 {
		t.Fatalf("Query: %v, %d entities", err, len(page.Entities))
	}
	if _, ok := page.Entities[0].Properties["F"].(float64); !ok {
		t.Fatalf("Query: F is %T, want float64", page.Entities[0].Properties["F"])
	}
	if page.Entities[0].ETag != etag {
		t.Fatalf("Query ETag %q, want %q", page.Entities[0].ETag, etag)
	}
}

func TestTableErrorsAndBatch(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	tb := newTable(t)
	e := storage.Entity{PartitionKey: "p", RowKey: "a", Properties: map[string]any{"N": int32(1)}}
	etag, err := tb.Insert(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Insert(ctx, e); !errors.Is(err, storage.ErrExists) {
		t.Fatalf("duplicate Insert: %v, want ErrExists", err)
	}
	etag2, err := tb.Update(ctx, e, storage.Merge, etag)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Update(ctx, e, storage.Replace, etag); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("Update with old ETag: %v, want ErrConflict", err)
	}
	if _, err := tb.Update(ctx, storage.Entity{PartitionKey: "p", RowKey: "zz"}, storage.Merge, ""); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Update of missing entity: %v, want ErrNotFound", err)
	}
	if _, err := tb.Get(ctx, "p", "zz"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get missing: %v, want ErrNotFound", err)
	}

	ops := []storage.BatchOp{
		{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: "p", RowKey: "b"}},
		{Kind: storage.OpUpdate, Mode: storage.Merge, IfMatch: etag2, Entity: storage.Entity{PartitionKey: "p", RowKey: "a", Properties: map[string]any{"M": "x"}}},
		{Kind: storage.OpUpsert, Mode: storage.Replace, Entity: storage.Entity{PartitionKey: "p", RowKey: "c"}},
	}
	etags, err := tb.Batch(ctx, "p", ops)
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	if len(etags) != 3 {
		t.Fatalf("Batch returned %d etags, want 3", len(etags))
	}
	for i, rk := range []string{"b", "a", "c"} {
		got, err := tb.Get(ctx, "p", rk)
		if err != nil {
			t.Fatal(err)
		}
		if got.ETag != etags[i] {
			t.Errorf("op %d: Batch ETag %q, stored %q", i, etags[i], got.ETag)
		}
	}

	// Failing op in the middle: nothing applied, index reported.
	ops = []storage.BatchOp{
		{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: "p", RowKey: "d"}},
		{Kind: storage.OpDelete, Entity: storage.Entity{PartitionKey: "p", RowKey: "e"}},
		{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: "p", RowKey: "b"}},
	}
	_, err = tb.Batch(ctx, "p", ops)
	var be *storage.BatchError
	if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Batch with missing delete at 1: %v, want *BatchError index 1 wrapping ErrNotFound", err)
	}
	ops[1] = storage.BatchOp{Kind: storage.OpUpdate, IfMatch: etag, Entity: storage.Entity{PartitionKey: "p", RowKey: "a"}}
	_, err = tb.Batch(ctx, "p", ops)
	if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("Batch with stale ETag at 1: %v, want *BatchError index 1 wrapping ErrConflict", err)
	}
	ops[1] = storage.BatchOp{Kind: storage.OpDelete, Entity: storage.Entity{PartitionKey: "p", RowKey: "c"}}
	_, err = tb.Batch(ctx, "p", ops)
	if !errors.As(err, &be) || be.Index != 2 || !errors.Is(err, storage.ErrExists) {
		t.Fatalf("Batch with duplicate insert at 2: %v, want *BatchError index 2 wrapping ErrExists", err)
	}
	if _, err := tb.Get(ctx, "p", "d"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("failed batch applied op 0: Get d = %v", err)
	}
	if _, err := tb.Get(ctx, "p", "c"); err != nil {
		t.Fatalf("failed batch applied op 1: Get c = %v", err)
	}
}

func TestQueryPrefixAndContinuation(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	tb := newTable(t)
	var ops []storage.BatchOp
	for _, rk := range []string{"a1", "a2", "a3", "a4", "a5", "b1", "a"} {
		ops = append(ops, storage.BatchOp{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: "p", RowKey: rk}})
	}
	if _, err := tb.Batch(ctx, "p", ops); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: "q", RowKey: "a9"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	q := storage.Query{PartitionKey: "p", RowKeyPrefix: "a", Top: 2}
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("too many pages")
		}
		page, err := tb.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entities {
			got = append(got, e.RowKey)
		}
		if page.Continuation == "" {
			break
		}
		q.Continuation = page.Continuation
	}
	if strings.Join(got, ",") != "a,a1,a2,a3,a4,a5" {
		t.Fatalf("prefix query returned %v", got)
	}
	if _, err := tb.Query(ctx, storage.Query{Continuation: "garbage"}); !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("bad continuation: %v, want ErrInvalidArgument", err)
	}
}

func TestValidationBeforeIO(t *testing.T) {
	t.Parallel()
	// A store pointing at a closed port: validation errors must come back
	// without any request (a request would fail with a connection error).
	st, err := azure.Open(context.Background(), azure.Config{
		AccountName: "devstoreaccount1", AccountKey: "a2V5",
		QueueEndpoint: "http://127.0.0.1:1/devstoreaccount1", TableEndpoint: "http://127.0.0.1:1/devstoreaccount1",
		Retry: policy.RetryOptions{MaxRetries: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := st.Queue(ctx, "Bad_Name"); !errors.Is(err, storage.ErrInvalidName) {
		t.Fatalf("Queue(bad name): %v", err)
	}
	if _, err := st.Table(ctx, "1bad"); !errors.Is(err, storage.ErrInvalidName) {
		t.Fatalf("Table(bad name): %v", err)
	}
	if _, err := st.Queue(ctx, "goodname"); err == nil {
		t.Fatal("Queue on an unreachable endpoint succeeded")
	}
	_ = st.Close()
	if _, err := st.Queue(ctx, "goodname"); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Queue after Close: %v, want ErrClosed", err)
	}

	q := newQueue(t)
	tb := newTable(t)
	if _, err := q.Dequeue(ctx, 33, time.Second); !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("Dequeue(33): %v", err)
	}
	if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: "a/b"}); !errors.Is(err, storage.ErrInvalidKey) {
		t.Fatalf("Insert with / in key: %v", err)
	}
	if _, err := tb.Query(ctx, storage.Query{Top: 1001}); !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("Query Top 1001: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	err := azure.Config{
		ConnectionString: "x", AccountKey: "not base64!", QueueEndpoint: "ftp://x",
		Credential: fakeCred{},
	}.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	for _, want := range []string{"only one of", "AccountKey needs AccountName", "not base64", "QueueEndpoint \"ftp://x\"", "Credential needs AccountName"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error lacks %q:\n%v", want, err)
		}
	}
	if err := (azure.Config{AccountName: "acct", Credential: fakeCred{}}).Validate(); err != nil {
		t.Errorf("AccountName+Credential: %v", err)
	}
	if err := (azure.Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
}

type fakeCred struct{}

func (fakeCred) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{}, errors.New("no token")
}

func TestOpenFromEnv(t *testing.T) {
	conn := azurite.ConnectionString(t)
	t.Setenv(azure.EnvConnectionString, conn)
	st, err := azure.Open(context.Background(), azure.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := ctxT(t)
	q, err := st.Queue(ctx, unique("env"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, "hi", 0, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := q.ApproximateCount(ctx); err != nil || n != 1 {
		t.Fatalf("ApproximateCount = %d, %v; want 1", n, err)
	}

	t.Setenv(azure.EnvConnectionString, "")
	if _, err := azure.Open(context.Background(), azure.Config{}); err == nil || !strings.Contains(err.Error(), azure.EnvConnectionString) {
		t.Fatalf("Open with no credentials: %v, want an error naming %s", err, azure.EnvConnectionString)
	}
}

// aztables refuses empty PartitionKeys in URLs; the driver works around it
// for single operations and batches.
func TestEmptyPartitionKeyBatch(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	tb := newTable(t)
	etags, err := tb.Batch(ctx, "", []storage.BatchOp{
		{Kind: storage.OpInsert, Entity: storage.Entity{RowKey: "a", Properties: map[string]any{"V": "x"}}},
		{Kind: storage.OpUpsert, Mode: storage.Merge, Entity: storage.Entity{RowKey: "b", Properties: map[string]any{"V": "y"}}},
	})
	if err != nil {
		t.Fatalf("Batch on the empty partition: %v", err)
	}
	_, err = tb.Batch(ctx, "", []storage.BatchOp{
		{Kind: storage.OpUpdate, Mode: storage.Replace, IfMatch: etags[0], Entity: storage.Entity{RowKey: "a", Properties: map[string]any{"W": int32(1)}}},
		{Kind: storage.OpDelete, IfMatch: etags[1], Entity: storage.Entity{RowKey: "b"}},
	})
	if err != nil {
		t.Fatalf("update+delete batch on the empty partition: %v", err)
	}
	got, err := tb.Get(ctx, "", "a")
	if err != nil {
		t.Fatal(err)
	}
	if got.PartitionKey != "" || got.Properties["W"] != int32(1) || got.Properties["V"] != nil {
		t.Fatalf("after replace: %+v", got)
	}
	if _, err := tb.Get(ctx, "", "b"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get deleted b: %v", err)
	}
	page, err := tb.Query(ctx, storage.Query{})
	if err != nil || len(page.Entities) != 1 || page.Entities[0].PartitionKey != "" {
		t.Fatalf("Query: %v %+v", err, page.Entities)
	}
}
