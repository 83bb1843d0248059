package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// TestNotifyStoreKeepsCombiner: serve's wake-up wrapper keeps the embedded
// store's one-commit path and still wakes the processor on a combined issue.
func TestNotifyStoreKeepsCombiner(t *testing.T) {
	t.Parallel()
	raw, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var woken []string
	ns := &notifyStore{Store: raw, notify: func(q string) { woken = append(woken, q) }}
	cb, ok := ns.withCombiner().(storage.Combiner)
	if !ok {
		t.Fatal("notifyStore hid the embedded store's storage.Combiner")
	}
	ops := []storage.BatchOp{{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: "p", RowKey: "r"}}}
	if _, _, err := cb.BatchEnqueue(context.Background(), "cmdqcommands", "p", ops, "cmdq-commands", "hello", 0, 0); err != nil {
		t.Fatal(err)
	}
	if len(woken) != 1 || woken[0] != "cmdq-commands" {
		t.Fatalf("woken %v, want [cmdq-commands]", woken)
	}
}
