package shared

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/storage"
)

// ProcessorPartition holds the processors' heartbeat rows in the base
// commands table (data layout, docs/lifecycle.md "Processor heartbeats"):
// one row per running processor, RowKey = its instance ID (made when the
// processor is created, so a restart is a new row); properties Name (the
// worker name), Host, PID, State, InFlight, Concurrency, Queues (the
// logical queues it polls, comma-separated), Started (when its run began)
// Seen (when the row was written), Every (the heartbeat interval, in
// milliseconds), the run's counts (Completed, Failed, Poisoned) and those
// of the last interval (RecentCompleted, …), and its last failure
// (FailedID, FailedType, FailedError, FailedPoisoned, FailedAt), and Wake
// (the address its doorbell listens on; docs/processor.md, "Wake-ups").
// A running processor rewrites its row at most once a HeartbeatInterval; a clean stop deletes it; rows not
// written for a long time are deleted by the next processor that cleans
// up (DeleteBeatsBefore). A query of this one partition reads every
// processor: what cmdq.Client.Processors costs.
const ProcessorPartition = "~processors"

// Beat is one processor's heartbeat row.
type Beat struct {
	// ID is the processor's instance ID (the row key).
	ID string
	// Name is the processor's worker name (Config.Worker).
	Name string
	// Host is the machine's host name.
	Host string
	// PID is the process ID.
	PID int
	// State is the processor's state when the row was written (polling,
	// working, idle, draining, unhealthy, …).
	State string
	// InFlight is how many messages it held when the row was written.
	InFlight int
	// Concurrency is its handler slots.
	Concurrency int
	// Queues are the logical queues it polls.
	Queues []string
	// Started is when its current run began.
	Started time.Time
	// Seen is when the row was written.
	Seen time.Time
	// Every is how often the processor rewrites its row (its heartbeat
	// interval).
	Every time.Duration
	// Completed, Failed and Poisoned count the run's completed commands,
	// failed attempts and poisoned commands so far; Recent the same over
	// the interval before Seen.
	Completed, Failed, Poisoned                   int64
	RecentCompleted, RecentFailed, RecentPoisoned int64
	// LastFailure is the run's last failed or poisoned attempt (its
	// command ID empty when none).
	LastFailure Failure
	// Wake is the address (host:port) its doorbell listens on for
	// wake-ups from other processes ("" when it has none).
	Wake string
}

// Failure is one failed or poisoned attempt a heartbeat reports.
type Failure struct {
	CommandID, Type, Error string
	Poisoned               bool
	At                     time.Time
}

// MaxFailureUnits bounds the error a heartbeat reports (Failure.Error),
// in UTF-16 units: 1024.
const MaxFailureUnits = 1024

func beatEntity(b Beat) storage.Entity {
	e := storage.Entity{PartitionKey: ProcessorPartition, RowKey: b.ID, Properties: map[string]any{
		"Name": layout.Truncate(b.Name, layout.MaxTextUnits), "Host": layout.Truncate(b.Host, layout.MaxTextUnits), "PID": int64(b.PID),
		"State": b.State, "InFlight": int64(b.InFlight), "Concurrency": int64(b.Concurrency),
		"Queues": strings.Join(b.Queues, ","), "Started": layout.Millis(b.Started), "Seen": layout.Millis(b.Seen),
		"Every":     b.Every.Milliseconds(),
		"Wake":      b.Wake,
		"Completed": b.Completed, "Failed": b.Failed, "Poisoned": b.Poisoned,
		"RecentCompleted": b.RecentCompleted, "RecentFailed": b.RecentFailed, "RecentPoisoned": b.RecentPoisoned,
	}}
	if f := b.LastFailure; f.CommandID != "" {
		p := e.Properties
		p["FailedID"], p["FailedType"], p["FailedError"], p["FailedPoisoned"], p["FailedAt"] = f.CommandID, f.Type, layout.Truncate(f.Error, MaxFailureUnits), f.Poisoned, layout.Millis(f.At)
	}
	return e
}

func decodeBeat(e storage.Entity) Beat {
	b := Beat{ID: e.RowKey, Name: layout.StrProp(e, "Name"), Host: layout.StrProp(e, "Host"), PID: int(layout.IntProp(e, "PID")), State: layout.StrProp(e, "State"),
		InFlight: int(layout.IntProp(e, "InFlight")), Concurrency: int(layout.IntProp(e, "Concurrency")),
		Started: layout.TimeProp(e, "Started"), Seen: layout.TimeProp(e, "Seen"), Every: time.Duration(layout.IntProp(e, "Every")) * time.Millisecond}
	b.Completed, b.Failed, b.Poisoned = layout.IntProp(e, "Completed"), layout.IntProp(e, "Failed"), layout.IntProp(e, "Poisoned")
	b.RecentCompleted, b.RecentFailed, b.RecentPoisoned = layout.IntProp(e, "RecentCompleted"), layout.IntProp(e, "RecentFailed"), layout.IntProp(e, "RecentPoisoned")
	if id := layout.StrProp(e, "FailedID"); id != "" {
		poisoned, _ := e.Properties["FailedPoisoned"].(bool)
		b.LastFailure = Failure{CommandID: id, Type: layout.StrProp(e, "FailedType"), Error: layout.StrProp(e, "FailedError"), Poisoned: poisoned, At: layout.TimeProp(e, "FailedAt")}
	}
	b.Wake = layout.StrProp(e, "Wake")
	if q := layout.StrProp(e, "Queues"); q != "" {
		b.Queues = strings.Split(q, ",")
	}
	return b
}

// WriteBeat writes a processor's heartbeat row: one upsert (replace); over
// several accounts, to the account of its instance ID, or the next one
// that answers (shared.go). Seen is set to now when zero; the row as
// written is returned.
func (s *Partitions) WriteBeat(ctx context.Context, b Beat) (Beat, error) {
	if err := storage.ValidateKey("RowKey", b.ID); err != nil || b.ID == "" {
		return b, fmt.Errorf("%w: processor instance ID %q", storage.ErrInvalidArgument, b.ID)
	}
	if b.Seen.IsZero() {
		b.Seen = s.nowUTC()
	}
	b.Seen, b.Started = layout.Millis(b.Seen), layout.Millis(b.Started)
	var err error
	if reps := s.reps; reps != nil {
		err = ToOne(reps, storage.ReplicaOf(s.commands, b.ID), func(tb storage.Table) error {
			_, err := tb.Upsert(ctx, beatEntity(b), storage.Replace)
			return err
		})
	} else {
		_, err = s.commands.Upsert(ctx, beatEntity(b), storage.Replace)
	}
	if err != nil {
		return b, fmt.Errorf("cmdq: write the heartbeat of processor %s: %w", b.Name, err)
	}
	return b, nil
}

// ReadBeats reads every processor's heartbeat row: one query of
// ProcessorPartition (one request per 1000 processors; over several
// accounts, one per account at once, a processor's newest row winning),
// in instance ID order.
func (s *Partitions) ReadBeats(ctx context.Context) ([]Beat, error) {
	if s.reps != nil {
		out, err := s.readBeatsShared(ctx)
		if err != nil {
			return nil, fmt.Errorf("cmdq: read the processors' heartbeats: %w", err)
		}
		return out, nil
	}
	var out []Beat
	q := storage.Query{PartitionKey: ProcessorPartition, Top: 1000}
	for {
		page, err := s.commands.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("cmdq: read the processors' heartbeats: %w", err)
		}
		for _, e := range page.Entities {
			out = append(out, decodeBeat(e))
		}
		if page.Continuation == "" {
			return out, nil
		}
		q.Continuation = page.Continuation
	}
}

// DeleteBeat deletes a processor's heartbeat row (one delete; over
// several accounts, one per account; a missing row is no error).
func (s *Partitions) DeleteBeat(ctx context.Context, id string) error {
	if reps := s.reps; reps != nil {
		if err := DeleteAll(ctx, reps, ProcessorPartition, id); err != nil {
			return fmt.Errorf("cmdq: delete the heartbeat of processor %s: %w", id, err)
		}
		return nil
	}
	err := s.commands.Delete(ctx, ProcessorPartition, id, storage.IfMatchAny)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("cmdq: delete the heartbeat of processor %s: %w", id, err)
	}
	return nil
}

// DeleteBeatsBefore deletes the heartbeat rows last written before cutoff
// (processors that stopped without deleting theirs: crashed or killed),
// except keep's: one query of ProcessorPartition and one delete per row
// removed; over several accounts, per account that answers, its rows
// written before cutoff). It returns how many it deleted.
func (s *Partitions) DeleteBeatsBefore(ctx context.Context, cutoff time.Time, keep string) (int, error) {
	if reps := s.reps; reps != nil {
		rows, errs := queryReplicas(ctx, reps, ProcessorPartition)
		if err := FromAny(errs); err != nil {
			return 0, fmt.Errorf("cmdq: read the processors' heartbeats: %w", err)
		}
		n, err := s.deleteBeatsBeforeShared(ctx, reps, rows, errs, func(b Beat) bool { return b.ID == keep || !b.Seen.Before(cutoff) })
		if err != nil {
			return n, fmt.Errorf("cmdq: delete old heartbeats: %w", err)
		}
		return n, nil
	}
	beats, err := s.ReadBeats(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, b := range beats {
		if b.ID == keep || !b.Seen.Before(cutoff) {
			continue
		}
		if err := s.DeleteBeat(ctx, b.ID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
