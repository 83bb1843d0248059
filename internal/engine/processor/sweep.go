package processor

import (
	"context"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
)

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

// sweep runs the retention sweep (retention.Sweeper) after a pending scan
// that found commands or day tables (an empty deployment's daily pass stays
// the one query of the scan).
func (p *Processor) sweep(ctx context.Context) { p.retain.Run(ctx, p.st) }

// Retention returns what the retention sweeps of this processor did.
func (p *Processor) Retention() model.RetentionStatus { return p.retain.Status() }
