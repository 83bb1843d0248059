package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The engine replays the write-ahead logs newer than its manifest's last
// flush, and reads a log that is missing as one that never existed and an
// emptied or shortened one as a log that ends there: either way the store
// would open without error and without the writes the log held (commands
// accepted, then gone). So the store records, in walGuardFile, every log
// file it creates and the size that file had (when created, and again when
// the store closes), and Open refuses a store whose recorded log is missing
// or shorter than recorded, as it does for other damage. A log leaves the
// record before the engine deletes or recycles it (it is then obsolete: its
// writes are in the data files).
const walGuardFile = "CMDQ-WAL"

// walGuard keeps walGuardFile up to date.
type walGuard struct {
	dir  string
	mu   sync.Mutex
	logs map[string]int64 // log file name → size it had at least
}

func newWALGuard(dir string) *walGuard {
	return &walGuard{dir: dir, logs: map[string]int64{}}
}

// check reads walGuardFile and compares the recorded logs with the
// directory. A store written before the guard existed has none: nothing is
// checked.
func (g *walGuard) check() error {
	path := filepath.Join(g.dir, walGuardFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("embedded: read %s: %w", path, err)
	}
	logs := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		name, sizeText, ok := strings.Cut(line, " ")
		size, perr := strconv.ParseInt(sizeText, 10, 64)
		if !ok || perr != nil || size < 0 || name != filepath.Base(name) || !strings.HasSuffix(name, ".log") {
			return corrupt(g.dir, path, fmt.Errorf("unreadable line %.60q", line))
		}
		logs[name] = size
	}
	for _, name := range slices.Sorted(mapKeys(logs)) {
		lp := filepath.Join(g.dir, name)
		fi, err := os.Stat(lp)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return corrupt(g.dir, lp, errors.New("is missing: this write-ahead log holds the store's latest writes (not yet in its data files), so opening without it would lose them"))
		case err != nil:
			return corrupt(g.dir, lp, err)
		case fi.Size() < logs[name]:
			return corrupt(g.dir, lp, fmt.Errorf("is %d bytes, shorter than the %d bytes it held: this write-ahead log was truncated, and opening without its end would lose the store's latest writes", fi.Size(), logs[name]))
		}
	}
	g.mu.Lock()
	g.logs = logs
	g.mu.Unlock()
	return nil
}

func mapKeys(m map[string]int64) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// added records the log at path (created or recycled by the engine), with
// its size now. It returns an error when the record cannot be written: the
// engine must not use a log the record does not name.
func (g *walGuard) added(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("embedded: record log %s: %w", path, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.logs[filepath.Base(path)] = fi.Size()
	return g.writeLocked()
}

// removing takes the log at path out of the record before the engine
// deletes or recycles it.
func (g *walGuard) removing(path string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	name := filepath.Base(path)
	if _, ok := g.logs[name]; !ok {
		return nil
	}
	delete(g.logs, name)
	return g.writeLocked()
}

// closed records the recorded logs' sizes after the engine closed (its
// logs are synced): a log cut shorter while the store is closed is found
// whatever its length. Failures are ignored: the record then understates.
func (g *walGuard) closed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for name := range g.logs {
		if fi, err := os.Stat(filepath.Join(g.dir, name)); err == nil && fi.Size() > g.logs[name] {
			g.logs[name] = fi.Size()
		}
	}
	_ = g.writeLocked()
}

// writeLocked writes the record durably (a new file renamed over the old).
func (g *walGuard) writeLocked() error {
	var b strings.Builder
	for _, name := range slices.Sorted(mapKeys(g.logs)) {
		fmt.Fprintf(&b, "%s %d\n", name, g.logs[name])
	}
	path := filepath.Join(g.dir, walGuardFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err == nil {
		_, err = f.WriteString(b.String())
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(g.dir)
	}
	if err != nil {
		return fmt.Errorf("embedded: write %s: %w", path, err)
	}
	return nil
}
