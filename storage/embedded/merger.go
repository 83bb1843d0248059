package embedded

import (
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// entityMergerName is the engine merge operator's name. The engine
// records it in its OPTIONS file and in every data file, and refuses to
// open a store, or read a data file, recorded with another name. Stores
// of formats 1 to 4 never wrote a merge operand but were created with
// the engine's default operator, whose name their files carry; so the
// operator keeps that name (a rename would make every existing data file
// unreadable), and the store's marker (format 5) is what keeps earlier
// cmdq versions, whose operator is the engine's default, from opening a
// store that holds cmdq's operands.
const entityMergerName = "pebble.concatenate"

// entityMerger is the engine's merge operator (format 5). A table write
// that merges properties into an existing entity (storage.Merge) writes
// only the merged properties, as an engine merge operand under the
// entity's key: a format-2 record holding the patch, stamped with the
// write's time. The engine folds operands into the record below them
// when it reads the key, and for good when a compaction meets them
// (mergeRecords, without limits: the write that made each operand
// checked the merged entity's limits against the record it read). A
// merge operand is only ever written over an existing record, under the
// partition's lock that read it, so a fold always ends on a full record;
// every other key of the store is written with Set and Delete only.
//
// A completion then writes its dozen projection properties instead of
// the whole command row (its parameters, type, hash: all unchanged), and
// the log, the memtables and the flushes carry that much less.
var entityMerger = &pebble.Merger{
	Name: entityMergerName,
	Merge: func(key, value []byte) (pebble.ValueMerger, error) {
		return &recordMerger{acc: append([]byte(nil), value...)}, nil
	},
}

// recordMerger folds one key's operands as the engine hands them over:
// acc is the fold so far, a record or a patch.
type recordMerger struct {
	acc []byte
}

// MergeNewer folds a newer operand over the fold so far.
func (m *recordMerger) MergeNewer(value []byte) error {
	out, err := mergeRecords(nil, m.acc, value, recordTimestamp(value), 0)
	if err != nil {
		return fmt.Errorf("embedded: merge operand: %w", err)
	}
	m.acc = out
	return nil
}

// MergeOlder folds the fold so far over an older operand (or the record
// below them all).
func (m *recordMerger) MergeOlder(value []byte) error {
	out, err := mergeRecords(nil, value, m.acc, recordTimestamp(m.acc), 0)
	if err != nil {
		return fmt.Errorf("embedded: merge operand: %w", err)
	}
	m.acc = out
	return nil
}

// Finish returns the fold: the entity's record when it includes the
// record below the operands, else a patch that folds over it later.
func (m *recordMerger) Finish(includesBase bool) ([]byte, io.Closer, error) {
	return m.acc, nil, nil
}
