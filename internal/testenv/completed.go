package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/storage"
)

// CompletedAt stores, under prefix on st, a command of type typ issued and
// completed at issued (the writer's clock is set to then; its ID carries
// that day, so it lands in that day's table) and returns its ID: a command
// for retention tests to find old.
func CompletedAt(t testing.TB, st storage.Store, prefix string, issued time.Time, typ string) string {
	t.Helper()
	ctx := context.Background()
	old, err := read.Open(ctx, st, layout.Names{Prefix: prefix}, record.Options{Now: func() time.Time { return issued }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := layout.NewDayID(issued)
	if err := old.Store.Create(ctx, record.NewCommand{ID: id, Type: typ, Queue: model.DefaultQueue}); err != nil {
		t.Fatal(err)
	}
	rec, err := old.Store.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Store.Append(ctx, rec, model.Event{Kind: model.EventStarted, Attempt: 1}, model.Event{Kind: model.EventCompleted, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	return id
}
