package azure_test

import (
	"testing"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/storagetest"
)

// BenchmarkStorage runs the shared storage benchmarks against Azurite (or the
// account in AZURE_STORAGE_CONNECTION_STRING):
//
//	go test -run '^$' -bench . ./storage/azure/
func BenchmarkStorage(b *testing.B) {
	storagetest.Benchmark(b, func(b testing.TB) storage.Store { return openStore(b) })
}
