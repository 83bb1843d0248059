// Package testhook lets cmdq's own test harnesses (the reliability suite's
// cmdq processes) reach engine switches that package cmdq keeps to its
// tests: cmd/cmdq honours CMDQ_TEST_CLOCK_SKEW through it. Nothing else
// uses it, and a program outside this module cannot import it.
package testhook

import (
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/storage"
)

// NewClient is set by package cmdq: cmdq.New with engine switches. cfg is
// a cmdq.Config and the result a *cmdq.Client (this package cannot name
// them: package cmdq imports it).
var NewClient func(st storage.Store, cfg any, sw tuning.Switches) (any, error)
