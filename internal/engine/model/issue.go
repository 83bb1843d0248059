package model

import (
	"encoding/json"
	"fmt"
	"time"
)

// MaxParamsBytes is documented in package cmdq.
const MaxParamsBytes = 500 * 1024

// MaxCorrelationIDLength is documented in package cmdq.
const MaxCorrelationIDLength = 256

// Result is the engine's copy of cmdq.Result (documented there).
type Result struct {
	ID        string    `json:"id"`
	Existing  bool      `json:"existing,omitempty"`
	Duplicate bool      `json:"duplicate,omitempty"`
	Queue     string    `json:"queue"`
	RunAt     time.Time `json:"runAt,omitzero"`
}

// Raw is the engine's copy of cmdq.Raw (documented there).
type Raw struct {
	ID                      string
	Type                    string
	Params                  json.RawMessage
	CorrelationID           string
	UniqueKey               string
	UniqueWindow            time.Duration
	RunAt                   time.Time
	Delay                   time.Duration
	TraceParent, TraceState string
	OrderKey                string
}

// MaxOrderKeyLength is documented in package cmdq.
const MaxOrderKeyLength = 256

// ValidateOrderKey checks an order key: 1 to MaxOrderKeyLength bytes. The
// error wraps ErrInvalidOrderKey.
func ValidateOrderKey(key string) error {
	if n := len(key); n == 0 || n > MaxOrderKeyLength {
		return fmt.Errorf("%w: the order key is %d bytes; give 1 to %d (an aggregate's ID, say; hash a longer key first)", ErrInvalidOrderKey, n, MaxOrderKeyLength)
	}
	return nil
}

// Limits of unique commands (documented in package cmdq).
const (
	MaxUniqueKeyLength = 256
	MinUniqueWindow    = time.Second
	MaxUniqueWindow    = 30 * 24 * time.Hour
)
