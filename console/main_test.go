package console_test

import (
	"os"
	"testing"

	"github.com/cmdq-dev/cmdq/internal/azurite"
)

// TestMain stops the Azurite that the tests on Azure (the doorbells:
// doorbell_test.go) start lazily.
func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }
