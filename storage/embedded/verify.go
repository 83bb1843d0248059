package embedded

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// verify checks every block checksum of every data file (sstable) of the
// store in dir, before the engine opens for writing. The store's data
// files are the ones its manifest names, as the engine reads it (liveTables);
// a data file in the directory that the manifest does not name is the
// output of a flush or compaction that a crash cut short (or one that was
// being deleted): it is no part of the store, the engine deletes it when
// it opens, and verify leaves it alone. The engine's Open then checks the
// manifest and the log (checksummed records) and that every live data file
// exists with its recorded size. A failure (or a panic of the engine's
// reader on a damaged file) is an error wrapping ErrCorrupt that names the
// file.
func verify(dir string, popts *pebble.Options) (err error) {
	names, err := liveTables(dir, popts)
	if err != nil {
		return err
	}
	file := dir
	defer func() {
		if r := recover(); r != nil {
			err = corrupt(dir, file, fmt.Errorf("the engine failed while reading it: %v", r))
		}
	}()
	ropts := popts.MakeReaderOptions()
	for _, name := range names {
		file = filepath.Join(dir, name)
		if err := verifyTable(file, ropts); err != nil {
			return corrupt(dir, file, err)
		}
	}
	return nil
}

// liveTables returns the names of the data files the store's manifest
// names, sorted. It opens the engine read-only (which writes nothing: no
// manifest, log or options file, no deletion) and lists its tables; the
// store's lock is held by the caller. Failures wrap ErrCorrupt, as
// openEngine's.
func liveTables(dir string, popts *pebble.Options) ([]string, error) {
	ro := popts.Clone()
	ro.ReadOnly = true
	ro.EventListener = &pebble.EventListener{} // no flush, compaction or manifest to report
	db, err := openEngine(dir, ro)
	if err != nil {
		return nil, err
	}
	levels, err := db.SSTables()
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, corrupt(dir, dir, err)
	}
	seen := map[string]bool{}
	var names []string
	for _, tables := range levels {
		for _, t := range tables {
			if t.BackingType != pebble.BackingTypeLocal {
				continue
			}
			name := fmt.Sprintf("%s.sst", t.BackingSSTNum)
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

func verifyTable(file string, ropts sstable.ReaderOptions) error {
	f, err := vfs.Default.Open(file)
	if err != nil {
		return err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return err
	}
	r, err := sstable.NewReader(context.Background(), readable, ropts)
	if err != nil {
		_ = readable.Close()
		return err
	}
	defer r.Close()
	return r.ValidateBlockChecksums()
}
