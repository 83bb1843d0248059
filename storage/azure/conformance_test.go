package azure_test

import (
	"testing"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/storagetest"
)

// TestConformance runs the shared storage conformance suite against Azurite
// (or the account in AZURE_STORAGE_CONNECTION_STRING) with one shared Store.
func TestConformance(t *testing.T) {
	t.Parallel()
	storagetest.Run(t, func(t *testing.T) storage.Store { return openStore(t) })
}
