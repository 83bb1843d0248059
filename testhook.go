package cmdq

import (
	"fmt"

	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/internal/testhook"
	"github.com/cmdq-dev/cmdq/storage"
)

func init() {
	testhook.NewClient = func(st storage.Store, cfg any, sw tuning.Switches) (any, error) {
		c, ok := cfg.(Config)
		if !ok {
			return nil, fmt.Errorf("testhook: a cmdq.Config, not %T", cfg)
		}
		return newClient(st, c, sw)
	}
}
