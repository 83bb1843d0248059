package model

import "time"

// The processors' heartbeats: every running processor writes a row saying
// who and where it is and what it does, at most once a
// DefaultHeartbeatInterval (docs/lifecycle.md, "Processor heartbeats"),
// so that operators see every processor on every machine
// (cmdq.Client.Processors, GET /v1/processors, the console's overview).

// Heartbeat defaults and limits (documented in package cmdq).
const (
	DefaultHeartbeatInterval               = time.Minute
	NoHeartbeat              time.Duration = -1
	ProcessorGoneAfter                     = 3
	ProcessorForgetAfter                   = time.Hour
)
