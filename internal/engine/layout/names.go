package layout

import (
	"errors"
	"fmt"

	"github.com/cmdq-dev/cmdq/storage"
)

// Names derives the storage names from a prefix: queue "<prefix>-<queue>",
// tables "<prefix>commands" and "<prefix>poison" (the data layout,
// docs/lifecycle.md). The prefix has no default here: callers apply
// cmdq.DefaultPrefix.
type Names struct {
	// Prefix starts every name. It must be lowercase letters and digits,
	// starting with a letter, so that queue and table names are both valid.
	Prefix string
	// Shards is the number of shards of each logical queue it names
	// (docs/scaling.md): 0 or 1 is one storage queue, as a queue it does
	// not name. At most MaxShards.
	Shards map[string]int
}

// Queue returns the storage queue name of a logical queue: "cmdq-commands",
// "cmdq-slow", ….
func (n Names) Queue(logical string) string { return n.Prefix + "-" + logical }

// CommandsTable returns the commands table name ("cmdqcommands").
func (n Names) CommandsTable() string { return n.Prefix + "commands" }

// PoisonTable returns the poison table name ("cmdqpoison").
func (n Names) PoisonTable() string { return n.Prefix + "poison" }

// Validate checks the prefix, and each given logical queue name, against
// Azure's naming rules. Errors wrap storage.ErrInvalidName.
func (n Names) Validate(queues ...string) error {
	p := n.Prefix
	if p == "" {
		return fmt.Errorf("%w: empty prefix; use lowercase letters and digits, starting with a letter (such as \"cmdq\")", storage.ErrInvalidName)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' && i > 0) {
			return fmt.Errorf("%w: prefix %q must be lowercase letters and digits, starting with a letter", storage.ErrInvalidName, p)
		}
	}
	var errs []error
	if err := storage.ValidateTableName(n.CommandsTable()); err != nil {
		errs = append(errs, err)
	}
	if err := storage.ValidateTableName(n.PoisonTable()); err != nil {
		errs = append(errs, err)
	}
	for _, q := range queues {
		if err := storage.ValidateQueueName(n.Queue(q)); err != nil {
			errs = append(errs, fmt.Errorf("logical queue %q: %w", q, err))
		}
	}
	errs = append(errs, n.validateShards(queues)...)
	return errors.Join(errs...)
}
