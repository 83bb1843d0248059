// Package cmdqtype holds the plain types that package cmdq (the front door)
// and its engine share: a command's states, events and status, the poison
// table's entries, the queries and pages of the listings, command options,
// retry policies, the processor's health and counts, observations, the
// limits and defaults, and the sentinel errors callers branch on.
//
// Programs do not need to import it: package cmdq names every type,
// constant and error here (cmdq.Status is cmdqtype.Status, cmdq.ErrNotFound
// is cmdqtype.ErrNotFound, …). Its fields are documented here. It imports
// no other package of cmdq, so the Go client of the HTTP API (package
// client) uses it without the engine.
package cmdqtype
