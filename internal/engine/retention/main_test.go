package retention_test

import (
	"os"
	"testing"

	"github.com/cmdq-dev/cmdq/internal/azurite"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }
