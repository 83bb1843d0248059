package cmdq

import (
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

// The engine keeps its own copy of the plain types a user sees (package
// model: the engine cannot import this package, which imports the
// engine); these functions convert at the boundary. Types whose fields
// have the same types on both sides convert with a Go conversion, which
// the compiler checks field by field; the others are copied here, and
// TestConversionsCarryEveryField checks that every field arrives.

// engine returns o as the registry's options.
func (o HandlerOptions) engine() registry.Options {
	return registry.Options{Queue: o.Queue, PoisonCeiling: o.PoisonCeiling, Lease: o.Lease, Timeout: o.Timeout,
		Retry: model.RetryPolicy(o.Retry), Retention: model.Retention(o.Retention), MaxConcurrency: o.MaxConcurrency,
		GlobalConcurrency: o.GlobalConcurrency, MaxDeferrals: o.MaxDeferrals, Rate: model.Rate(o.Rate), Middleware: middleware(o.Middleware),
		GlobalConcurrencyPerKey: o.GlobalConcurrencyPerKey, RatePerKey: model.Rate(o.RatePerKey)}
}

// handlerOptions returns the registry's options as HandlerOptions
// (Middleware left out).
func handlerOptions(o registry.Options) HandlerOptions {
	return HandlerOptions{Queue: o.Queue, PoisonCeiling: o.PoisonCeiling, Lease: o.Lease, Timeout: o.Timeout,
		Retry: RetryPolicy(o.Retry), Retention: Retention(o.Retention), MaxConcurrency: o.MaxConcurrency,
		GlobalConcurrency: o.GlobalConcurrency, MaxDeferrals: o.MaxDeferrals, Rate: Rate(o.Rate),
		GlobalConcurrencyPerKey: o.GlobalConcurrencyPerKey, RatePerKey: Rate(o.RatePerKey)}
}

// engine returns o as the engine's.
func (o CommandOptions) engine() model.CommandOptions {
	return model.CommandOptions{Queue: o.Queue, PoisonCeiling: o.PoisonCeiling, Lease: o.Lease, Timeout: o.Timeout,
		Retention: model.Retention(o.Retention), MaxConcurrency: o.MaxConcurrency, GlobalConcurrency: o.GlobalConcurrency, MaxDeferrals: o.MaxDeferrals,
		Rate: model.Rate(o.Rate), GlobalConcurrencyPerKey: o.GlobalConcurrencyPerKey, RatePerKey: model.Rate(o.RatePerKey)}
}

// declared returns the options cmd's type declares (CommandWithOptions),
// as the engine's: the Client's Issuer and registry read them through it
// (issuer.DeclaredFunc).
func declared(cmd issuer.Command) (model.CommandOptions, bool) {
	if w, ok := cmd.(CommandWithOptions); ok {
		return w.CommandOptions().engine(), true
	}
	return model.CommandOptions{}, false
}

func statusOut(s model.Status) Status {
	if s.State.Final() {
		// A final command is due for nothing: the stored RunAt (its
		// run-at time, a retry's that never came) is history, kept in its
		// events.
		s.RunAt = time.Time{}
	}
	return Status{ID: s.ID, Type: s.Type, State: State(s.State), Attempts: s.Attempts, Step: s.Step,
		LastError: s.LastError, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, Worker: s.Worker,
		CorrelationID: s.CorrelationID, Queue: s.Queue, RunAt: s.RunAt, Output: JSON(s.Output), TraceID: s.TraceID, OrderKey: s.OrderKey,
		Deferrals: s.Deferrals, deferred: s.Deferred}
}

func eventOut(e model.Event) Event {
	return Event{Seq: e.Seq, Kind: EventKind(e.Kind), Time: e.Time, Attempt: e.Attempt, Worker: e.Worker, By: e.By,
		Step: e.Step, Note: e.Note, Error: e.Error, Reason: e.Reason, Detail: e.Detail, MessageID: e.MessageID, RunAt: e.RunAt}
}

func eventsOut(evs []model.Event) []Event {
	if evs == nil {
		return nil
	}
	out := make([]Event, len(evs))
	for i, e := range evs {
		out[i] = eventOut(e)
	}
	return out
}

func poisonPageOut(p model.PoisonPage) PoisonPage {
	out := PoisonPage{Entries: make([]PoisonEntry, len(p.Entries)), Continuation: p.Continuation}
	for i, e := range p.Entries {
		out.Entries[i] = PoisonEntry(e)
	}
	return out
}

func (q CommandQuery) engine() model.CommandQuery {
	return model.CommandQuery{Type: q.Type, State: model.State(q.State), Limit: q.Limit, Continuation: q.Continuation,
		Since: q.Since, Newest: q.Newest, Summary: q.Summary, ScanLimit: q.ScanLimit, TypePrefix: q.TypePrefix,
		CorrelationID: q.CorrelationID, IDPrefix: q.IDPrefix, IssuedSince: q.IssuedSince, IssuedBefore: q.IssuedBefore, Queue: q.Queue, Interval: q.Interval,
		ParamsPreview: q.ParamsPreview}
}

func commandPageOut(p model.CommandPage) CommandPage {
	out := CommandPage{Commands: make([]Status, len(p.Commands)), Continuation: p.Continuation, Params: p.Params, Started: p.Started}
	for i, s := range p.Commands {
		out.Commands[i] = statusOut(s)
	}
	if s := p.Summary; s != nil {
		sum := &ListSummary{Counts: make(map[State]int, len(s.Counts)), Intervals: make([]IntervalCounts, len(s.Minutes)),
			IntervalMS: s.IntervalMS, Latency: Latency(s.Latency), ByType: groupsOut(s.ByType), ByQueue: groupsOut(s.ByQueue),
			Rows: s.Rows, Partial: s.Partial}
		for st, n := range s.Counts {
			sum.Counts[State(st)] = n
		}
		for i, m := range s.Minutes {
			sum.Intervals[i] = IntervalCounts{Start: m.Start, Completed: m.Completed, Failed: m.Failed, Poisoned: m.Poisoned, Latency: Latency(m.Latency)}
		}
		out.Summary = sum
	}
	return out
}

func groupsOut(gs []model.GroupCounts) []GroupCounts {
	if gs == nil {
		return nil
	}
	out := make([]GroupCounts, len(gs))
	for i, g := range gs {
		out[i] = GroupCounts{Name: g.Name, Commands: g.Commands, Completed: g.Completed, Failed: g.Failed, Poisoned: g.Poisoned, Latency: Latency(g.Latency)}
	}
	return out
}

func healthOut(h model.Health) ProcessorHealth {
	out := ProcessorHealth{State: ProcessorState(h.State), Since: h.Since, LastError: h.LastError, LastErrorAt: h.LastErrorAt,
		ConsecutiveFaults: h.ConsecutiveFaults, InFlight: h.InFlight, StorageFull: h.StorageFull}
	if h.Retention != nil {
		r := RetentionStatus(*h.Retention)
		out.Retention = &r
	}
	if h.Accounts != nil {
		out.Accounts = make([]AccountHealth, len(h.Accounts))
		for i, a := range h.Accounts {
			out.Accounts[i] = AccountHealth(a)
		}
	}
	return out
}

func summaryOut(s model.Summary) RunForSummary {
	return RunForSummary{Processed: s.Processed, Completed: s.Completed, Failed: s.Failed, Poisoned: s.Poisoned,
		Released: s.Released, Interrupted: s.Interrupted, Duplicates: s.Duplicates, Deferred: s.Deferred, Duration: s.Duration,
		StoppedBecause: StopReason(s.StoppedBecause)}
}

// observationOut converts one processing event: it runs for every event,
// so it copies no more than the fields (Health only for ObservedHealth).
func observationOut(o model.Observation) Observation {
	out := Observation{Kind: ObservationKind(o.Kind), Time: o.Time, Worker: o.Worker, CommandID: o.CommandID, Type: o.Type,
		Queue: o.Queue, Attempt: o.Attempt, Duration: o.Duration, Err: o.Err, Reason: o.Reason, Received: o.Received,
		Paused: o.Paused, By: o.By, Wait: o.Wait, Op: o.Op}
	if o.Kind == model.ObservedHealth || o.Health.State != "" {
		out.Health = healthOut(o.Health)
	}
	return out
}
