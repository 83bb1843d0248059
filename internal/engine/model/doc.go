// Package model holds the engine's plain types: a command's states,
// events and status, the poison table's entries, the queries and pages of
// the listings, command options, retry policies, the processor's reports
// and observations, the limits and defaults, and the sentinel errors.
//
// Package cmdq is where users see these, and where each is documented:
// cmdq defines its own types (the engine cannot import cmdq, which
// imports the engine) and converts at the boundary (convert.go there);
// its constants and sentinel errors are these ones (cmdq.ErrNotFound is
// model.ErrNotFound, cmdq.DefaultLease is model.DefaultLease), so each
// value has one home, here, and one documentation, there. The functions
// and methods here (validation, defaults, retry delays) are the engine's
// logic and are documented where they stand.
package model
