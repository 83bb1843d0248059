package layout

import (
	"fmt"
	"strings"

	"github.com/cmdq-dev/cmdq/storage"
)

// Row keys and partitions of the data layout (contract: operators read them).
const (
	// RowCommand is the command's row: the immutable command (type, params,
	// issued-at, correlation ID, queue) and its projection (status, attempts,
	// …) in one entity. Its ETag guards every write to the command.
	RowCommand = "a:cmd"
	// EventRowPrefix starts every event row key: "e:" + 10-digit sequence.
	EventRowPrefix = "e:"
	// CompletedAtProp, on a started event's row, says that the attempt
	// completed at that time and that its completed event (numbered one
	// more, the same attempt and worker, no other property) has no row
	// of its own: a handler that starts and completes inside one write
	// records both events in one row, read back as two.
	CompletedAtProp = "CompletedAt"
	// StartedAtProp and StartedSeqProp, on the command row, say that the
	// attempt that completed the command started and completed in one
	// write that added no event row: its started event (number
	// StartedSeq, at StartedAt, the projection's Attempts, Worker and
	// Owner as MessageID) and its completed event (number StartedSeq+1 =
	// EventSeq, at UpdatedAt, the same attempt and worker) are read from
	// the command row. They hold only while StartedSeq is EventSeq-1: a
	// later write (a lease_lost after the completion) first writes the
	// two events' row (a started row with CompletedAt, the implied
	// write's WriteID), so stale values on the row mean nothing
	// (ImpliedEvents).
	StartedAtProp  = "StartedAt"
	StartedSeqProp = "StartedSeq"
	// CreatedInRowProp (true), on the command row, says that the
	// command's created event (number 1, at IssuedAt, nothing else) has no
	// row of its own: the issue wrote the command row alone. An issue
	// with a run-at time (its created event carries RunAt) writes the
	// row, as every issue of earlier versions did (ImpliedCreated).
	CreatedInRowProp = "CreatedInRow"
	// UnqueuedPartition holds markers (RowKey = command ID, property Queue)
	// for commands whose enqueue failed after they were stored.
	UnqueuedPartition = "~unqueued"
)

// Size limits of stored values.
const (
	// ParamsChunkUnits is the most UTF-16 code units per Params property
	// (32768 units = the 64 KiB string limit).
	ParamsChunkUnits = storage.MaxPropertyBytes / 2
	// MaxParamsChunks is the most Params properties (Params, Params1 …
	// Params15): 16 × 32768 units, about what one 1 MiB entity holds.
	MaxParamsChunks = 16
	// MaxTextUnits bounds error, note and reason texts (8192 UTF-16 units);
	// longer ones are truncated with a marker.
	MaxTextUnits = 8192
	// MaxDetailUnits bounds Event.Detail (stack traces), 16384 UTF-16 units.
	MaxDetailUnits = 16384
	// MaxEventsPerAppend is the most events one Append writes (one batch
	// holds 100 operations; one is the update of the command row).
	MaxEventsPerAppend = storage.MaxBatchOps - 1
)

// EventRowKey returns the row key of event seq: "e:" + 10 zero-padded digits.
func EventRowKey(seq int64) string {
	if seq < 0 || seq > 9_999_999_999 {
		return fmt.Sprintf("%s%010d", EventRowPrefix, seq)
	}
	var b [len(EventRowPrefix) + 10]byte
	n := copy(b[:], EventRowPrefix)
	for i := len(b) - 1; i >= n; i-- {
		b[i] = byte('0' + seq%10)
		seq /= 10
	}
	return string(b[:])
}

// DaysPartition is the base table's partition that registers the day
// tables (docs/lifecycle.md, "Retention"): one row per day table, RowKey
// DayRowPrefix + the table's name, property Table. Its row keys start
// with RowCommand, so the pending scan's query of the base table's command
// rows returns them in the same request: an idle deployment learns that
// there is no day table to scan without listing the account's tables.
const DaysPartition = "~days"

// DayRowPrefix starts the row key of a day table's registration.
const DayRowPrefix = RowCommand + "~"

// DayTableOf returns the day table a registration row names ("" if e is
// not one).
func DayTableOf(e storage.Entity) string {
	if e.PartitionKey != DaysPartition || !strings.HasPrefix(e.RowKey, DayRowPrefix) {
		return ""
	}
	return e.RowKey[len(DayRowPrefix):]
}
