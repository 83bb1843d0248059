package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"time"

	"github.com/cmdq-dev/cmdq/commands"
	"github.com/cmdq-dev/cmdq/storage"
)

// Register binds fn to T's command type (T's CommandType() on the zero
// value; for a pointer T, on a new zero element). Parameters are decoded into
// T with unknown fields rejected; a decode failure is a *DecodeError
// (permanent). It fails for a nil registry or handler, an invalid type name,
// a type registered twice (ErrDuplicateType), or invalid options
// (ErrInvalidOptions, every problem listed).
func Register[T commands.Command](reg *Registry, fn Handler[T], opts Options) error {
	if reg == nil || fn == nil {
		return errors.New("handlers: Register needs a registry (NewRegistry) and a handler function")
	}
	typeName := zeroCommand[T]().CommandType()
	if err := commands.ValidateType(typeName); err != nil {
		return fmt.Errorf("handlers: register %T: %w", *new(T), err)
	}
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("handlers: register %s: %w", typeName, err)
	}
	def := &Definition{
		Type:    typeName,
		Options: opts,
		decode: func(params []byte) (any, error) {
			var v T
			if isPtr[T]() {
				v = zeroCommand[T]()
			}
			if len(bytes.TrimSpace(params)) == 0 {
				params = []byte("{}")
			}
			dec := json.NewDecoder(bytes.NewReader(params))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&v); err != nil {
				return nil, &DecodeError{Type: typeName, Err: err}
			}
			if dec.More() {
				return nil, &DecodeError{Type: typeName, Err: errors.New("trailing data after the JSON value")}
			}
			return v, nil
		},
		invoke: func(ctx context.Context, cmd any, run *Run) error {
			v, ok := cmd.(T)
			if !ok {
				return Permanent(fmt.Errorf("handlers: %s handler got %T", typeName, cmd))
			}
			return fn(ctx, v, run)
		},
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if _, dup := reg.defs[typeName]; dup {
		return fmt.Errorf("%w: %s", ErrDuplicateType, typeName)
	}
	reg.defs[typeName] = def
	return nil
}

func isPtr[T any]() bool { return reflect.TypeFor[T]().Kind() == reflect.Pointer }

// zeroCommand returns T's zero value, or for a pointer T a pointer to a new
// zero element (so CommandType can be called safely).
func zeroCommand[T commands.Command]() T {
	var v T
	if isPtr[T]() {
		return reflect.New(reflect.TypeFor[T]().Elem()).Interface().(T)
	}
	return v
}

// Lookup returns the definition of a command type.
func (r *Registry) Lookup(cmdType string) (*Definition, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.defs[cmdType]
	return d, ok
}

// Types returns the registered type names, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.defs))
	for t := range r.defs {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Queues returns the logical queues of the registered types, sorted, without
// duplicates.
func (r *Registry) Queues() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	set := map[string]bool{}
	for _, d := range r.defs {
		set[d.Queue] = true
	}
	out := make([]string, 0, len(set))
	for q := range set {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

// QueueFor returns the logical queue of a command type (DefaultQueue for an
// unknown type). Pass it as commands.Options.QueueFor so the Issuer routes
// like the registry.
func (r *Registry) QueueFor(cmdType string) string {
	if d, ok := r.Lookup(cmdType); ok {
		return d.Queue
	}
	return DefaultQueue
}

// Decode decodes params into the handler's command type (a T as registered).
// Failure: *DecodeError.
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

// WithDefaults returns o with zero fields set to their defaults (Queue
// "commands", PoisonCeiling 5, Lease 30 s, Timeout 10 × Lease, Retry
// defaults).
func (o Options) WithDefaults() Options {
	if o.Queue == "" {
		o.Queue = DefaultQueue
	}
	if o.PoisonCeiling == 0 {
		o.PoisonCeiling = DefaultPoisonCeiling
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeoutLeases * o.Lease
	}
	o.Retry = o.Retry.WithDefaults()
	return o
}

// Validate reports every problem with o (after defaults) at once; the error
// wraps ErrInvalidOptions.
func (o Options) Validate() error {
	o = o.WithDefaults()
	var errs []error
	if err := storage.ValidateQueueName("cmdq-" + o.Queue); err != nil {
		errs = append(errs, fmt.Errorf("option Queue %q: use lowercase letters, digits and single hyphens (the storage queue is \"<prefix>-%s\")", o.Queue, o.Queue))
	}
	if o.PoisonCeiling < 1 {
		errs = append(errs, fmt.Errorf("option PoisonCeiling %d: must be at least 1 (0 = default %d)", o.PoisonCeiling, DefaultPoisonCeiling))
	}
	if o.Lease < time.Second || o.Lease > storage.MaxVisibility {
		errs = append(errs, fmt.Errorf("option Lease %s: must be between 1s and %s (0 = default %s)", o.Lease, storage.MaxVisibility, DefaultLease))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("option Timeout %s: must not be negative (0 = default %d × Lease)", o.Timeout, DefaultTimeoutLeases))
	}
	if err := o.Retry.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
}
