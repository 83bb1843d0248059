// Package layout is cmdq's data layout, as pure functions and types: no
// storage call is made here. It owns the storage names derived from a prefix
// (Names: queues and their shards, the commands, poison and day tables), the
// command IDs that carry their issue day and the derived IDs (unique
// commands, periodic ticks), the row keys and partitions of the commands
// table, the limits of stored values and how values are encoded in
// entities, the queue message (Envelope), and the projection: how a
// command's events fold into its status (Apply, Settle, Own).
//
// It does not read or write anything: the store (package record) writes and
// loads the rows, package enqueue puts the messages on their queues.
// See docs/lifecycle.md, "Data layout".
package layout
