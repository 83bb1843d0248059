package embedded

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// verify checks every block checksum of every live data file (sstable) of
// db. Pebble's own Open has already checked the manifest and the log (both
// checksummed records) and that every data file exists with its recorded
// size. A failure (or a panic of the engine on a damaged file) is an error
// wrapping ErrCorrupt that names the file.
func verify(dir string, db *pebble.DB, ropts sstable.ReaderOptions) (err error) {
	file := dir
	defer func() {
		if r := recover(); r != nil {
			err = corrupt(dir, file, fmt.Errorf("the engine failed while reading it: %v", r))
		}
	}()
	levels, err := db.SSTables()
	if err != nil {
		return corrupt(dir, dir, err)
	}
	seen := map[uint64]bool{}
	for _, level := range levels {
		for _, t := range level {
			n := uint64(t.BackingSSTNum)
			if seen[n] {
				continue
			}
			seen[n] = true
			file = filepath.Join(dir, fmt.Sprintf("%06d.sst", n))
			if err := verifyTable(file, ropts); err != nil {
				return corrupt(dir, file, err)
			}
		}
	}
	return nil
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
