// Package record is the store of commands: Store creates a command (its
// row and created event in one batch), loads it (one point read), appends
// its events with its projection (one conditional batch, idempotent for
// its own write), poisons it (the poison entry, then the poisoned event),
// marks it for the reconciler when its enqueue failed, discards and
// cancels it, and reads a command's status, its events and its poison
// entry. Completer groups the final writes of concurrent completions.
// It writes each command in the table of its ID (package days: its day
// table, created on first write, or the base table). The retention policy
// lives here, for the error of a read of a command removed by retention.
//
// A Store embeds the shared partitions (package shared: control rows,
// heartbeats, periodic schedules). It puts nothing on a queue (package
// enqueue), lists nothing (package read), and neither reconciles (package
// reconcile) nor sweeps (package retention). Names, row keys, IDs and the
// projection are the data layout's (package layout).
package record
