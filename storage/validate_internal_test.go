package storage

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCheckEntitySize checks that the one-pass validation sizes an entity
// as EntitySize does, so ValidateBatch's total and the entity limit did not
// change when the two passes became one.
func TestCheckEntitySize(t *testing.T) {
	entities := []Entity{
		{PartitionKey: "p", RowKey: "r"},
		{PartitionKey: "pärtition", RowKey: "a:cmd", Properties: map[string]any{
			"Type": "orders.place", "Params": `{"a":"ünïcödé ✓ 𝄞"}`, "Settled": int32(1), "EventSeq": int64(7),
			"Ok": true, "F": 1.5, "At": time.Unix(1, 2), "Bin": []byte{1, 2, 3}, "Empty": "",
		}},
	}
	for i, e := range entities {
		size, err := checkEntity(e)
		if err != nil {
			t.Fatalf("entity %d: %v", i, err)
		}
		if want := EntitySize(e); size != want {
			t.Errorf("entity %d: checkEntity size %d, EntitySize %d", i, size, want)
		}
	}
	big := Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{}}
	for i := range 17 {
		big.Properties["P"+strings.Repeat("x", i)] = strings.Repeat("y", MaxPropertyBytes/2)
	}
	if err := ValidateEntity(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("an entity over 1 MiB: got %v, want ErrTooLarge", err)
	}
	dup := []BatchOp{
		{Kind: OpInsert, Entity: Entity{PartitionKey: "p", RowKey: "a"}},
		{Kind: OpInsert, Entity: Entity{PartitionKey: "p", RowKey: "b"}},
		{Kind: OpDelete, Entity: Entity{PartitionKey: "p", RowKey: "a"}},
	}
	var be *BatchError
	if err := ValidateBatch("p", dup); !errors.As(err, &be) || be.Index != 2 || !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a row key twice in a small batch: got %v, want a BatchError at index 2", err)
	}
	var many []BatchOp
	for i := range 12 {
		many = append(many, BatchOp{Kind: OpInsert, Entity: Entity{PartitionKey: "p", RowKey: string(rune('a' + i))}})
	}
	many = append(many, BatchOp{Kind: OpInsert, Entity: Entity{PartitionKey: "p", RowKey: "c"}})
	if err := ValidateBatch("p", many); !errors.As(err, &be) || be.Index != 12 {
		t.Errorf("a row key twice in a large batch: got %v, want a BatchError at index 12", err)
	}
	if err := ValidateBatch("p", many[:12]); err != nil {
		t.Errorf("a valid batch of 12: %v", err)
	}
}
