package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// Register binds fn to T's command type (T's CommandType() on the zero
// value; for a pointer T, on a new zero element). opts (at most one) are
// the type's options; their zero fields take T's declared options
// (cmdq.CommandWithOptions), then the defaults. Parameters are decoded
// into T with unknown fields rejected; a decode failure is a *DecodeError
// (permanent). It fails for a nil registry or handler, an invalid type name,
// a type registered twice (model.ErrDuplicateType; a Declare of the type before
// is replaced), or invalid options (model.ErrInvalidOptions, every problem
// listed).
func Register[T issuer.Command](reg *Registry, fn Handler[T], opts ...Options) error {
	if reg == nil || fn == nil {
		return errors.New("handlers: Register needs a registry (NewRegistry) and a handler function")
	}
	if len(opts) > 1 {
		return fmt.Errorf("%w: Register takes at most one Options, got %d", model.ErrInvalidOptions, len(opts))
	}
	var o Options
	if len(opts) == 1 {
		o = opts[0]
	}
	def, err := define[T](reg, o)
	if err != nil {
		return err
	}
	def.invoke = func(ctx context.Context, cmd any, run *Attempt) error {
		v, ok := cmd.(T)
		if !ok {
			return Permanent(fmt.Errorf("handlers: %s handler got %T", def.Type, cmd))
		}
		return fn(ctx, v, run)
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if prev, dup := reg.defs[def.Type]; dup && prev.Handled() {
		return fmt.Errorf("%w: %s", model.ErrDuplicateType, def.Type)
	}
	reg.defs[def.Type] = def
	return nil
}

// Declare records T's command type without a handler: its routing (queue)
// and options, for a process that issues T (through the type name too, as
// the HTTP API does) but does not run it. opts (at most one) override T's
// declared options, as in Register. Params issued by type name are checked
// to decode into T. A type already registered or declared gives
// model.ErrDuplicateType.
func Declare[T issuer.Command](reg *Registry, opts ...model.CommandOptions) error {
	if reg == nil {
		return errors.New("handlers: Declare needs a registry (NewRegistry)")
	}
	if len(opts) > 1 {
		return fmt.Errorf("%w: Declare takes at most one CommandOptions, got %d", model.ErrInvalidOptions, len(opts))
	}
	var o Options
	if len(opts) == 1 {
		c := opts[0]
		o = Options{Queue: c.Queue, PoisonCeiling: c.PoisonCeiling, Lease: c.Lease, Timeout: c.Timeout, MaxConcurrency: c.MaxConcurrency,
			Retention: c.Retention, GlobalConcurrency: c.GlobalConcurrency, MaxDeferrals: c.MaxDeferrals, Rate: c.Rate,
			GlobalConcurrencyPerKey: c.GlobalConcurrencyPerKey, RatePerKey: c.RatePerKey}
	}
	def, err := define[T](reg, o)
	if err != nil {
		return err
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if _, dup := reg.defs[def.Type]; dup {
		return fmt.Errorf("%w: %s", model.ErrDuplicateType, def.Type)
	}
	reg.defs[def.Type] = def
	return nil
}

// define returns T's definition (without a handler) with options o over T's
// declared ones, defaults applied and validated.
func define[T issuer.Command](reg *Registry, o Options) (*Definition, error) {
	zero := zeroCommand[T]()
	typeName := zero.CommandType()
	if err := model.ValidateType(typeName); err != nil {
		return nil, fmt.Errorf("handlers: register %T: %w", *new(T), err)
	}
	reg.mu.RLock()
	declared := reg.declared
	reg.mu.RUnlock()
	o = o.over(issuer.Declared(zero, declared)).WithDefaults()
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("handlers: register %s: %w", typeName, err)
	}
	_, keyed := any(zero).(LimitKeyer)
	if !keyed && (o.GlobalConcurrencyPerKey > 0 || !o.RatePerKey.IsZero()) {
		return nil, fmt.Errorf("handlers: register %s: %w: GlobalConcurrencyPerKey and RatePerKey need the command's limit key: give %T a method LimitKey() string (such as the tenant's ID), or use GlobalConcurrency and Rate, which limit the whole type", typeName, model.ErrInvalidOptions, zero)
	}
	return &Definition{
		Type:    typeName,
		keyed:   keyed,
		Options: o,
		decode: func(params []byte) (any, error) {
			var v T
			if isPtr[T]() {
				v = zeroCommand[T]()
			}
			if len(bytes.TrimSpace(params)) == 0 {
				params = []byte("{}")
			}
			if t := reflect.TypeFor[T](); exactKeysFast(t, params) {
				// every key spelt as a field: nothing to check
			} else if err := checkExactKeys(t, params); err != nil {
				return nil, &DecodeError{Type: typeName, Err: err}
			}
			dec := json.NewDecoder(bytes.NewReader(params))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&v); err != nil {
				return nil, &DecodeError{Type: typeName, Err: describeDecodeError(reflect.TypeFor[T](), err)}
			}
			if dec.More() {
				return nil, &DecodeError{Type: typeName, Err: errors.New("trailing data after the JSON value")}
			}
			return v, nil
		},
	}, nil
}

func isPtr[T any]() bool { return reflect.TypeFor[T]().Kind() == reflect.Pointer }

// zeroCommand returns T's zero value, or for a pointer T a pointer to a new
// zero element (so CommandType can be called safely).
func zeroCommand[T issuer.Command]() T {
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

// Types returns the known type names (registered and declared), sorted.
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

// Handlers returns the definitions that have a handler (Register), sorted
// by type: what a processor runs.
func (r *Registry) Handlers() []*Definition {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*Definition
	for _, d := range r.defs {
		if d.Handled() {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

// Queues returns the logical queues of the types with a handler, sorted,
// without duplicates: the queues a processor polls.
func (r *Registry) Queues() []string {
	set := map[string]bool{}
	for _, d := range r.Handlers() {
		set[d.Queue] = true
	}
	out := make([]string, 0, len(set))
	for q := range set {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

// QueueOf returns the logical queue of a known type (registered or
// declared) and true, or "" and false. It makes the registry a
// issuer.Router.
func (r *Registry) QueueOf(cmdType string) (string, bool) {
	if d, ok := r.Lookup(cmdType); ok {
		return d.Queue, true
	}
	return "", false
}

// CheckParams returns an error wrapping model.ErrInvalidParams when
// params do not decode into the Go type of cmdType (registered or
// declared), naming the problem; nil for an unknown type or params that
// decode. It makes the registry an issuer.Router.
func (r *Registry) CheckParams(cmdType string, params []byte) error {
	d, ok := r.Lookup(cmdType)
	if !ok {
		return nil
	}
	if _, err := d.decode(params); err != nil {
		detail := err.Error()
		var de *DecodeError
		if errors.As(err, &de) && de.Err != nil {
			detail = strings.TrimPrefix(de.Err.Error(), "json: ")
		}
		return fmt.Errorf("%w: params do not match command type %s: %s", model.ErrInvalidParams, cmdType, detail)
	}
	return nil
}

// Decode decodes params into the handler's command type (a T as registered).
// Failure: *DecodeError.
func (d *Definition) Decode(params []byte) (any, error) { return d.decode(params) }

// Invoke decodes params and runs the handler inside the type's middleware
// (see Invoke of Registry); without the registry's. A decode failure
// returns a *DecodeError without running it; a declared type without a
// handler gives ErrUnknownType. A panic in the handler is not recovered
// here (the processor recovers it and records the stack).
func (d *Definition) Invoke(ctx context.Context, params []byte, run *Attempt) error {
	return d.invokeWith(ctx, d.Middleware, params, run)
}

// Invoke decodes params and runs d's handler inside the middleware chain:
// the registry's (Use), then d's own (Options.Middleware), the first of
// each the outermost. A decode failure returns a *DecodeError before any
// middleware runs; a declared type without a handler gives ErrUnknownType.
// A panic in a middleware or the handler is not recovered here (the
// processor recovers it and records the stack).
func (r *Registry) Invoke(ctx context.Context, d *Definition, params []byte, run *Attempt) error {
	return d.invokeWith(ctx, r.middleware(d), params, run)
}

func (d *Definition) invokeWith(ctx context.Context, mws []Middleware, params []byte, run *Attempt) error {
	if d.invoke == nil {
		return fmt.Errorf("%w: %s is only declared here", ErrUnknownType, d.Type)
	}
	cmd, err := d.decode(params)
	if err != nil {
		return err
	}
	if len(mws) == 0 {
		return d.invoke(ctx, cmd, run)
	}
	return chain(ctx, mws, cmd, run, func(ctx context.Context) error { return d.invoke(ctx, cmd, run) })
}

// WithDefaults returns o with zero fields set to their defaults (Queue
// cmdq.DefaultQueue, PoisonCeiling cmdq.DefaultPoisonCeiling, Lease
// cmdq.DefaultLease, Timeout cmdq.DefaultTimeoutLeases × Lease,
// Retry's defaults).
func (o Options) WithDefaults() Options {
	o = o.over(o.CommandOptions().WithDefaults())
	o.Retry = o.Retry.WithDefaults()
	return o
}

// Validate reports every problem with o (after defaults) at once; the error
// wraps model.ErrInvalidOptions. The queue is checked as a logical name (its
// storage name "<prefix>-<queue>" is checked by the processor and the
// client, which know the prefix).
func (o Options) Validate() error {
	o = o.WithDefaults()
	var errs []error
	if err := o.CommandOptions().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Retry.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", model.ErrInvalidOptions, errors.Join(errs...))
}
