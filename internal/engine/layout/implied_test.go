package layout_test

import (
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// TestImpliedEvents: a command row holds its created event when it says
// so (CreatedInRow), and its last two events only while
// StartedSeq is EventSeq-1 on a completed command; a later event (a
// lease_lost) or any other state makes the start a stale value, and a row
// without the properties (every row of earlier versions) holds none.
func TestImpliedEvents(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	done := at.Add(3 * time.Millisecond)
	row := func(status string, eventSeq, startedSeq int64, startedAt time.Time) storage.Entity {
		p := map[string]any{"Status": status, "Attempts": int32(2), "Worker": "w1.1", "Owner": "m-7",
			"UpdatedAt": done, "EventSeq": eventSeq}
		if startedSeq != 0 {
			p[layout.StartedSeqProp] = startedSeq
		}
		if !startedAt.IsZero() {
			p[layout.StartedAtProp] = startedAt
		}
		return storage.Entity{PartitionKey: "c", RowKey: layout.RowCommand, Properties: p}
	}
	s, c, ok := layout.ImpliedEvents(row("completed", 5, 4, at))
	wantS := model.Event{Seq: 4, Kind: model.EventStarted, Time: at, Attempt: 2, Worker: "w1.1", MessageID: "m-7"}
	wantC := model.Event{Seq: 5, Kind: model.EventCompleted, Time: done, Attempt: 2, Worker: "w1.1"}
	if !ok || s != wantS || c != wantC {
		t.Fatalf("ImpliedEvents = %+v, %+v, %v; want %+v, %+v", s, c, ok, wantS, wantC)
	}
	for name, e := range map[string]storage.Entity{
		"a later event":        row("completed", 6, 4, at),
		"not completed":        row("running", 5, 4, at),
		"no start time":        row("completed", 5, 4, time.Time{}),
		"no start number":      row("completed", 5, 0, at),
		"a row without either": row("completed", 5, 0, time.Time{}),
	} {
		if s, c, ok := layout.ImpliedEvents(e); ok {
			t.Errorf("%s: ImpliedEvents = %+v, %+v, true; want none", name, s, c)
		}
	}
	if _, ok := layout.ImpliedCreated(row("pending", 1, 0, time.Time{})); ok {
		t.Errorf("a row without %s holds a created event", layout.CreatedInRowProp)
	}
	e := row("pending", 1, 0, time.Time{})
	e.Properties[layout.CreatedInRowProp] = true
	e.Properties["IssuedAt"] = at
	if c, ok := layout.ImpliedCreated(e); !ok || c != (model.Event{Seq: 1, Kind: model.EventCreated, Time: at}) {
		t.Errorf("ImpliedCreated = %+v, %v; want created 1 at %s", c, ok, at)
	}
}
