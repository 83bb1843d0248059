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

	"github.com/cmdq-dev/cmdq/cmdqtype"
	"github.com/cmdq-dev/cmdq/storage"
)

// Get returns a command's status (one point read of its command row; the
// parameters are not decoded). Unknown ID → error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (cmdqtype.Status, error) {
	e, _, err := s.getRow(ctx, id)
	if err != nil {
		return cmdqtype.Status{}, err
	}
	return decodeStatus(e), nil
}

// Events returns a command's events, oldest first, reading every page (one
// query per 1000 events) of the ID's table, and of the base table when the
// command is not there (moved by retention). Unknown ID → error wrapping
// ErrNotFound (and cmdqtype.ErrExpired past retention).
func (s *Store) Events(ctx context.Context, id string) ([]cmdqtype.Event, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	day, hasDay, err := s.tables.forRead(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("cmdq: events of command %s: %w", id, err)
	}
	read := func(tb storage.Table) ([]cmdqtype.Event, error) {
		var out []cmdqtype.Event
		q := storage.Query{PartitionKey: id, RowKeyPrefix: EventRowPrefix, Top: 1000}
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
	var out []cmdqtype.Event
	if day != nil {
		if out, err = read(day); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return nil, err
		}
		if len(out) > 0 && s.sweepable(id) {
			// Moved commands leave their events behind until the day table
			// is dropped: the command row says where the command is.
			if _, gerr := day.Get(ctx, id, RowCommand); errors.Is(gerr, storage.ErrNotFound) {
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

func decodeEvent(e storage.Entity) cmdqtype.Event {
	seq, _ := strconv.ParseInt(e.RowKey[len(EventRowPrefix):], 10, 64)
	ev := cmdqtype.Event{
		Seq:     seq,
		Kind:    cmdqtype.EventKind(str(e, "Kind")),
		Time:    timeProp(e, "Time"),
		Attempt: int(intProp(e, "Attempt")),
		Worker:  str(e, "Worker"),
		Step:    int(intProp(e, "Step")),
		Note:    str(e, "Note"),
		Error:   str(e, "Error"),
		Reason:  str(e, "Reason"),
		Detail:  str(e, "Detail"),
		// MessageID names the message that owns the command (started).
		MessageID: str(e, "MessageID"),
	}
	if operatorEvent(ev.Kind) {
		ev.By, ev.Worker = ev.Worker, ""
	}
	return ev
}

// ListPoison lists poison entries newest first (by PoisonedAt, then command
// ID), filtered by type, one page at a time. It reads the whole poison table
// (one query per 1000 entries) and sorts in memory: poison tables are small.
func (s *Store) ListPoison(ctx context.Context, q cmdqtype.PoisonQuery) (cmdqtype.PoisonPage, error) {
	limit := q.Limit
	if limit == 0 {
		limit = cmdqtype.DefaultPoisonLimit
	}
	if limit < 0 || limit > cmdqtype.MaxPoisonLimit {
		return cmdqtype.PoisonPage{}, fmt.Errorf("%w: poison limit %d is outside 1..%d", storage.ErrInvalidArgument, q.Limit, cmdqtype.MaxPoisonLimit)
	}
	offset := 0
	if q.Continuation != "" {
		n, err := strconv.Atoi(q.Continuation)
		if err != nil || n < 0 {
			return cmdqtype.PoisonPage{}, fmt.Errorf("%w: %q; pass the continuation of the previous page unchanged", cmdqtype.ErrInvalidContinuation, q.Continuation)
		}
		offset = n
	}
	var all []cmdqtype.PoisonEntry
	sq := storage.Query{Top: 1000}
	for {
		page, err := s.poison.Query(ctx, sq)
		if err != nil {
			return cmdqtype.PoisonPage{}, fmt.Errorf("cmdq: list poison: %w", err)
		}
		for _, e := range page.Entities {
			p := decodePoison(e)
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
	out := cmdqtype.PoisonPage{Entries: []cmdqtype.PoisonEntry{}}
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
func (s *Store) GetPoison(ctx context.Context, id string) (cmdqtype.PoisonEntry, error) {
	if err := validID(id); err != nil {
		return cmdqtype.PoisonEntry{}, err
	}
	e, err := s.poison.Get(ctx, id, "")
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return cmdqtype.PoisonEntry{}, fmt.Errorf("%w: no poison entry for %s (%w)", cmdqtype.ErrNotFound, id, err)
		}
		return cmdqtype.PoisonEntry{}, fmt.Errorf("cmdq: get poison entry %s: %w", id, err)
	}
	return decodePoison(e), nil
}

// loadPoisoned checks that id has a poison entry and a poisoned projection,
// and returns both. A stale entry (command not poisoned) is removed and
// ErrNotPoisoned returned, except for a command that is pending and never
// started: a requeue in progress, or one whose enqueue failed and that kept
// its entry for a retry. With resume such a command is returned (Requeue
// retries it); without, its entry stays and ErrNotPoisoned is returned.
func (s *Store) loadPoisoned(ctx context.Context, id string, resume bool) (*Record, cmdqtype.PoisonEntry, error) {
	entry, err := s.GetPoison(ctx, id)
	if err != nil {
		return nil, entry, err
	}
	rec, err := s.Load(ctx, id)
	if err != nil {
		if errors.Is(err, cmdqtype.ErrNotFound) {
			return nil, entry, fmt.Errorf("%w: poison entry %s (%s) has no stored command to act on: %w", cmdqtype.ErrNoCommand, id, entry.Reason, err)
		}
		return nil, entry, err
	}
	if rec.Status.State == cmdqtype.StatePending && rec.Attempts == 0 {
		if resume {
			return rec, entry, nil
		}
		return nil, entry, fmt.Errorf("%w: command %s is pending (requeued)", cmdqtype.ErrNotPoisoned, id)
	}
	if rec.Status.State != cmdqtype.StatePoisoned {
		_ = s.deletePoison(ctx, id)
		return nil, entry, fmt.Errorf("%w: command %s is %s (its stale poison entry was removed)", cmdqtype.ErrNotPoisoned, id, rec.Status.State)
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
	rec, _, err := s.loadPoisoned(ctx, id, false)
	if errors.Is(err, cmdqtype.ErrNoCommand) {
		// A malformed message or one naming no stored command: there is no
		// command to record the discard on, only the entry to remove.
		return s.deletePoison(ctx, id)
	}
	if err != nil {
		return err
	}
	if err := s.Append(ctx, rec, cmdqtype.Event{Kind: cmdqtype.EventDiscarded, By: by, Reason: "discarded by operator"}); err != nil {
		var ce *ConflictError
		if errors.As(err, &ce) && ce.Current != nil && ce.Current.Status.State != cmdqtype.StatePoisoned {
			return fmt.Errorf("%w: command %s is %s: someone else requeued or discarded it meanwhile", cmdqtype.ErrNotPoisoned, id, ce.Current.Status.State)
		}
		return err
	}
	return s.deletePoison(ctx, id)
}

// ListCommands lists commands in ID order (or newest first), filtered by
// type, state and last change, one page at a time: a query of the command
// rows of the whole table (one request per 1000 rows read, matching or
// not), or of every row, events included, for a summary.
func (s *Store) ListCommands(ctx context.Context, q cmdqtype.CommandQuery) (cmdqtype.CommandPage, error) {
	limit := q.Limit
	if limit == 0 {
		limit = cmdqtype.DefaultCommandLimit
	}
	if limit < 0 || limit > cmdqtype.MaxCommandLimit {
		return cmdqtype.CommandPage{}, fmt.Errorf("%w: command limit %d is outside 1..%d", storage.ErrInvalidArgument, q.Limit, cmdqtype.MaxCommandLimit)
	}
	if q.Newest || q.Summary {
		return s.listAll(ctx, q, limit)
	}
	out := cmdqtype.CommandPage{Commands: []cmdqtype.Status{}}
	// The tables are read one after the other (the day tables, oldest
	// first, then the base table); with day tables the continuation names
	// the table it continues ("<table>|<storage continuation>").
	names, err := s.tables.all(ctx)
	if err != nil {
		return cmdqtype.CommandPage{}, fmt.Errorf("cmdq: list commands: %w", err)
	}
	routed := s.tables.routed()
	ti, cont := 0, q.Continuation
	if routed && q.Continuation != "" {
		name, c, ok := strings.Cut(q.Continuation, "|")
		if !ok {
			return cmdqtype.CommandPage{}, fmt.Errorf("%w: %q; pass the continuation of the previous page unchanged", cmdqtype.ErrInvalidContinuation, q.Continuation)
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
	for ; ti < len(names); ti, cont = ti+1, "" {
		tb, err := s.tables.table(ctx, names[ti])
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return cmdqtype.CommandPage{}, fmt.Errorf("cmdq: list commands: %w", err)
		}
		sq := storage.Query{RowKeyPrefix: RowCommand, Continuation: cont}
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
					return cmdqtype.CommandPage{}, fmt.Errorf("%w: %q; pass the continuation of the previous page unchanged", cmdqtype.ErrInvalidContinuation, q.Continuation)
				}
				return cmdqtype.CommandPage{}, fmt.Errorf("cmdq: list commands: %w", err)
			}
			rows += len(page.Entities)
			for _, e := range page.Entities {
				if e.RowKey != RowCommand {
					continue
				}
				st := decodeStatus(e)
				if selected(q, st) {
					out.Commands = append(out.Commands, st)
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

// selected reports whether st matches q's type, state and since.
func selected(q cmdqtype.CommandQuery, st cmdqtype.Status) bool {
	return (q.Type == "" || st.Type == q.Type) && (q.State == "" || st.State == q.State) && !st.UpdatedAt.Before(q.Since)
}

// listAll reads the whole selection (and, for a summary, every event row)
// and returns one page of it, newest first or by ID.
func (s *Store) listAll(ctx context.Context, q cmdqtype.CommandQuery, limit int) (cmdqtype.CommandPage, error) {
	offset := 0
	if q.Continuation != "" {
		n, err := strconv.Atoi(q.Continuation)
		if err != nil || n < 0 {
			return cmdqtype.CommandPage{}, fmt.Errorf("%w: %q; pass the continuation of the previous page unchanged", cmdqtype.ErrInvalidContinuation, q.Continuation)
		}
		offset = n
	}
	now := s.nowUTC()
	var sum *cmdqtype.CommandSummary
	var first time.Time
	if q.Summary {
		first = q.Since
		if first.IsZero() {
			first = now.Add(-time.Hour)
		}
		first = first.UTC().Truncate(time.Minute)
		sum = &cmdqtype.CommandSummary{Counts: map[cmdqtype.State]int{}}
		for m := first; !m.After(now); m = m.Add(time.Minute) {
			sum.Minutes = append(sum.Minutes, cmdqtype.MinuteCounts{Start: m})
		}
	}
	sq := storage.Query{Top: 1000}
	if q.ScanLimit > 0 {
		sq.Top = min(sq.Top, q.ScanLimit)
	}
	if !q.Summary {
		sq.RowKeyPrefix = RowCommand
	}
	var all []cmdqtype.Status
	rows, partial := 0, false
	typeOf := map[string]string{} // partition → command type (its row comes first)
	names, err := s.tables.all(ctx)
	if err != nil {
		return cmdqtype.CommandPage{}, fmt.Errorf("cmdq: list commands: %w", err)
	}
	// Newest first: read the newest day tables first, so that a ScanLimit
	// keeps the recent commands.
	slices.Reverse(names[:len(names)-1])
	ti := 0
	tb := s.commands
	next := func() bool {
		for ; ti < len(names); ti++ {
			t, err := s.tables.table(ctx, names[ti])
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
			return cmdqtype.CommandPage{}, fmt.Errorf("cmdq: list commands: %w", err)
		}
		for _, e := range page.Entities {
			switch {
			case e.RowKey == RowCommand:
				st := decodeStatus(e)
				typeOf[e.PartitionKey] = st.Type
				if (q.Type == "" || st.Type == q.Type) && !st.UpdatedAt.Before(q.Since) {
					if sum != nil {
						sum.Counts[st.State]++
					}
					if q.State == "" || st.State == q.State {
						all = append(all, st)
					}
				}
			case sum != nil && strings.HasPrefix(e.RowKey, EventRowPrefix):
				if q.Type != "" && typeOf[e.PartitionKey] != q.Type {
					continue
				}
				at := timeProp(e, "Time")
				i := int(at.Sub(first) / time.Minute)
				if at.Before(first) || i >= len(sum.Minutes) {
					continue
				}
				switch cmdqtype.EventKind(str(e, "Kind")) {
				case cmdqtype.EventCompleted:
					sum.Minutes[i].Completed++
				case cmdqtype.EventFailed:
					sum.Minutes[i].Failed++
				case cmdqtype.EventPoisoned:
					sum.Minutes[i].Poisoned++
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
	}
	if q.Newest {
		sort.Slice(all, func(i, j int) bool {
			if !all[i].UpdatedAt.Equal(all[j].UpdatedAt) {
				return all[i].UpdatedAt.After(all[j].UpdatedAt)
			}
			return all[i].ID < all[j].ID
		})
	}
	out := cmdqtype.CommandPage{Commands: []cmdqtype.Status{}, Summary: sum}
	if offset >= len(all) {
		return out, nil
	}
	end := min(offset+limit, len(all))
	out.Commands = all[offset:end]
	if end < len(all) {
		out.Continuation = strconv.Itoa(end)
	}
	return out, nil
}
