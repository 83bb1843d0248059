package instrument_test

import (
	"path/filepath"
	"testing"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
	"github.com/cmdq-dev/cmdq/storage/instrument"
	"github.com/cmdq-dev/cmdq/storage/storagetest"
)

// TestConformanceWrapped runs the conformance suite through the wrapper
// around the embedded store: the wrapper must pass on every ability the
// store has (Combiner, GroupCombiner) and keep its semantics.
func TestConformanceWrapped(t *testing.T) {
	t.Parallel()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	w := instrument.Wrap(st, instrument.Hooks{After: func(instrument.Call) {}})
	storagetest.RunWithFeatures(t, storagetest.Features{Combiner: true, GroupCombiner: true}, func(t *testing.T) storage.Store { return w })
}
