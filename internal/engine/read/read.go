package read

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

	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/storage"
)

// Reader is a commands log's reads and operator actions: a Store (Get,
// Events, GetPoison, Discard, Cancel, the shared rows), its Enqueuer
// (Requeue, RunNow, Depth) and the listings (ListCommands, ListPoison).
type Reader struct {
	*record.Store
	*enqueue.Enqueuer
}

// Open opens the tables named by names on st and returns a Reader
// whose enqueues wake wake (may be nil).
func Open(ctx context.Context, st storage.Store, names layout.Names, opts record.Options, wake func(queue string)) (*Reader, error) {
	s, err := record.Open(ctx, st, names, opts)
	if err != nil {
		return nil, err
	}
	return &Reader{Store: s, Enqueuer: enqueue.NewEnqueuer(st, names, s, wake)}, nil
}

// listedStatus is a command's status in a listing: without its recorded
// output (up to model.MaxOutputBytes each; Get returns it).
func listedStatus(e storage.Entity) model.Status {
	st := record.DecodeStatus(e)
	st.Output = ""
	return st
}

// ListPoison lists poison entries newest first (by PoisonedAt, then command
// ID), filtered by type, one page at a time. It reads the whole poison table
// (one query per 1000 entries) and sorts in memory: poison tables are small.
func (r *Reader) ListPoison(ctx context.Context, q model.PoisonQuery) (model.PoisonPage, error) {
	s := r.Store
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
		page, err := s.PoisonTable().Query(ctx, sq)
		if err != nil {
			return model.PoisonPage{}, fmt.Errorf("cmdq: list poison: %w", err)
		}
		for _, e := range page.Entities {
			p := record.DecodePoison(e)
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

// ListCommands lists commands in ID order (or newest first), filtered by
// type, state and last change, one page at a time: a query of the command
// rows of the whole table (one request per 1000 rows read, matching or
// not), or of every row, events included, for a summary.
func (r *Reader) ListCommands(ctx context.Context, q model.CommandQuery) (model.CommandPage, error) {
	s := r.Store
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
		return listAll(ctx, s, q, limit)
	}
	out := model.CommandPage{Commands: []model.Status{}}
	// The tables are read one after the other (the day tables, oldest
	// first, then the base table); with day tables the continuation names
	// the table it continues ("<table>|<storage continuation>").
	names, err := s.Tables().All(ctx)
	if err != nil {
		return model.CommandPage{}, fmt.Errorf("cmdq: list commands: %w", err)
	}
	routed := s.Tables().Routed()
	ti, cont := 0, q.Continuation
	if routed && q.Continuation != "" {
		name, c, ok := strings.Cut(q.Continuation, "|")
		if !ok {
			return model.CommandPage{}, fmt.Errorf("%w: %q; pass the continuation of the previous page unchanged", model.ErrInvalidContinuation, q.Continuation)
		}
		ti = sort.SearchStrings(names[:len(names)-1], name)
		if name == s.CommandsTable().Name() {
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
	now := s.Now()
	for ; ti < len(names); ti, cont = ti+1, "" {
		tb, err := s.Tables().Table(ctx, names[ti])
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
			if errors.Is(err, storage.ErrNotFound) && tb != s.CommandsTable() {
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
		(q.IssuedSince.IsZero() || !st.CreatedAt.Before(q.IssuedSince)) &&
		(q.IssuedBefore.IsZero() || st.CreatedAt.Before(q.IssuedBefore)) &&
		(q.Queue == "" || st.Queue == q.Queue)
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
func dayBefore(s *record.Store, name string, t time.Time) bool {
	if t.IsZero() {
		return false
	}
	day, ok := s.Tables().Names().ParseDayTable(name)
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
	// implied: the last two events its command row holds
	// (layout.StartedAtProp), counted after its event rows.
	implied []model.Event
}

// group accumulates one type's or queue's outcomes.
type group struct {
	model.GroupCounts
	samples []time.Duration
}

// listAll reads the whole selection (and, for a summary, every event row)
// and returns one page of it, newest first or by ID.
func listAll(ctx context.Context, s *record.Store, q model.CommandQuery, limit int) (model.CommandPage, error) {
	offset := 0
	if q.Continuation != "" {
		n, err := strconv.Atoi(q.Continuation)
		if err != nil || n < 0 {
			return model.CommandPage{}, fmt.Errorf("%w: %q; pass the continuation of the previous page unchanged", model.ErrInvalidContinuation, q.Continuation)
		}
		offset = n
	}
	now := layout.Millis(s.Now())
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
	// countEvent adds an event of the command being read to the summary.
	countEvent := func(kind model.EventKind, at time.Time, attempt int64) {
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
			return
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
			if attempt <= 1 && !part.enqueued.IsZero() && !at.Before(part.enqueued) {
				d := at.Sub(part.enqueued)
				samples[i] = append(samples[i], d)
				for _, g := range gs {
					g.samples = append(g.samples, d)
				}
			}
		}
	}
	// countImplied counts the events part's command row holds, which
	// follow its event rows.
	countImplied := func() {
		for _, e := range part.implied {
			countEvent(e.Kind, e.Time, int64(e.Attempt))
		}
		part.implied = nil
	}
	names, err := s.Tables().All(ctx)
	if err != nil {
		return model.CommandPage{}, fmt.Errorf("cmdq: list commands: %w", err)
	}
	// Newest first: read the newest day tables first, so that a ScanLimit
	// keeps the recent commands; leave out the days before IssuedSince.
	days := names[:len(names)-1]
	slices.Reverse(days)
	names = slices.DeleteFunc(names, func(n string) bool { return dayBefore(s, n, q.IssuedSince) })
	ti := 0
	tb := s.CommandsTable()
	next := func() bool {
		for ; ti < len(names); ti++ {
			t, err := s.Tables().Table(ctx, names[ti])
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
		if errors.Is(err, storage.ErrNotFound) && tb != s.CommandsTable() {
			page, err = storage.Page{}, nil // dropped meanwhile
		}
		if err != nil {
			return model.CommandPage{}, fmt.Errorf("cmdq: list commands: %w", err)
		}
		for _, e := range page.Entities {
			switch {
			case e.RowKey == layout.RowCommand:
				countImplied()
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
				if sum != nil {
					if created, ok := layout.ImpliedCreated(e); ok {
						// The row holds its created event, the first.
						countEvent(created.Kind, created.Time, 0)
					}
					if started, completed, ok := layout.ImpliedEvents(e); ok {
						part.implied = []model.Event{started, completed}
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
				attempt := layout.IntProp(e, "Attempt")
				countEvent(model.EventKind(layout.StrProp(e, "Kind")), layout.TimeProp(e, "Time"), attempt)
				if done := layout.TimeProp(e, layout.CompletedAtProp); !done.IsZero() {
					countEvent(model.EventCompleted, done, attempt) // the row holds the attempt's completion too
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
		countImplied()
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
