package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// The engine's manifest (the list of live data files) is an append-only
// log of checksummed records, and the engine reads a short last record as
// a write torn by a crash. A manifest cut shorter than what was synced
// would then open as an older state, and the engine would delete the data
// files it no longer names. So the store records, in manifestGuardFile,
// the manifest's name and its size after every change the engine has
// synced (each flush, compaction and manifest rotation, and Close), and
// Open refuses a current manifest shorter than recorded.
const manifestGuardFile = "CMDQ-MANIFEST"

// manifestGuard keeps manifestGuardFile up to date.
type manifestGuard struct {
	dir  string
	mu   sync.Mutex
	name string // current manifest file name
}

// currentManifest returns the manifest the engine's marker file names, or
// "" when there is none.
func currentManifest(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	best, bestN := "", -1
	for _, e := range entries {
		// marker.manifest.<iteration>.<manifest file name>
		rest, ok := strings.CutPrefix(e.Name(), "marker.manifest.")
		if !ok {
			continue
		}
		iter, name, ok := strings.Cut(rest, ".")
		n, err := strconv.Atoi(iter)
		if !ok || err != nil {
			continue
		}
		if n > bestN {
			best, bestN = name, n
		}
	}
	return best, nil
}

// check compares the current manifest with the recorded size.
func (g *manifestGuard) check() error {
	name, err := currentManifest(g.dir)
	if err != nil {
		return fmt.Errorf("embedded: read data directory %s: %w", g.dir, err)
	}
	g.name = name
	b, err := os.ReadFile(filepath.Join(g.dir, manifestGuardFile))
	if errors.Is(err, os.ErrNotExist) || name == "" {
		return nil // an older store, or the engine reports the missing marker
	}
	if err != nil {
		return fmt.Errorf("embedded: read %s: %w", filepath.Join(g.dir, manifestGuardFile), err)
	}
	recName, sizeText, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	size, perr := strconv.ParseInt(sizeText, 10, 64)
	if !ok || perr != nil {
		return corrupt(g.dir, filepath.Join(g.dir, manifestGuardFile), fmt.Errorf("unreadable content %.60q", b))
	}
	if recName != name {
		return nil // rotated after the last record: nothing to compare
	}
	path := filepath.Join(g.dir, name)
	fi, err := os.Stat(path)
	if err != nil {
		return corrupt(g.dir, path, err)
	}
	if fi.Size() < size {
		return corrupt(g.dir, path, fmt.Errorf("is %d bytes, shorter than the %d bytes it held when last synced: it was truncated", fi.Size(), size))
	}
	return nil
}

// created records a new manifest (the engine's ManifestCreated event).
func (g *manifestGuard) created(path string) {
	g.mu.Lock()
	g.name = filepath.Base(path)
	g.mu.Unlock()
	g.record()
}

// record writes the current manifest's size durably. Failures are
// ignored: the guard only ever understates the size.
func (g *manifestGuard) record() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.name == "" {
		return
	}
	fi, err := os.Stat(filepath.Join(g.dir, g.name))
	if err != nil {
		return
	}
	tmp := filepath.Join(g.dir, manifestGuardFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return
	}
	_, err = fmt.Fprintf(f, "%s %d\n", g.name, fi.Size())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && os.Rename(tmp, filepath.Join(g.dir, manifestGuardFile)) == nil {
		_ = syncDir(g.dir)
	}
}
