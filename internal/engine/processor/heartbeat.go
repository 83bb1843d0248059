package processor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
)

// The heartbeat: while a Run or RunFor runs, the processor writes a row
// saying who and where it is and what it does (shared.ProcessorPartition)
// when the run starts and then once every HeartbeatInterval (1 minute by
// default), and deletes it when the run ends. Once it has run for an
// interval, and then about once every model.ProcessorForgetAfter, it
// also deletes the rows of processors gone for longer than that (killed or
// crashed, so they never deleted theirs). Cost: one upsert per interval
// (60 an hour), one query an hour (plus one delete per dead row found), and
// one delete at the end of each run; nothing while the processor is not
// running. A heartbeat or clean-up that fails is logged and tried again at
// the next interval: it never makes the processor unhealthy.

// newInstanceID returns a processor instance ID: "p" and 16 random hex
// digits.
func newInstanceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "p" + hex.EncodeToString(b[:])
}

// InstanceID returns the processor's instance ID: the row key of its
// heartbeat, made when the processor was created.
func (p *Processor) InstanceID() string { return p.instance }

// noteFailure records a failed or poisoned attempt's observation for the
// heartbeat.
func (p *Processor) noteFailure(o model.Observation) {
	f := shared.Failure{CommandID: o.CommandID, Type: o.Type, Poisoned: o.Kind == model.ObservedPoisoned, At: o.Time}
	if o.Err != nil {
		f.Error = o.Err.Error()
		if len(f.Error) > 4096 {
			f.Error = f.Error[:4096] // the row keeps 1024 units of it
		}
	}
	if f.At.IsZero() {
		f.At = time.Now()
	}
	p.failMu.Lock()
	p.lastFailure = f
	p.failMu.Unlock()
}

// beat returns the processor's heartbeat row as of now, its counts those
// of the run s (prev: the counts the last beat reported).
func (p *Processor) beat(s *session, started time.Time, prev model.Stats) (shared.Beat, model.Stats) {
	h := p.Health()
	host, _ := os.Hostname()
	c := s.counts()
	p.failMu.Lock()
	last := p.lastFailure
	p.failMu.Unlock()
	return shared.Beat{ID: p.instance, Name: p.cfg.Worker, Host: host, PID: os.Getpid(), State: string(h.State),
		InFlight: h.InFlight, Concurrency: p.cfg.Concurrency, Queues: p.Queues(), Started: started,
		Every: p.cfg.HeartbeatInterval, Completed: c.Completed, Failed: c.Failed, Poisoned: c.Poisoned,
		RecentCompleted: c.Completed - prev.Completed, RecentFailed: c.Failed - prev.Failed, RecentPoisoned: c.Poisoned - prev.Poisoned,
		LastFailure: last, Wake: p.WakeAddr()}, c
}

// heartbeatLoop writes the heartbeat of the run s (begun at started) until
// the run stops taking work, then deletes it.
func (p *Processor) heartbeatLoop(s *session, started time.Time) {
	every := p.cfg.HeartbeatInterval
	if every <= 0 {
		return
	}
	// A call may take the interval, at least 2 s (an interval that short is
	// a test's: storage on a loaded machine answers slower), at most 10 s.
	callTimeout := min(max(every, 2*time.Second), 10*time.Second)
	var prev model.Stats // the counts the last written beat reported
	write := func() {
		// Not canceled by the run's end: a write the client gave up on may
		// still be applied by the service after the delete that follows,
		// and bring the row back (seen on a loaded Azurite). The loop waits
		// for its answer, within callTimeout, before it deletes.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ops), callTimeout)
		defer cancel()
		if !s.endBy.IsZero() { // RunFor: not past its end
			var c2 context.CancelFunc
			ctx, c2 = context.WithDeadline(ctx, s.endBy.Add(-50*time.Millisecond))
			defer c2()
		}
		b, counts := p.beat(s, started, prev)
		if _, err := p.st.WriteBeat(ctx, b); err != nil && s.take.Err() == nil {
			p.cfg.Logger.Warn().Err(err).Msg("cmdq processor: heartbeat not written; trying again in " + every.String())
			return
		}
		prev = counts
	}
	write()
	t := time.NewTicker(every)
	defer t.Stop()
	var cleaned time.Time // the first clean-up comes after one interval
	for {
		select {
		case <-s.take.Done():
			// The run drains now and ends its storage context soon after:
			// the delete has its own time (RunFor's: until its end), and
			// a second try within it if the first fails: a listing right
			// after a clean stop should not show this processor.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ops), callTimeout)
			if !s.endBy.IsZero() {
				var c2 context.CancelFunc
				ctx, c2 = context.WithDeadline(ctx, s.endBy.Add(-50*time.Millisecond))
				defer c2()
			}
			var err error
			for try := 0; try < 2 && ctx.Err() == nil; try++ {
				if err = p.st.DeleteBeat(ctx, p.instance); err == nil {
					break
				}
			}
			if err != nil {
				p.cfg.Logger.Warn().Err(err).Msg("cmdq processor: heartbeat row not deleted; listings show it gone after " + strconv.Itoa(model.ProcessorGoneAfter) + " intervals")
			}
			cancel()
			return
		case <-t.C:
		}
		write()
		if now := time.Now(); now.Sub(cleaned) >= model.ProcessorForgetAfter {
			ctx, cancel := context.WithTimeout(s.ops, callTimeout)
			n, err := p.st.DeleteBeatsBefore(ctx, now.Add(-model.ProcessorForgetAfter), p.instance)
			cancel()
			if err != nil {
				// Tried again at the next interval, as a failed beat.
				p.cfg.Logger.Warn().Err(err).Msg("cmdq processor: old heartbeat rows not cleaned up; trying again in " + every.String())
				continue
			}
			cleaned = now
			if n > 0 {
				p.cfg.Logger.Info().Int("rows", n).Msg("cmdq processor: deleted the heartbeat rows of processors gone for over an hour")
			}
		}
	}
}
