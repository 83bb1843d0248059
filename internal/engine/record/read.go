package record

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// Get returns a command's status as a reader sees it now (one point read
// of its command row; the parameters are not decoded): a pending command
// whose run-at time is ahead is StateScheduled (model.Status.AsOf).
// Unknown ID → error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (model.Status, error) {
	e, _, err := s.getRow(ctx, id)
	if err != nil {
		return model.Status{}, err
	}
	return DecodeStatus(e).AsOf(s.now()), nil
}

// Now returns the Store's clock (Options.Now).
func (s *Store) Now() time.Time { return s.now() }

// listedStatus is a command's status in a listing: without its recorded
// output (up to model.MaxOutputBytes each; Get returns it).
func listedStatus(e storage.Entity) model.Status {
	st := DecodeStatus(e)
	st.Output = ""
	return st
}

// Events returns a command's events, oldest first, reading every page (one
// query per 1000 events) of the ID's table, and of the base table when the
// command is not there (moved by retention). Unknown ID → error wrapping
// ErrNotFound (and model.ErrExpired past retention).
func (s *Store) Events(ctx context.Context, id string) ([]model.Event, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	day, hasDay, err := s.tables.forRead(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("cmdq: events of command %s: %w", id, err)
	}
	read := func(tb storage.Table) ([]model.Event, error) {
		var out []model.Event
		q := storage.Query{PartitionKey: id, RowKeyPrefix: layout.EventRowPrefix, Top: 1000}
		for {
			page, err := tb.Query(ctx, q)
			if err != nil {
				return nil, fmt.Errorf("cmdq: events of command %s: %w", id, err)
			}
			for _, e := range page.Entities {
				out = append(out, decodeEvent(e))
			}
			if page.Continuation == "" {
				return out, nil
			}
			q.Continuation = page.Continuation
		}
	}
	var out []model.Event
	if day != nil {
		if out, err = read(day); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return nil, err
		}
		if len(out) > 0 && s.sweepable(id) {
			// Moved commands leave their events behind until the day table
			// is dropped: the command row says where the command is.
			if _, gerr := day.Get(ctx, id, layout.RowCommand); errors.Is(gerr, storage.ErrNotFound) {
				out = nil
			}
		}
	}
	if len(out) == 0 {
		if out, err = read(s.commands); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		if hasDay {
			return nil, s.goneErr(id)
		}
		return nil, notFound(id)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

func decodeEvent(e storage.Entity) model.Event {
	seq, _ := strconv.ParseInt(e.RowKey[len(layout.EventRowPrefix):], 10, 64)
	ev := model.Event{
		Seq:     seq,
		Kind:    model.EventKind(layout.StrProp(e, "Kind")),
		Time:    layout.TimeProp(e, "Time"),
		Attempt: int(layout.IntProp(e, "Attempt")),
		Worker:  layout.StrProp(e, "Worker"),
		Step:    int(layout.IntProp(e, "Step")),
		Note:    layout.StrProp(e, "Note"),
		Error:   layout.StrProp(e, "Error"),
		Reason:  layout.StrProp(e, "Reason"),
		Detail:  layout.StrProp(e, "Detail"),
		// MessageID names the message that owns the command (started).
		MessageID: layout.StrProp(e, "MessageID"),
		RunAt:     layout.TimeProp(e, "RunAt"),
	}
	if operatorEvent(ev.Kind) {
		ev.By, ev.Worker = ev.Worker, ""
	}
	return ev
}

// ListPoison lists poison entries newest first (by PoisonedAt, then command
// ID), filtered by type, one page at a time. It reads the whole poison table
// (one query per 1000 entries) and sorts in memory: poison tables are small.
func (s *Store) ListPoison(ctx context.Context, q model.PoisonQuery) (model.PoisonPage, error) {
	limit := q.Limit
	if limit == 0 {
		limit = model.DefaultPoisonLimit
	}
	if limit < 0 || limit > model.MaxPoisonLimit {
		return model.PoisonPage{}, fmt.Errorf("%w: poison limit %d is outside 1..%d", storage.ErrInvalidArgument, q.Limit, model.MaxPoisonLimit)
	}
	offset := 0
	if q.Continuation != "" {
		n, err := strconv.Atoi(q.Continuation)
		if err != nil || n < 0 {
			return model.PoisonPage{}, fmt.Errorf("%w: %q; pass the continuation of the previous page unchanged", model.ErrInvalidContinuation, q.Continuation)
		}
		offset = n
	}
	var all []model.PoisonEntry
	sq := storage.Query{Top: 1000}
	for {
		page, err := s.poison.Query(ctx, sq)
		if err != nil {
			return model.PoisonPage{}, fmt.Errorf("cmdq: list poison: %w", err)
		}
		for _, e := range page.Entities {
			p := DecodePoison(e)
			if q.Type == "" || p.Type == q.Type {
				all = append(all, p)
			}
		}
		if page.Continuation == "" {
			break
		}
		sq.Continuation = page.Continuation
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].PoisonedAt.Equal(all[j].PoisonedAt) {
			return all[i].PoisonedAt.After(all[j].PoisonedAt)
		}
		return all[i].CommandID < all[j].CommandID
	})
	out := model.PoisonPage{Entries: []model.PoisonEntry{}}
	if offset >= len(all) {
		return out, nil
	}
	end := min(offset+limit, len(all))
	out.Entries = all[offset:end]
	if end < len(all) {
		out.Continuation = strconv.Itoa(end)
	}
	return out, nil
}

// GetPoison returns one poison entry (one point read). Unknown → error
// wrapping ErrNotFound.
func (s *Store) GetPoison(ctx context.Context, id string) (model.PoisonEntry, error) {
	if err := validID(id); err != nil {
		return model.PoisonEntry{}, err
	}
	e, err := s.poison.Get(ctx, id, "")
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return model.PoisonEntry{}, fmt.Errorf("%w: no poison entry for %s (%w)", model.ErrNotFound, id, err)
		}
		return model.PoisonEntry{}, fmt.Errorf("cmdq: get poison entry %s: %w", id, err)
	}
	return DecodePoison(e), nil
}

// LoadPoisoned checks that id has a poison entry and a poisoned projection,
// and returns both. For a command that is not poisoned it returns
// ErrNotPoisoned and removes the entry as stale, except in two cases:
//   - the command is pending and never started: a requeue in progress, or
//     one whose enqueue failed and that kept its entry for a retry. With
//     resume it is returned (Requeue retries it); without, its entry stays;
//   - the command is not final and at or before the attempt the entry
//     names: a poison move in progress; its entry stays.
func (s *Store) LoadPoisoned(ctx context.Context, id string, resume bool) (*Record, model.PoisonEntry, error) {
	entry, err := s.GetPoison(ctx, id)
	if err != nil {
		return nil, entry, err
	}
	rec, err := s.Load(ctx, id)
	if err != nil {
		if errors.Is(err, model.ErrNotFound) {
			return nil, entry, fmt.Errorf("%w: poison entry %s (%s) has no stored command to act on: %w", model.ErrNoCommand, id, entry.Reason, err)
		}
		return nil, entry, err
	}
	if rec.Status.State == model.StatePending && rec.Attempts == 0 {
		if resume {
			return rec, entry, nil
		}
		return nil, entry, fmt.Errorf("%w: command %s is pending (requeued)", model.ErrNotPoisoned, id)
	}
	if rec.Status.State != model.StatePoisoned {
		if !rec.Status.State.Final() && entry.Attempts > 0 && rec.Attempts <= entry.Attempts {
			// The entry of the attempt being poisoned now: Poison writes it
			// before the command's poisoned event, so that a poisoned
			// command is never missing from the poison table. Removing it
			// here would leave the command poisoned with no entry (a
			// requeue under load did, before this check). A move that
			// crashed half-way leaves it too, and the command's next
			// delivery poisons it again or runs an attempt past it (then
			// the entry is stale and removed).
			return nil, entry, fmt.Errorf("%w: command %s is being moved to the poison table (attempt %d); try again in a moment", model.ErrNotPoisoned, id, entry.Attempts)
		}
		_ = s.deletePoison(ctx, id)
		return nil, entry, fmt.Errorf("%w: command %s is %s (its stale poison entry was removed)", model.ErrNotPoisoned, id, rec.Status.State)
	}
	return rec, entry, nil
}

func (s *Store) deletePoison(ctx context.Context, id string) error {
	err := s.poison.Delete(ctx, id, "", storage.IfMatchAny)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("cmdq: remove poison entry %s: %w", id, err)
	}
	return nil
}

// Discard gives up on a poisoned command: a discarded event (Worker = by),
// the poison entry removed. Cost: 2 point reads + 1 batch + 1 delete.
// Not poisoned → ErrNotPoisoned; unknown → ErrNotFound. An entry with no
// stored command (a malformed message, or one naming a command that was never
// stored) is simply removed.
func (s *Store) Discard(ctx context.Context, id, by string) error {
	rec, _, err := s.LoadPoisoned(ctx, id, false)
	if errors.Is(err, model.ErrNoCommand) {
		// A malformed message or one naming no stored command: there is no
		// command to record the discard on, only the entry to remove.
		return s.deletePoison(ctx, id)
	}
	if err != nil {
		return err
	}
	if err := s.Append(ctx, rec, model.Event{Kind: model.EventDiscarded, By: by, Reason: "discarded by operator"}); err != nil {
		var ce *ConflictError
		if errors.As(err, &ce) && ce.Current != nil && ce.Current.Status.State != model.StatePoisoned {
			return fmt.Errorf("%w: command %s is %s: someone else requeued or discarded it meanwhile", model.ErrNotPoisoned, id, ce.Current.Status.State)
		}
		return err
	}
	return s.deletePoison(ctx, id)
}

// ListCommands lists commands in ID order (or newest first), filtered by
// type, state and last change, one page at a time: a query of the command
// rows of the whole table (one request per 1000 rows read, matching or
// not), or of every row, events included, for a summary.
func (s *Store) ListCommands(ctx context.Context, q model.CommandQuery) (model.CommandPage, error) {
	limit := q.Limit
	if limit == 0 {
		limit = model.DefaultCommandLimit
	}
	if limit < 0 || limit > model.MaxCommandLimit {
		return model.CommandPage{}, fmt.Errorf("%w: command limit %d is outside 1..%d", storage.ErrInvalidArgument, q.Limit, model.MaxCommandLimit)
	}
	if err := checkQuery(q); err != nil {
		return model.CommandPage{}, err
	}
	if q.Newest || q.Summary {
		return s.listAll(ctx, q, limit)
	}
	out := model.CommandPage{Commands: []model.Status{}}
	// The tables are read one after the other (the day tables, oldest
	// first, then the base table); with day tables the continuation names
	// the table it continues ("<table>|<storage continuation>").
	names, err := s.tables.All(ctx)
	if err != nil {
		return model.CommandPage{}, fmt.Errorf("cmdq: list commands: %w", err)
	}
	routed := s.tables.Routed()
	ti, cont := 0, q.Continuation
	if routed && q.Continuation != "" {
		name, c, ok := strings.Cut(q.Continuation, "|")
		if !ok {
			return model.CommandPage{}, fmt.Errorf("%w: %q; pass the continuation of the previous page unchanged", model.ErrInvalidContinuation, q.Continuation)
		}
		ti = sort.SearchStrings(names[:len(names)-1], name)
		if name == s.commands.Name() {
			ti = len(names) - 1
		}
		if ti < len(names) && names[ti] != name {
			c = "" // that table is gone: go on with the next one
		}
		cont = c
	}
	token := func(i int, c string) string {
		if !routed {
			return c
		}
		if c == "" {
			if i+1 >= len(names) {
				return ""
			}
			return names[i+1] + "|"
		}
		return names[i] + "|" + c
	}
	rows := 0
	now := s.now()
	for ; ti < len(names); ti, cont = ti+1, "" {
		tb, err := s.tables.Table(ctx, names[ti])
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return model.CommandPage{}, fmt.Errorf("cmdq: list commands: %w", err)
		}
		sq := storage.Query{RowKeyPrefix: layout.RowCommand, Continuation: cont}
		for {
			// A page never holds more rows than are still wanted, so the
			// storage continuation is where the next page starts.
			sq.Top = limit - len(out.Commands)
			page, err := tb.Query(ctx, sq)
			if errors.Is(err, storage.ErrNotFound) && tb != s.commands {
				break // dropped meanwhile
			}
			if err != nil {
				if q.Continuation != "" && errors.Is(err, storage.ErrInvalidArgument) {
					return model.CommandPage{}, fmt.Errorf("%w: %q; pass the continuation of the previous page unchanged", model.ErrInvalidContinuation, q.Continuation)
				}
				return model.CommandPage{}, fmt.Errorf("cmdq: list commands: %w", err)
			}
			rows += len(page.Entities)
			for _, e := range page.Entities {
				if e.RowKey != layout.RowCommand {
					continue
				}
				st := listedStatus(e).AsOf(now)
				if selected(q, st) && (q.State == "" || st.State == q.State) {
					out.Commands = append(out.Commands, st)
					if q.ParamsPreview > 0 {
						if out.Params == nil {
							out.Params = map[string]string{}
						}
						out.Params[st.ID] = previewOf(e, q.ParamsPreview)
					}
				}
			}
			out.Continuation = token(ti, page.Continuation)
			if len(out.Commands) >= limit || q.ScanLimit > 0 && rows >= q.ScanLimit {
				return out, nil
			}
			if page.Continuation == "" {
				break
			}
			sq.Continuation = page.Continuation
		}
	}
	out.Continuation = ""
	return out, nil
}

// selected reports whether st matches q's filters (but its state).
func selected(q model.CommandQuery, st model.Status) bool {
	return (q.Type == "" || st.Type == q.Type) && !st.UpdatedAt.Before(q.Since) &&
		(q.TypePrefix == "" || hasPrefixFold(st.Type, q.TypePrefix)) &&
		(q.CorrelationID == "" || st.CorrelationID == q.CorrelationID) &&
		(q.IDPrefix == "" || hasPrefixFold(st.ID, q.IDPrefix)) &&
		(q.IssuedSince.IsZero() || !st.CreatedAt.Before(q.IssuedSince))
}

// hasPrefixFold reports whether s starts with prefix, ignoring case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// checkQuery checks the fields of q a listing validates.
func checkQuery(q model.CommandQuery) error {
	switch {
	case q.Interval < 0 || q.Interval%time.Minute != 0:
		return fmt.Errorf("%w: summary interval %s is not a whole number of minutes", storage.ErrInvalidArgument, q.Interval)
	case q.ParamsPreview < 0 || q.ParamsPreview > model.MaxParamsPreview:
		return fmt.Errorf("%w: params preview %d is outside 0..%d", storage.ErrInvalidArgument, q.ParamsPreview, model.MaxParamsPreview)
	}
	return nil
}

// previewOf returns the start of a command row's compact parameters, at
// most n bytes (cut at a character boundary, with "…" when cut).
func previewOf(e storage.Entity, n int) string {
	p := layout.StrProp(e, layout.ParamsProp(0))
	if len(p) <= n {
		return p
	}
	cut := p[:max(0, n-len("…"))]
	for len(cut) > 0 && !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return cut + "…"
}

// dayBefore reports whether day table name holds only commands issued
// before the day of t (false for the base table and unknown names).
func (s *Store) dayBefore(name string, t time.Time) bool {
	if t.IsZero() {
		return false
	}
	day, ok := s.tables.names.ParseDayTable(name)
	if !ok {
		return false
	}
	return day < layout.DayOf(t)
}

// percentile returns the p-th percentile (nearest rank) of sorted xs.
func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	i := int(float64(len(xs))*p+0.999999) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// latencyOf sorts samples and returns their latency figures.
func latencyOf(samples []time.Duration) model.Latency {
	slices.Sort(samples)
	return model.Latency{Started: len(samples), LatencyP50: percentile(samples, 0.5), LatencyP95: percentile(samples, 0.95)}
}

// partition is what listAll keeps of a command while it reads its events.
type partition struct {
	id       string
	in       bool      // selected (all filters but the state)
	listed   bool      // selected in its state too
	running  bool      // its state is running
	group    [2]string // type, queue
	enqueued time.Time // its last created or requeued event
	started  time.Time // its last started event
}

// group accumulates one type's or queue's outcomes.
type group struct {
	model.GroupCounts
	samples []time.Duration
}

// listAll reads the whole selection (and, for a summary, every event row)
// and returns one page of it, newest first or by ID.
func (s *Store) listAll(ctx context.Context, q model.CommandQuery, limit int) (model.CommandPage, error) {
	offset := 0
	if q.Continuation != "" {
		n, err := strconv.Atoi(q.Continuation)
		if err != nil || n < 0 {
			return model.CommandPage{}, fmt.Errorf("%w: %q; pass the continuation of the previous page unchanged", model.ErrInvalidContinuation, q.Continuation)
		}
		offset = n
	}
	now := s.nowUTC()
	every := q.Interval
	if every == 0 {
		every = time.Minute
	}
	var sum *model.CommandSummary
	var first time.Time
	var samples [][]time.Duration // per interval
	groups := [2]map[string]*group{{}, {}}
	if q.Summary {
		first = q.Since
		if first.IsZero() {
			first = now.Add(-time.Hour)
		}
		first = first.UTC().Truncate(every)
		sum = &model.CommandSummary{Counts: map[model.State]int{}, IntervalMS: every.Milliseconds()}
		for m := first; !m.After(now); m = m.Add(every) {
			sum.Minutes = append(sum.Minutes, model.MinuteCounts{Start: m})
		}
		samples = make([][]time.Duration, len(sum.Minutes))
	}
	grp := func(part *partition) [2]*group {
		var out [2]*group
		for i, name := range part.group {
			g := groups[i][name]
			if g == nil {
				g = &group{GroupCounts: model.GroupCounts{Name: name}}
				groups[i][name] = g
			}
			out[i] = g
		}
		return out
	}
	sq := storage.Query{Top: 1000}
	if q.ScanLimit > 0 {
		sq.Top = min(sq.Top, q.ScanLimit)
	}
	if !q.Summary {
		sq.RowKeyPrefix = layout.RowCommand
	}
	var all []model.Status
	previews := map[string]string{}
	started := map[string]time.Time{}
	rows, partial := 0, false
	var part partition // the command whose rows are being read (its row comes first)
	names, err := s.tables.All(ctx)
	if err != nil {
		return model.CommandPage{}, fmt.Errorf("cmdq: list commands: %w", err)
	}
	// Newest first: read the newest day tables first, so that a ScanLimit
	// keeps the recent commands; leave out the days before IssuedSince.
	days := names[:len(names)-1]
	slices.Reverse(days)
	names = slices.DeleteFunc(names, func(n string) bool { return s.dayBefore(n, q.IssuedSince) })
	ti := 0
	tb := s.commands
	next := func() bool {
		for ; ti < len(names); ti++ {
			t, err := s.tables.Table(ctx, names[ti])
			if err == nil {
				tb = t
				ti++
				return true
			}
		}
		return false
	}
	next()
	for {
		page, err := tb.Query(ctx, sq)
		if errors.Is(err, storage.ErrNotFound) && tb != s.commands {
			page, err = storage.Page{}, nil // dropped meanwhile
		}
		if err != nil {
			return model.CommandPage{}, fmt.Errorf("cmdq: list commands: %w", err)
		}
		for _, e := range page.Entities {
			switch {
			case e.RowKey == layout.RowCommand:
				st := listedStatus(e).AsOf(now)
				part = partition{id: e.PartitionKey, group: [2]string{st.Type, st.Queue}}
				if !selected(q, st) {
					continue
				}
				part.in = true
				part.running = st.State == model.StateRunning
				if sum != nil {
					sum.Counts[st.State]++
					for _, g := range grp(&part) {
						g.Commands++
					}
				}
				if q.State == "" || st.State == q.State {
					part.listed = true
					all = append(all, st)
					if q.ParamsPreview > 0 {
						previews[st.ID] = previewOf(e, q.ParamsPreview)
					}
				}
			case sum != nil && strings.HasPrefix(e.RowKey, layout.EventRowPrefix):
				if e.PartitionKey != part.id || !part.in {
					continue
				}
				at := layout.TimeProp(e, "Time")
				kind := model.EventKind(layout.StrProp(e, "Kind"))
				switch kind {
				case model.EventCreated, model.EventRequeued:
					part.enqueued = at
				case model.EventStarted:
					part.started = at
					if part.running && part.listed {
						started[part.id] = at
					}
				}
				i := int(at.Sub(first) / every)
				if at.Before(first) || i >= len(sum.Minutes) {
					continue
				}
				m := &sum.Minutes[i]
				gs := grp(&part)
				switch kind {
				case model.EventCompleted:
					m.Completed++
					for _, g := range gs {
						g.Completed++
					}
				case model.EventFailed:
					m.Failed++
					for _, g := range gs {
						g.Failed++
					}
				case model.EventPoisoned:
					m.Poisoned++
					for _, g := range gs {
						g.Poisoned++
					}
				case model.EventStarted:
					// Issue (or requeue) → start of its first attempt.
					if layout.IntProp(e, "Attempt") <= 1 && !part.enqueued.IsZero() && !at.Before(part.enqueued) {
						d := at.Sub(part.enqueued)
						samples[i] = append(samples[i], d)
						for _, g := range gs {
							g.samples = append(g.samples, d)
						}
					}
				}
			}
		}
		rows += len(page.Entities)
		if page.Continuation == "" {
			if ti >= len(names) || !next() {
				break
			}
		}
		if q.ScanLimit > 0 && rows >= q.ScanLimit {
			partial = true
			break
		}
		sq.Continuation = page.Continuation
	}
	if sum != nil {
		sum.Rows, sum.Partial = rows, partial
		var every []time.Duration
		for i := range sum.Minutes {
			every = append(every, samples[i]...)
			sum.Minutes[i].Latency = latencyOf(samples[i])
		}
		sum.Latency = latencyOf(every)
		for i, gs := range groups {
			out := make([]model.GroupCounts, 0, len(gs))
			for _, g := range gs {
				g.Latency = latencyOf(g.samples)
				out = append(out, g.GroupCounts)
			}
			slices.SortFunc(out, func(a, b model.GroupCounts) int {
				ea, eb := a.Completed+a.Failed+a.Poisoned, b.Completed+b.Failed+b.Poisoned
				if ea != eb {
					return eb - ea
				}
				if a.Commands != b.Commands {
					return b.Commands - a.Commands
				}
				return strings.Compare(a.Name, b.Name)
			})
			if i == 0 {
				sum.ByType = out
			} else {
				sum.ByQueue = out
			}
		}
	}
	if q.Newest {
		sort.Slice(all, func(i, j int) bool {
			if !all[i].UpdatedAt.Equal(all[j].UpdatedAt) {
				return all[i].UpdatedAt.After(all[j].UpdatedAt)
			}
			return all[i].ID < all[j].ID
		})
	}
	out := model.CommandPage{Commands: []model.Status{}, Summary: sum}
	if offset >= len(all) {
		return out, nil
	}
	end := min(offset+limit, len(all))
	out.Commands = all[offset:end]
	if end < len(all) {
		out.Continuation = strconv.Itoa(end)
	}
	for _, st := range out.Commands {
		if p, ok := previews[st.ID]; ok {
			if out.Params == nil {
				out.Params = map[string]string{}
			}
			out.Params[st.ID] = p
		}
		if t, ok := started[st.ID]; ok {
			if out.Started == nil {
				out.Started = map[string]time.Time{}
			}
			out.Started[st.ID] = t
		}
	}
	return out, nil
}
