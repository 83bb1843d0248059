package bench

import (
	"errors"
	"fmt"

	"github.com/cmdq-dev/cmdq/internal/azurite/emulator"
)

// startAzurite starts the repository's pinned Azurite (see package
// internal/azurite/emulator; CMDQ_AZURITE_BIN overrides the executable) in
// memory on free loopback ports and waits until it listens. When Azurite is
// missing the error says how to install it.
func startAzurite() (*emulator.Instance, error) {
	a, err := emulator.Start()
	if errors.Is(err, emulator.ErrNotInstalled) {
		return nil, fmt.Errorf("bench: Azurite not available: %w; install it with `npm ci --prefix tools/azurite` from the repository root, or set AZURE_STORAGE_CONNECTION_STRING", err)
	}
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return a, nil
}
