package shared_test

import (
	"os"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

// day0 is the issue day of the commands in these tests.
var day0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

const day = 24 * time.Hour
