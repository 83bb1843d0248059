package layout_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

func TestNames(t *testing.T) {
	t.Parallel()
	n := layout.Names{Prefix: model.DefaultPrefix}
	if n.Queue(model.DefaultQueue) != "cmdq-commands" || n.Queue("slow") != "cmdq-slow" || n.CommandsTable() != "cmdqcommands" || n.PoisonTable() != "cmdqpoison" {
		t.Fatalf("default names: %s %s %s %s", n.Queue(model.DefaultQueue), n.Queue("slow"), n.CommandsTable(), n.PoisonTable())
	}
	if err := (layout.Names{}).Validate(); !errors.Is(err, storage.ErrInvalidName) {
		t.Fatalf("empty prefix: %v (the caller applies the default)", err)
	}
	if err := n.Validate("commands", "slow"); err != nil {
		t.Fatal(err)
	}
	err := layout.Names{Prefix: "Bad_Prefix"}.Validate()
	if !errors.Is(err, storage.ErrInvalidName) {
		t.Fatalf("bad prefix: %v", err)
	}
	err = n.Validate("UPPER", "a--b")
	if !errors.Is(err, storage.ErrInvalidName) || !strings.Contains(err.Error(), "UPPER") || !strings.Contains(err.Error(), "a--b") {
		t.Fatalf("bad queues should both be reported: %v", err)
	}
}
