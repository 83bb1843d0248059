// Package read is a commands log as a client reads it: Reader, a Store
// (point reads, operator actions, the shared rows), its Enqueuer
// (requeue, run-now, queue depth) and the listings: ListCommands (by ID or
// newest first, filtered, across the day tables, with an optional summary
// of outcomes and latency per interval, type and queue) and ListPoison.
//
// The listings only read; a point read (Get, Events) and everything that
// writes are the Store's (package record) or go through the one enqueue
// path (package enqueue).
package read
