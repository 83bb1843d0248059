package handlers

import (
	"context"

	"github.com/cmdq-dev/cmdq/commands"
)

// Register binds fn to T's command type (T's CommandType() on the zero
// value). Parameters are decoded into T with unknown fields rejected; a
// decode failure is a *DecodeError (permanent). It fails for an invalid type
// name, a type registered twice, or invalid options.
func Register[T commands.Command](reg *Registry, fn Handler[T], opts Options) error {
	panic("TODO")
}

// Lookup returns the definition of a command type.
func (r *Registry) Lookup(cmdType string) (*Definition, bool) {
	d, ok := r.defs[cmdType]
	return d, ok
}

// Types returns the registered type names, sorted.
func (r *Registry) Types() []string { panic("TODO") }

// Queues returns the logical queues of the registered types, sorted, without
// duplicates.
func (r *Registry) Queues() []string { panic("TODO") }

// Decode decodes params into the handler's command type (a T as registered).
func (d *Definition) Decode(params []byte) (any, error) { return d.decode(params) }

// Invoke decodes params and runs the handler. A decode failure returns a
// *DecodeError without running it. A panic in the handler is not recovered
// here (the processor recovers it and records the stack).
func (d *Definition) Invoke(ctx context.Context, params []byte, run *Run) error {
	cmd, err := d.decode(params)
	if err != nil {
		return err
	}
	return d.invoke(ctx, cmd, run)
}

// WithDefaults returns o with zero fields set to their defaults.
func (o Options) WithDefaults() Options { panic("TODO") }

// Validate reports every problem with o (after defaults) at once; the error
// wraps ErrInvalidOptions.
func (o Options) Validate() error { panic("TODO") }
