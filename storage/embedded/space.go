package embedded

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// DefaultReserve is Options.Reserve's default: 256 MiB. It covers what
// the engine may write without a new write coming in (a memtable flush,
// a compaction of the first levels, a new log file) with room to spare.
const DefaultReserve = 256 << 20

// The engine (Pebble) does not survive a full disk: a write-ahead log that
// cannot grow or rotate ends the process. So the store refuses writes
// before that happens: while the free space of its volume is below the
// reserve, every write fails with an error wrapping storage.ErrFull,
// before the engine sees it. The free space is probed (one statfs) at
// most every spaceInterval, and every spaceShortInterval while it is
// less than twice the reserve (a refused write probes again after that
// long, so writes resume soon after space returns).
const (
	spaceInterval      = time.Second
	spaceShortInterval = 100 * time.Millisecond
)

// spaceProbe keeps the last probe of the free space.
type spaceProbe struct {
	dir     string
	reserve uint64 // 0: writes are never refused (and nothing is probed)
	free    func(dir string) (uint64, error)
	log     func(format string, args ...any)

	mu   sync.Mutex // one probe at a time
	last atomic.Pointer[spaceSample]
	full bool // the last probe found less than the reserve (under mu)
}

type spaceSample struct {
	at   time.Time
	free uint64
	err  error
}

func newSpaceProbe(dir string, reserve int64, free func(string) (uint64, error), log func(string, ...any)) *spaceProbe {
	p := &spaceProbe{dir: dir, free: free, log: log}
	if reserve > 0 {
		p.reserve = uint64(reserve)
		p.probe()
	}
	return p
}

// sample returns the last probe, probing again when it is due. A probe
// already running is not waited for: its predecessor answers.
func (p *spaceProbe) sample() *spaceSample {
	s := p.last.Load()
	every := spaceInterval
	if s.err == nil && s.free < 2*p.reserve {
		every = spaceShortInterval
	}
	if time.Since(s.at) < every || !p.mu.TryLock() {
		return s
	}
	defer p.mu.Unlock()
	if n := p.last.Load(); n != s {
		return n
	}
	return p.probeLocked()
}

func (p *spaceProbe) probe() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probeLocked()
}

func (p *spaceProbe) probeLocked() *spaceSample {
	free, err := p.free(p.dir)
	s := &spaceSample{at: time.Now(), free: free, err: err}
	p.last.Store(s)
	if err == nil {
		switch full := free < p.reserve; {
		case full && !p.full:
			p.log("disk full: %s free, below the reserve of %s; writes are refused until space is freed on this volume",
				storage.FormatBytes(free), storage.FormatBytes(p.reserve))
		case !full && p.full:
			p.log("space returned: %s free (reserve %s); writes are accepted again", storage.FormatBytes(free), storage.FormatBytes(p.reserve))
		}
		p.full = free < p.reserve
	}
	return s
}

// check returns nil when a write may go ahead, and an error wrapping
// storage.ErrFull while the free space is below the reserve. A failed
// probe refuses nothing.
func (p *spaceProbe) check() error {
	if p.reserve == 0 {
		return nil
	}
	s := p.sample()
	if s.err != nil || s.free >= p.reserve {
		return nil
	}
	return storage.FullError(p.dir, s.free, p.reserve)
}

// Space reports the free space of the data directory's volume as last
// probed, and the reserve below which the store refuses writes
// (storage.Space). It makes no engine call; the probe is one statfs (or
// Options.FreeSpace), made at most every second, every 100 ms while less
// than twice the reserve is free. With the check off (a negative
// Options.Reserve) Free is probed on each call and Reserve is 0.
func (s *Store) Space() storage.SpaceStatus {
	p := s.space
	if p.reserve == 0 {
		free, err := p.free(p.dir)
		return storage.SpaceStatus{Dir: p.dir, Free: free, Err: err}
	}
	sm := p.sample()
	return storage.SpaceStatus{Dir: p.dir, Free: sm.free, Reserve: p.reserve, Err: sm.err}
}
