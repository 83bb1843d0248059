package cmdqtype

import "time"

// Control: cancelling commands and pausing queues (docs/lifecycle.md,
// "Cancelling" and "Paused queues").

// CancelResult is the outcome of cancelling a command (cmdq.Client.Cancel).
type CancelResult struct {
	// Status is the command's status after the cancel (State
	// StateCancelled).
	Status Status `json:"status"`
	// Already is true when the command was cancelled before: nothing was
	// written (the HTTP API answers 200 instead of 202).
	Already bool `json:"already,omitempty"`
}

// QueueInfo is one logical queue as an operator sees it (cmdq.Client.ListQueues,
// GET /v1/queues): its approximate depth and whether it is paused.
type QueueInfo struct {
	// Name is the logical queue name (such as "commands").
	Name string `json:"name"`
	// Depth is the approximate number of messages on the queue, visible or
	// not (storage.Queue.ApproximateCount); -1 when it could not be read.
	Depth int `json:"depth"`
	// Paused is true while the queue is paused: no processor starts its
	// commands (issuing into it still works).
	Paused bool `json:"paused"`
	// Since is when the queue was last paused or resumed (UTC; zero when
	// it never was).
	Since time.Time `json:"since,omitzero"`
	// By is who last paused or resumed it ("" when nobody did).
	By string `json:"by,omitempty"`
}

// ControlInterval is the longest a processor starts commands on what it
// last read of its queues' control rows (pause state, recent cancels): 9
// s. A processor reads them (one query for every queue) before it starts a
// command when its last read is older, so no processor starts a command of
// a paused queue later than 10 s after the pause was stored, and a busy
// processor reads them about once per ControlInterval; an idle one never
// (docs/processor.md, "Paused queues").
const ControlInterval = 9 * time.Second
