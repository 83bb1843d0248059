package processor

import (
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/clock"
)

// The processor's clock (Config.Clock; the system clock by default):
// every time it compares with one stored or computed from another's
// clock, and every wait for such a time, reads it.

// now returns the current time on the processor's clock.
func (p *Processor) now() time.Time { return p.cfg.Clock.Now() }

// since returns the time passed since t on the processor's clock.
func (p *Processor) since(t time.Time) time.Duration { return clock.Since(p.cfg.Clock, t) }

// until returns the time until t on the processor's clock.
func (p *Processor) until(t time.Time) time.Duration { return clock.Until(p.cfg.Clock, t) }
