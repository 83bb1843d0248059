// Package days knows which table holds a command (docs/lifecycle.md,
// "Retention"): its day table when its ID carries its issue day, else the
// base commands table. Tables creates a day table on its first write (and
// registers it in the base table first, in every account that answers),
// never on a read; it opens tables by name, lists the day tables (a
// listing reused for a minute), and drops one (for the sweep).
//
// It reads and writes no command: the store (package record) does, in
// the table Tables gives it; the names and the day an ID carries are the
// data layout's (package layout).
package days
