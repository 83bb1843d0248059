package embedded

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// verify checks every block checksum of every data file (sstable) in dir,
// before the engine opens. The engine's Open then checks the manifest and
// the log (checksummed records) and that every live data file exists with
// its recorded size. A failure (or a panic of the engine's reader on a
// damaged file) is an error wrapping ErrCorrupt that names the file.
func verify(dir string, ropts sstable.ReaderOptions) (err error) {
	file := dir
	defer func() {
		if r := recover(); r != nil {
			err = corrupt(dir, file, fmt.Errorf("the engine failed while reading it: %v", r))
		}
	}()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("embedded: read data directory %s: %w", dir, err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sst") {
			continue
		}
		file = filepath.Join(dir, e.Name())
		if err := verifyTable(file, ropts); err != nil {
			return corrupt(dir, file, err)
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
