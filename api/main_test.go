package api_test

import (
	"os"
	"testing"

	"github.com/cmdq-dev/cmdq/internal/azurite"
)

// TestMain starts Azurite lazily for the tests that run on both stores
// (testenv.Each) and stops it at the end.
func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }
