package storagetest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

func validationCases() []testCase {
	return []testCase{
		{"QueueNames", testValidationQueueNames},
		{"TableNames", testValidationTableNames},
		{"QueueArguments", testValidationQueueArguments},
		{"KeyCharacters", testValidationKeyCharacters},
		{"KeyTooLong", testValidationKeyTooLong},
		{"EntityTooLarge", testValidationEntityTooLarge},
		{"PropertyTooLarge", testValidationPropertyTooLarge},
		{"TooManyProperties", testValidationTooManyProperties},
		{"PropertyTypesAndNames", testValidationPropertyTypesAndNames},
		{"TypedProps", testValidationTypedProps},
		{"BatchSize", testValidationBatchSize},
		{"BatchCrossPartition", testValidationBatchCrossPartition},
		{"BatchDuplicateRowKey", testValidationBatchDuplicateRowKey},
		{"BatchBadEntity", testValidationBatchBadEntity},
	}
}

func testValidationQueueNames(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	for _, name := range []string{"", "ab", "Abc", "ab_c", "-abc", "abc-", "a--bc", "ab.c", "ab c", strings.Repeat("a", 64)} {
		_, err := s.Queue(ctx, name)
		wantErr(t, fmt.Sprintf("Store.Queue(%q)", name), err, storage.ErrInvalidName)
	}
	longest := "q" + randHex(61) + "q"
	q, err := s.Queue(ctx, longest)
	must(t, "Store.Queue with a 63-character name", err)
	_, err = q.Enqueue(ctx, "x", 0, 0)
	must(t, "Enqueue", err)
	hyphen := "q-" + randHex(8) + "-1"
	_, err = s.Queue(ctx, hyphen)
	must(t, fmt.Sprintf("Store.Queue(%q)", hyphen), err)
}

func testValidationTableNames(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	for _, name := range []string{"", "ab", "1abc", "a-bc", "a_bc", "ab.c", "tables", "Tables", strings.Repeat("a", 64)} {
		_, err := s.Table(ctx, name)
		wantErr(t, fmt.Sprintf("Store.Table(%q)", name), err, storage.ErrInvalidName)
	}
	longest := "T" + randHex(62)
	tb, err := s.Table(ctx, longest)
	must(t, "Store.Table with a 63-character mixed-case name", err)
	_, err = tb.Insert(ctx, ent("p", "r", nil))
	must(t, "Insert", err)
}

func testValidationQueueArguments(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	q := newQueue(t, s)
	_, err := q.Enqueue(ctx, "x", 0, 0)
	must(t, "Enqueue", err)
	for _, n := range []int{0, -1, storage.MaxDequeue + 1} {
		_, err := q.Dequeue(ctx, n, leaseLong)
		wantErr(t, fmt.Sprintf("Dequeue(%d)", n), err, storage.ErrInvalidArgument, "32")
		_, err = q.Peek(ctx, n)
		wantErr(t, fmt.Sprintf("Peek(%d)", n), err, storage.ErrInvalidArgument, "32")
	}
	for _, v := range []time.Duration{-time.Second, storage.MaxVisibility + time.Second} {
		_, err := q.Dequeue(ctx, 1, v)
		wantErr(t, fmt.Sprintf("Dequeue with visibility %s", v), err, storage.ErrInvalidArgument)
	}
	bad := []struct {
		what       string
		text       string
		delay, ttl time.Duration
	}{
		{"negative delay", "x", -time.Second, 0},
		{"delay over 7 days", "x", storage.MaxVisibility + time.Second, storage.NoExpiry},
		{"delay not shorter than ttl", "x", 10 * time.Second, 10 * time.Second},
		{"delay not shorter than the default ttl", "x", storage.DefaultTTL, 0},
		{"negative ttl", "x", 0, -2 * time.Second},
		{"invalid UTF-8", "x\xff", 0, 0},
	}
	for _, b := range bad {
		_, err := q.Enqueue(ctx, b.text, b.delay, b.ttl)
		wantErr(t, "Enqueue with "+b.what, err, storage.ErrInvalidArgument)
	}
	// Nothing refused may have been stored, and nothing was dequeued.
	ms, err := q.Peek(ctx, 32)
	must(t, "Peek", err)
	if len(ms) != 1 || ms[0].DequeueCount != 0 {
		t.Fatalf("after refused calls Peek shows %d messages (want 1, never dequeued)", len(ms))
	}
	d := dequeueOneEventually(ctx, t, q, leaseLong, time.Now().Add(5*time.Second), "the message")
	for _, v := range []time.Duration{-time.Second, storage.MaxVisibility + time.Second} {
		_, _, err := q.UpdateVisibility(ctx, d.ID, d.PopReceipt, v)
		wantErr(t, fmt.Sprintf("UpdateVisibility with %s", v), err, storage.ErrInvalidArgument)
	}
	// The refused updates must not have touched the lease.
	must(t, "Delete with the receipt from before the refused updates", q.Delete(ctx, d.ID, d.PopReceipt))
}

// badKeys holds one key per forbidden character class.
var badKeys = []string{"a/b", `a\b`, "a#b", "a?b", "a\x00b", "a\tb", "a\nb", "a\x1fb", "a\x7fb", "a\u0085b", "a\u009fb"}

func testValidationKeyCharacters(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	const msg = "keys may not contain"
	for _, k := range badKeys {
		for _, which := range []string{"PartitionKey", "RowKey"} {
			pk, rk := "p", "r"
			if which == "PartitionKey" {
				pk = k
			} else {
				rk = k
			}
			e := ent(pk, rk, map[string]any{"V": "x"})
			what := fmt.Sprintf("%s %q", which, k)
			_, err := tb.Insert(ctx, e)
			wantErr(t, "Insert with "+what, err, storage.ErrInvalidKey, msg)
			_, err = tb.Get(ctx, pk, rk)
			wantErr(t, "Get with "+what, err, storage.ErrInvalidKey, msg)
			_, err = tb.Update(ctx, e, storage.Merge, "")
			wantErr(t, "Update with "+what, err, storage.ErrInvalidKey, msg)
			_, err = tb.Upsert(ctx, e, storage.Replace)
			wantErr(t, "Upsert with "+what, err, storage.ErrInvalidKey, msg)
			err = tb.Delete(ctx, pk, rk, "")
			wantErr(t, "Delete with "+what, err, storage.ErrInvalidKey, msg)
			_, err = tb.Batch(ctx, pk, []storage.BatchOp{{Kind: storage.OpInsert, Entity: e}})
			wantErr(t, "Batch insert with "+what, err, storage.ErrInvalidKey, msg)
			_, err = tb.Batch(ctx, pk, []storage.BatchOp{{Kind: storage.OpDelete, Entity: e}})
			wantErr(t, "Batch delete with "+what, err, storage.ErrInvalidKey, msg)
		}
	}
	wantRows(t, "after refused writes", tb, "p")
}

func testValidationKeyTooLong(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	for _, long := range []string{strings.Repeat("k", storage.MaxKeyBytes/2+1), strings.Repeat("é", storage.MaxKeyBytes/2+1), strings.Repeat("k", storage.MaxKeyBytes+1)} {
		for _, which := range []string{"PartitionKey", "RowKey"} {
			pk, rk := "p", "r"
			if which == "PartitionKey" {
				pk = long
			} else {
				rk = long
			}
			e := ent(pk, rk, nil)
			what := fmt.Sprintf("%s of %d bytes", which, len(long))
			_, err := tb.Insert(ctx, e)
			wantErr(t, "Insert with "+what, err, storage.ErrTooLarge, "1 KiB")
			_, err = tb.Get(ctx, pk, rk)
			wantErr(t, "Get with "+what, err, storage.ErrTooLarge, "1 KiB")
			_, err = tb.Upsert(ctx, e, storage.Merge)
			wantErr(t, "Upsert with "+what, err, storage.ErrTooLarge, "1 KiB")
			wantErr(t, "Delete with "+what, tb.Delete(ctx, pk, rk, ""), storage.ErrTooLarge, "1 KiB")
		}
	}
}

// bigEntity returns an entity of 17 binary properties of 64 KiB: over 1 MiB.
func bigEntity(pk, rk string) storage.Entity {
	blob := bytes.Repeat([]byte{1}, storage.MaxPropertyBytes)
	props := map[string]any{}
	for i := range 17 {
		props[fmt.Sprintf("B%02d", i)] = blob
	}
	return ent(pk, rk, props)
}

func testValidationEntityTooLarge(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	e := bigEntity("p", "r")
	_, err := tb.Insert(ctx, e)
	wantErr(t, "Insert of an entity over 1 MiB", err, storage.ErrTooLarge, "1 MiB")
	_, err = tb.Upsert(ctx, e, storage.Replace)
	wantErr(t, "Upsert of an entity over 1 MiB", err, storage.ErrTooLarge, "1 MiB")
	_, err = tb.Insert(ctx, ent("p", "r", nil))
	must(t, "Insert", err)
	_, err = tb.Update(ctx, e, storage.Merge, "")
	wantErr(t, "Update with an entity over 1 MiB", err, storage.ErrTooLarge, "1 MiB")
	_, err = tb.Batch(ctx, "p", []storage.BatchOp{{Kind: storage.OpUpsert, Entity: e}})
	wantErr(t, "Batch with an entity over 1 MiB", err, storage.ErrTooLarge, "1 MiB")
	got, err := tb.Get(ctx, "p", "r")
	must(t, "Get", err)
	if len(got.Properties) != 0 {
		t.Fatalf("refused updates changed the entity: %d properties", len(got.Properties))
	}
}

func testValidationPropertyTooLarge(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	half := storage.MaxPropertyBytes / 2
	cases := map[string]any{
		"ASCII string of 32769 characters":       strings.Repeat("x", half+1),
		"string of 32769 two-byte characters":    strings.Repeat("é", half+1),
		"string of 16385 surrogate pairs":        strings.Repeat("🚀", half/2+1),
		"binary of 64 KiB + 1":                   bytes.Repeat([]byte{7}, storage.MaxPropertyBytes+1),
		"string of 32768 units plus an emoji":    strings.Repeat("x", half-1) + "🚀",
		"string of 65536 bytes of UTF-8 (ASCII)": strings.Repeat("y", storage.MaxPropertyBytes),
	}
	for what, v := range cases {
		_, err := tb.Insert(ctx, ent("p", "r", map[string]any{"P": v}))
		wantErr(t, "Insert with a "+what, err, storage.ErrTooLarge, "64 KiB")
		_, err = tb.Upsert(ctx, ent("p", "r", map[string]any{"P": v}), storage.Merge)
		wantErr(t, "Upsert with a "+what, err, storage.ErrTooLarge, "64 KiB")
	}
	wantRows(t, "after refused writes", tb, "p")
}

func testValidationTooManyProperties(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	props := map[string]any{}
	for i := range storage.MaxProperties {
		props[fmt.Sprintf("P%03d", i)] = int32(i)
	}
	_, err := tb.Insert(ctx, ent("p", "max", props))
	must(t, "Insert with 252 properties", err)
	e, err := tb.Get(ctx, "p", "max")
	must(t, "Get", err)
	sameProps(t, "entity with 252 properties", e.Properties, props)
	props["Extra"] = true
	_, err = tb.Insert(ctx, ent("p", "over", props))
	wantErr(t, "Insert with 253 properties", err, storage.ErrTooLarge, "252")
	_, err = tb.Update(ctx, ent("p", "max", props), storage.Replace, "")
	wantErr(t, "Update with 253 properties", err, storage.ErrTooLarge, "252")
}

func testValidationPropertyTypesAndNames(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	for what, v := range map[string]any{
		"int": 1, "uint32": uint32(1), "float32": float32(1), "nil": nil,
		"map": map[string]any{}, "[]string": []string{"a"}, "*string": new(string), "time.Duration": time.Second,
	} {
		_, err := tb.Insert(ctx, ent("p", "r", map[string]any{"V": v}))
		wantErr(t, "Insert with a property of type "+what, err, storage.ErrInvalidArgument, "type")
		_, err = tb.Upsert(ctx, ent("p", "r", map[string]any{"V": v}), storage.Merge)
		wantErr(t, "Upsert with a property of type "+what, err, storage.ErrInvalidArgument, "type")
	}
	for _, name := range []string{"", "1abc", "a-b", "a b", "PartitionKey", "RowKey", "Timestamp", "ETag", strings.Repeat("n", storage.MaxPropertyNameBytes+1)} {
		_, err := tb.Insert(ctx, ent("p", "r", map[string]any{name: "x"}))
		wantErr(t, fmt.Sprintf("Insert with property name %q", name), err, storage.ErrInvalidArgument)
	}
	wantRows(t, "after refused writes", tb, "p")
	long := strings.Repeat("n", storage.MaxPropertyNameBytes)
	_, err := tb.Insert(ctx, ent("p", "r", map[string]any{long: "x", "_under_score1": "y"}))
	must(t, "Insert with a 255-character property name", err)
}

func testValidationBatchSize(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	var ops []storage.BatchOp
	for i := range storage.MaxBatchOps + 1 {
		ops = append(ops, storage.BatchOp{Kind: storage.OpInsert, Entity: ent("p", fmt.Sprintf("r%03d", i), nil)})
	}
	_, err := tb.Batch(ctx, "p", ops)
	wantErr(t, "Batch of 101 operations", err, storage.ErrInvalidArgument, "100")
	_, err = tb.Batch(ctx, "p", nil)
	wantErr(t, "Batch of 0 operations", err, storage.ErrInvalidArgument)
	// Five entities of about 1 MiB each: over the 4 MiB batch payload.
	var big []storage.BatchOp
	blob := bytes.Repeat([]byte{1}, storage.MaxPropertyBytes)
	for i := range 5 {
		props := map[string]any{}
		for j := range 15 {
			props[fmt.Sprintf("B%02d", j)] = blob
		}
		big = append(big, storage.BatchOp{Kind: storage.OpInsert, Entity: ent("p", fmt.Sprintf("big%d", i), props)})
	}
	_, err = tb.Batch(ctx, "p", big)
	wantErr(t, "Batch over 4 MiB", err, storage.ErrTooLarge, "4 MiB")
	wantRows(t, "after refused batches", tb, "p")
}

func testValidationBatchCrossPartition(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	_, err := tb.Batch(ctx, "p", []storage.BatchOp{
		{Kind: storage.OpInsert, Entity: ent("p", "r0", nil)},
		{Kind: storage.OpInsert, Entity: ent("q", "r1", nil)},
	})
	wantBatchErr(t, "Batch spanning two partitions", err, 1, storage.ErrInvalidArgument)
	_, err = tb.Batch(ctx, "x", []storage.BatchOp{{Kind: storage.OpInsert, Entity: ent("p", "r0", nil)}})
	wantBatchErr(t, "Batch whose operation differs from its partition key", err, 0, storage.ErrInvalidArgument)
	wantRows(t, "after refused batches", tb, "p")
	wantRows(t, "after refused batches", tb, "q")
}

func testValidationBatchDuplicateRowKey(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	_, err := tb.Batch(ctx, "p", []storage.BatchOp{
		{Kind: storage.OpInsert, Entity: ent("p", "r0", nil)},
		{Kind: storage.OpInsert, Entity: ent("p", "r1", nil)},
		{Kind: storage.OpUpsert, Entity: ent("p", "r0", nil)},
	})
	wantBatchErr(t, "Batch with a row key twice", err, 2, storage.ErrInvalidArgument)
	wantRows(t, "after the refused batch", tb, "p")
}

func testValidationBatchBadEntity(t *testing.T, s storage.Store) {
	ctx := caseCtx(t)
	tb := newTable(t, s)
	_, err := tb.Batch(ctx, "p", []storage.BatchOp{
		{Kind: storage.OpInsert, Entity: ent("p", "r0", nil)},
		{Kind: storage.OpInsert, Entity: ent("p", "r1", map[string]any{"V": 1})},
	})
	wantBatchErr(t, "Batch with an unsupported property type", err, 1, storage.ErrInvalidArgument)
	_, err = tb.Batch(ctx, "p", []storage.BatchOp{
		{Kind: storage.OpInsert, Entity: ent("p", "r0", nil)},
		{Kind: storage.BatchOpKind(99), Entity: ent("p", "r1", nil)},
	})
	wantBatchErr(t, "Batch with an unknown operation kind", err, 1, storage.ErrInvalidArgument)
	wantRows(t, "after refused batches", tb, "p")
}
