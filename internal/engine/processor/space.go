package processor

import (
	"errors"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// spaceRecheck is how often a poller that found the store's disk full
// looks again (no storage call: the store's cached probe).
const spaceRecheck = time.Second

// roomToTake waits while the store refuses writes for lack of disk space
// (storage.ErrFull): the processor takes no work it could not record.
// Health says why meanwhile (Health.StorageFull). It returns false when
// the session stops taking work.
func (p *Processor) roomToTake(s *session) bool {
	for {
		err := storage.CheckSpace(p.store, 0)
		p.noteSpace(err)
		if err == nil {
			return true
		}
		t := time.NewTimer(spaceRecheck)
		select {
		case <-t.C:
		case <-s.take.Done():
			t.Stop()
			return false
		}
	}
}

// noteSpace records whether the store refuses writes for lack of space
// (err wraps storage.ErrFull) or accepts them again (err nil), and logs
// the change.
func (p *Processor) noteSpace(err error) {
	if err != nil && !errors.Is(err, storage.ErrFull) {
		return
	}
	h := p.health
	h.mu.Lock()
	was := h.storageFull
	if err != nil {
		h.storageFull = err.Error()
	} else {
		h.storageFull = ""
	}
	h.mu.Unlock()
	switch {
	case err != nil && was == "":
		p.cfg.Logger.Warn().Err(err).Msg("cmdq processor: storage full: taking no work until space is freed")
		p.emit(model.Observation{Kind: model.ObservedHealth, Time: time.Now(), Err: err, Health: p.Health()})
	case err == nil && was != "":
		p.cfg.Logger.Info().Msg("cmdq processor: storage has space again: taking work")
		p.emit(model.Observation{Kind: model.ObservedHealth, Time: time.Now(), Health: p.Health()})
	}
}
