package cmdq

// NewTuned is New with engine switches (internal/engine/tuning), for this
// package's own tests.
var NewTuned = newClient
