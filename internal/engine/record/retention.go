package record

import (
	"fmt"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// Retention (docs/lifecycle.md, "Retention"): the defaults are
// model.DefaultCompletedRetention and model.DefaultDiscardedRetention, and
// model.KeepForever keeps commands forever.

// RetentionPolicy is how long final commands are kept: Completed after
// completing, Discarded after being discarded or cancelled (0 = the
// default, model.KeepForever = always). Poisoned commands are kept until an operator requeues or
// discards them. Of, when set, gives a command type's own retention (its
// zero fields fall back to Completed and Discarded).
type RetentionPolicy struct {
	Completed, Discarded time.Duration
	// Of returns the retention of a command type (zero fields: the
	// policy's), and Min the shortest retention of any type (0: the
	// policy's shortest). Both may be nil.
	Of  func(cmdType string) (completed, discarded time.Duration)
	Min time.Duration
}

// WithDefaults returns p with its zero fields set to the defaults.
func (p RetentionPolicy) WithDefaults() RetentionPolicy {
	if p.Completed == 0 {
		p.Completed = model.DefaultCompletedRetention
	}
	if p.Discarded == 0 {
		p.Discarded = model.DefaultDiscardedRetention
	}
	return p
}

// Keep returns how long a command of type t in state st is kept after its
// last change (model.KeepForever: always; 0: st is not final).
func (p RetentionPolicy) Keep(t string, st model.State) time.Duration {
	c, d := p.Completed, p.Discarded
	if p.Of != nil {
		tc, td := p.Of(t)
		if tc != 0 {
			c = tc
		}
		if td != 0 {
			d = td
		}
	}
	switch st {
	case model.StateCompleted:
		return c
	case model.StateDiscarded, model.StateCancelled:
		return d
	case model.StatePoisoned:
		return model.KeepForever
	}
	return 0
}

// shortest returns the shortest retention (the day tables' minimum age).
func (p RetentionPolicy) shortest() time.Duration {
	m := p.Completed
	if p.Discarded > 0 && (m < 0 || p.Discarded < m) {
		m = p.Discarded
	}
	if p.Min > 0 && (m < 0 || p.Min < m) {
		m = p.Min
	}
	return m
}

// HorizonDays returns how many days after its day a day table is first
// considered by the sweeper: the shortest retention in whole days, at
// least the issue window (model.IssueWindowPastDays) plus a day for clock skew,
// so that no re-issue within the window can find its table gone.
func (p RetentionPolicy) HorizonDays() int {
	n := model.IssueWindowPastDays + 1
	if m := p.shortest(); m > 0 {
		n = max(n, int((m+24*time.Hour-1)/(24*time.Hour)))
	} else if m < 0 {
		return -1 // everything is kept forever
	}
	return n
}

// describe says how long commands are kept, for error messages.
func (p RetentionPolicy) describe() string {
	f := func(d time.Duration) string {
		switch {
		case d < 0:
			return "forever"
		case d%(24*time.Hour) == 0:
			return fmt.Sprintf("%d days", d/(24*time.Hour))
		}
		return d.String()
	}
	return fmt.Sprintf("completed %s, discarded %s", f(p.Completed), f(p.Discarded))
}

// Retention returns the Store's retention policy (Options.Retention, with
// the defaults).
func (s *Store) Retention() RetentionPolicy { return s.retention }

// goneErr is the error of a read of command id (which carries a day) that
// is in no table: ErrExpired once its day is past retention, else
// ErrNotFound.
func (s *Store) goneErr(id string) error {
	day, ok := layout.IDDay(id)
	h := s.retention.HorizonDays()
	if !ok || h < 0 || day+h >= layout.DayOf(s.now()) {
		return notFound(id)
	}
	return fmt.Errorf("%w: command %s (issued %s) was removed after its retention (%s) (%w; %w)",
		model.ErrExpired, id, layout.DayTime(day).Format(time.DateOnly), s.retention.describe(), model.ErrNotFound, storage.ErrNotFound)
}

// sweepable reports whether the day table of id (which carries a day) may
// be old enough for a sweeper (whatever its retention) to have moved
// commands out of it: it is past the issue window and a day of skew.
func (s *Store) sweepable(id string) bool {
	day, ok := layout.IDDay(id)
	return ok && day+model.IssueWindowPastDays+1 < layout.DayOf(s.now())
}
