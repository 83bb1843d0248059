// Package shared owns the partitions of the base commands table that the
// whole deployment shares, besides the commands: the queues' control rows
// (pause, resume, the last cancel of a young command), the processors'
// heartbeat rows and the periodic schedules' rows (Partitions: their
// types, encoding, reads and writes). It also owns replication over
// several storage accounts (storage/multi): how each shared partition is
// written to and read from every account that answers, merged and
// repaired, and the helpers the other shared rows use for the same (Each,
// FromAny, ToOne, DeleteAll: the store's unqueued markers and day-table
// registrations).
//
// It does not write commands, events or poison entries (package record),
// and it does not decide what a pause or a heartbeat means to a processor
// (package processor).
package shared
