// Package retention removes commands past their retention
// (docs/lifecycle.md, "Retention"): Sweep drops the day tables whose
// commands are all final and expired, moves the commands that must
// outlive their table to the base table, and deletes the base table's
// expired commands; Sweeper is how a processor runs it (after its
// reconciler's daily pending scan found anything) and what it reports.
//
// The policy itself (record.RetentionPolicy: how long each kind of final
// command is kept) is the store's, which also uses it to tell a command
// removed by retention (model.ErrExpired) from an unknown one. Which table
// holds a command (the day tables, created on first write) is package
// days'.
package retention
