package retention

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
)

// Sweeper runs a processor's retention sweeps and keeps what they did
// (model.RetentionStatus). A processor runs it after a pending scan of
// its reconciler that found commands or day tables (daily: an empty
// deployment's pass stays the one query of the scan). Safe for concurrent
// use.
type Sweeper struct {
	logger zerolog.Logger

	mu     sync.Mutex
	status model.RetentionStatus
}

// NewSweeper returns a Sweeper that logs to logger.
func NewSweeper(logger zerolog.Logger) *Sweeper { return &Sweeper{logger: logger} }

// Run sweeps st (Sweep, with st's retention policy), records what it did
// and logs it.
func (w *Sweeper) Run(ctx context.Context, st *record.Store) {
	rep, err := Sweep(ctx, st, Options{})
	w.mu.Lock()
	s := &w.status
	s.LastSweep = time.Now()
	s.Dropped += len(rep.Dropped)
	s.Moved += rep.Moved
	s.Deleted += rep.Deleted
	s.Pinned = maps.Clone(rep.Pinned)
	s.LastError = ""
	if err != nil {
		s.LastError = err.Error()
	}
	w.mu.Unlock()
	log := w.logger.Info()
	if err != nil {
		log = w.logger.Warn().Err(err)
	}
	if err != nil || len(rep.Dropped) > 0 || rep.Moved > 0 || rep.Deleted > 0 || len(rep.Pinned) > 0 {
		log.Strs("dropped", rep.Dropped).Int("moved", rep.Moved).Int("deleted", rep.Deleted).
			Interface("pinned", rep.Pinned).Int("calls", rep.Calls).Msg("cmdq processor: retention sweep")
	}
	for name, n := range rep.Pinned {
		w.logger.Warn().Str("table", name).Int("commands", n).
			Msg("cmdq processor: retention: a day table past its retention still has commands that are not final (pending, running or retrying): it is kept and looked at again by the next sweep")
	}
}

// Status returns what the sweeps of this Sweeper did.
func (w *Sweeper) Status() model.RetentionStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.status
	st.Pinned = maps.Clone(st.Pinned)
	return st
}
