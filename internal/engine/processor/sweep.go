package processor

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
)

// retention holds the sweep's state.
type retention struct {
	mu     sync.Mutex
	status model.RetentionStatus
}

// retentionPolicy returns the record layer's policy: Config.Retention, with
// each registered type's own retention.
func (p *Processor) retentionPolicy() record.RetentionPolicy {
	pol := record.RetentionPolicy{Completed: p.cfg.Retention.Completed, Discarded: p.cfg.Retention.Discarded}
	var shortest time.Duration
	for _, t := range p.reg.Types() {
		def, ok := p.reg.Lookup(t)
		if !ok {
			continue
		}
		for _, d := range []time.Duration{def.Retention.Completed, def.Retention.Discarded} {
			if d > 0 && (shortest == 0 || d < shortest) {
				shortest = d
			}
		}
	}
	pol.Min = shortest
	pol.Of = func(cmdType string) (time.Duration, time.Duration) {
		if def, ok := p.reg.Lookup(cmdType); ok {
			return def.Retention.Completed, def.Retention.Discarded
		}
		return 0, 0
	}
	return pol
}

// sweep runs the retention sweep (record.Store.Sweep) after a pending scan
// that found commands or day tables (an empty deployment's daily pass stays
// the one query of the scan).
func (p *Processor) sweep(ctx context.Context) {
	r := &p.retain
	rep, err := p.st.Sweep(ctx, record.SweepOptions{})
	r.mu.Lock()
	st := &r.status
	st.LastSweep = time.Now()
	st.Dropped += len(rep.Dropped)
	st.Moved += rep.Moved
	st.Deleted += rep.Deleted
	st.Pinned = maps.Clone(rep.Pinned)
	st.LastError = ""
	if err != nil {
		st.LastError = err.Error()
	}
	r.mu.Unlock()
	log := p.cfg.Logger.Info()
	if err != nil {
		log = p.cfg.Logger.Warn().Err(err)
	}
	if err != nil || len(rep.Dropped) > 0 || rep.Moved > 0 || rep.Deleted > 0 || len(rep.Pinned) > 0 {
		log.Strs("dropped", rep.Dropped).Int("moved", rep.Moved).Int("deleted", rep.Deleted).
			Interface("pinned", rep.Pinned).Int("calls", rep.Calls).Msg("cmdq processor: retention sweep")
	}
	for name, n := range rep.Pinned {
		p.cfg.Logger.Warn().Str("table", name).Int("commands", n).
			Msg("cmdq processor: retention: a day table past its retention still has commands that are not final (pending, running or retrying): it is kept and looked at again by the next sweep")
	}
}

// Retention returns what the retention sweeps of this processor did.
func (p *Processor) Retention() model.RetentionStatus {
	p.retain.mu.Lock()
	defer p.retain.mu.Unlock()
	st := p.retain.status
	st.Pinned = maps.Clone(st.Pinned)
	return st
}
