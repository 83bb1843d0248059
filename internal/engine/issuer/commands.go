// Package issuer is the command side of cmdq's engine: the Issuer that
// validates a command, stores it and enqueues it (through the one enqueue
// path, package enqueue), and retries failed enqueues in the background.
// Programs issue through package cmdq's Client.
package issuer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// Command is a command's parameters (cmdq.Command). CommandType names the
// command type; it must be a constant for the type (it is called on the
// zero value). The value itself is JSON-encoded as the parameters.
type Command interface {
	CommandType() string
}

// CommandWithOptions is a Command whose type declares its routing and
// defaults (cmdq.CommandWithOptions).
type CommandWithOptions interface {
	Command
	CommandOptions() model.CommandOptions
}

// DeclaredFunc reads the options a command's type declares; ok is false
// when it declares none. Package cmdq gives one that reads its own
// CommandWithOptions (whose method returns cmdq.CommandOptions, a type
// the engine cannot name): IssuerOptions.Declared, Registry.SetDeclared.
type DeclaredFunc func(cmd Command) (o model.CommandOptions, ok bool)

// Declared returns the options cmd's type declares: what also (when not
// nil) reads, else CommandWithOptions's, else the zero
// model.CommandOptions.
func Declared(cmd Command, also DeclaredFunc) model.CommandOptions {
	if also != nil {
		if o, ok := also(cmd); ok {
			return o
		}
	}
	if w, ok := cmd.(CommandWithOptions); ok {
		return w.CommandOptions()
	}
	return model.CommandOptions{}
}

// NewDayID returns a new command ID that carries its issue day
// (record.NewDayID).
func NewDayID(now time.Time) string { return layout.NewDayID(now) }

// NewOrderedID returns a new time-ordered command ID (UUID version 7: IDs
// made later sort after earlier ones). It falls back to a random UUIDv4 if
// the system's random source fails.
func NewOrderedID() string {
	u, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return u.String()
}

// Params returns cmd's parameters as an issue stores them: the compact
// JSON encoding of the command (inside a With wrapper). Errors wrap
// model.ErrInvalidParams.
func Params(cmd Command) (json.RawMessage, error) {
	cmd, _ = unwrap(cmd)
	if cmd == nil {
		return nil, fmt.Errorf("%w: nil command", model.ErrInvalidParams)
	}
	raw, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("%w: encode %T: %w", model.ErrInvalidParams, cmd, err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("%w: encode %T: %w", model.ErrInvalidParams, cmd, err)
	}
	return buf.Bytes(), nil
}
