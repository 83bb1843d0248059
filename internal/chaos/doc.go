// Package chaos is cmdq's reliability suite: it drives real `cmdq serve` and
// `cmdq worker` processes on real storage (the embedded store, Azurite),
// breaks them while commands of every demo kind flow — SIGKILL at random
// moments, storage faults through the project's in-process fault proxy
// (internal/faultproxy: its TCP proxy for latency, resets, stalls, black
// holes and refused connections; its HTTP rule proxy for bursts of 503 and
// answers lost after a write landed), Azurite stopped and restarted, three
// workers competing on one queue, a worker whose lease renewals are blocked
// — and then checks, from the outside (the HTTP API, the storage through the
// project's drivers, and a journal the demo handlers append to), that no
// accepted command was lost, completed twice or ran a recorded step again,
// and that every extra handler execution is explained.
//
// The tests in this package run the short form (part of `make test`); set
// CMDQ_CHAOS=long (`make chaos-long`) for the long one, and CMDQ_CHAOS_SEED
// to replay a run's schedule. docs/reliability.md describes the guarantees
// and which test proves each.
package chaos
