package record

import (
	"context"
	"fmt"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// PoisonMessage records a poison entry for a queue message that has no
// command record to update: a malformed message (entry.CommandID = the queue
// message's ID) or one naming a command ID that is not stored. Only the
// poison table is written (1 upsert); PoisonedAt defaults to now. The key
// must be a valid table key.
func (s *Store) PoisonMessage(ctx context.Context, entry model.PoisonEntry) error {
	if err := storage.ValidateKey("PartitionKey", entry.CommandID); err != nil || entry.CommandID == "" {
		return fmt.Errorf("%w: poison entry needs a valid key, got %q", storage.ErrInvalidArgument, entry.CommandID)
	}
	if entry.PoisonedAt.IsZero() {
		entry.PoisonedAt = s.nowUTC()
	}
	if _, err := s.poison.Upsert(ctx, PoisonEntity(entry), storage.Replace); err != nil {
		return fmt.Errorf("cmdq: write poison entry for message %s: %w", entry.CommandID, err)
	}
	return nil
}
