package embedded_test

import (
	"testing"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/storagetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	s := openStore(t, nil)
	storagetest.RunWithFeatures(t, storagetest.Features{Combiner: true, GroupCombiner: true}, func(t *testing.T) storage.Store { return s })
}

// BenchmarkStore runs the shared storage benchmarks on the embedded store.
func BenchmarkStore(b *testing.B) {
	storagetest.Benchmark(b, func(b testing.TB) storage.Store { return openStore(b, nil) })
}
