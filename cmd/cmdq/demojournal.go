package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// demoJournal is test instrumentation for the reliability suite
// (internal/chaos): with the hidden flag --demo-journal FILE (or
// CMDQ_DEMO_JOURNAL) every demo handler execution appends JSON lines to FILE,
// so that the suite can count executions from outside the process and
// compare them with each command's history. Several processes may share the
// file: each line is one write(2) on a file opened with O_APPEND, so lines
// never interleave and their order in the file is the order they were
// written.
//
// Lines (one JSON object each; fields "t" RFC 3339 time with nanoseconds,
// "pid", "worker", "id", "type", "attempt"):
//
//	{"ev":"begin","last":L}        the handler starts; L = run.LastStep()
//	{"ev":"step","step":S}         a demo.steps / demo.echo step starts
//	{"ev":"stepped","step":S}      run.CompleteStep(S) returned nil (recorded)
//	{"ev":"end","err":"…"}         the handler returns (err empty on success)
//
// A nil *demoJournal journals nothing.
type demoJournal struct {
	mu     sync.Mutex
	f      *os.File
	pid    int
	worker string
}

// openDemoJournal opens (creating) path for appending.
func openDemoJournal(path, worker string) (*demoJournal, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--demo-journal: %w", err)
	}
	return &demoJournal{f: f, pid: os.Getpid(), worker: worker}, nil
}

// journalLine is one line of the journal.
type journalLine struct {
	T       time.Time `json:"t"`
	PID     int       `json:"pid"`
	Worker  string    `json:"worker,omitempty"`
	Ev      string    `json:"ev"`
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Attempt int       `json:"attempt"`
	Last    int       `json:"last,omitempty"`
	Step    int       `json:"step,omitempty"`
	Err     string    `json:"err,omitempty"`
}

func (j *demoJournal) write(run *cmdq.Attempt, l journalLine) {
	if j == nil {
		return
	}
	l.T, l.PID, l.Worker = time.Now().UTC(), j.pid, j.worker
	l.ID, l.Type, l.Attempt = run.ID(), run.Type(), run.Number()
	b, err := json.Marshal(l)
	if err != nil {
		return
	}
	b = append(b, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	// A failed journal write cannot be reported anywhere useful; the suite
	// notices the missing line.
	_, _ = j.f.Write(b)
}

// execution journals the start of a handler execution and returns the
// function that journals its end; use as `defer j.execution(run)(&err)`.
func (j *demoJournal) execution(run *cmdq.Attempt) func(*error) {
	if j == nil {
		return func(*error) {}
	}
	j.write(run, journalLine{Ev: "begin", Last: run.LastStep()})
	return func(errp *error) {
		l := journalLine{Ev: "end"}
		if *errp != nil {
			l.Err = (*errp).Error()
			if l.Err == "" {
				l.Err = "error"
			}
		}
		j.write(run, l)
	}
}

// step runs run.CompleteStep(ctx, n, note), journalling before and after.
func (j *demoJournal) step(ctx context.Context, run *cmdq.Attempt, n int, note string) error {
	j.write(run, journalLine{Ev: "step", Step: n})
	if err := run.CompleteStep(ctx, n, note); err != nil {
		return err
	}
	j.write(run, journalLine{Ev: "stepped", Step: n})
	return nil
}

// Close closes the journal file.
func (j *demoJournal) Close() error {
	if j == nil {
		return nil
	}
	return j.f.Close()
}
