package record

import (
	"context"
	"errors"
	"fmt"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// Cancel cancels command id for by: it loads the command (one point read)
// and appends a cancelled event (By = by; one batch, conditional on the
// ETag), which makes it final. On a conflict (the command was written
// since it was loaded) it decides again on the command as reloaded: a
// command that ended meanwhile is not cancelled. prepare, when set, is
// called with the loaded command before each write (the caller's
// in-process notices and waits, see cmdq.Client.Cancel); its error ends
// Cancel with nothing written. already is true when the command was
// cancelled before (nothing written). A command that ended otherwise
// (completed, poisoned, discarded) gives an error wrapping
// model.ErrNotCancellable; an unknown ID, ErrNotFound.
func (s *Store) Cancel(ctx context.Context, id, by string, prepare func(ctx context.Context, rec *Record) error) (rec *Record, already bool, err error) {
	if rec, err = s.Load(ctx, id); err != nil {
		return nil, false, err
	}
	for try := 0; ; try++ {
		switch st := rec.Status.State; {
		case st == model.StateCancelled:
			return rec, true, nil
		case st.Final():
			return rec, false, fmt.Errorf("%w: command %s is %s", model.ErrNotCancellable, id, st)
		}
		if prepare != nil {
			if err := prepare(ctx, rec); err != nil {
				return nil, false, err
			}
		}
		err = s.Append(ctx, rec, model.Event{Kind: model.EventCancelled, By: by})
		if err == nil {
			return rec, false, nil
		}
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.Current == nil || try >= 4 {
			return nil, false, fmt.Errorf("cmdq: cancel command %s: %w", id, err)
		}
		rec = ce.Current
	}
}
