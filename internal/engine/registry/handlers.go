// Package handlers is the typed handler registry: Register[T] binds a
// function to a command type, with per-type options (queue, poison ceiling,
// lease, timeout, retry policy) over the ones the type declares; Declare[T]
// records a type's routing without a handler (a process that only issues
// it). The processor looks definitions up by type name and invokes them
// with a Run, through which handlers record completed steps so a rerun
// resumes where the last attempt stopped.
//
// Most programs register through the client of package cmdq
// (cmdq.Register); the registry is for programs that assemble a processor
// themselves.
package registry

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/cmdqtype"
	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
)

// ErrUnknownType: no handler is registered for the command type (a
// message of it is poisoned with this reason).
var ErrUnknownType = errors.New("no handler registered for command type")

// Options configures one command type's handling. Zero fields take the
// type's declared options (cmdq.CommandWithOptions), then the defaults.
type Options struct {
	// Queue is the logical queue the type is routed to. Defaults to the
	// type's declared queue, else cmdq.DefaultQueue ("commands"). Give
	// slow commands their own queue so they do not share a lease.
	Queue string
	// PoisonCeiling is the most attempts (dequeues) before the command is
	// poisoned without running. Defaults to the declared ceiling, else
	// cmdq.DefaultPoisonCeiling (5).
	PoisonCeiling int
	// Lease is the visibility timeout taken on dequeue and renewed at half
	// while the handler runs, at least 1 s. Defaults to the declared lease,
	// else cmdq.DefaultLease (30 s).
	Lease time.Duration
	// Timeout bounds one attempt: the handler's context ends after it.
	// Defaults to the declared timeout, else
	// cmdq.DefaultTimeoutLeases × Lease.
	Timeout time.Duration
	// Retry sets the delay before a failed attempt is retried. Defaults to
	// exponential from 1 s, doubling, capped at 5 min, ±20 % jitter.
	Retry cmdqtype.RetryPolicy
	// Retention is how long the type's final commands are kept. Zero
	// fields take the declared retention, else the processor's
	// (cmdq.Config.Retention: 7 days completed, 30 days discarded).
	Retention cmdqtype.Retention
	// MaxConcurrency, when above 0, is the most handlers of the type one
	// processor runs at once. Defaults to the declared cap, else 0: none.
	MaxConcurrency int
	// Middleware wraps the type's handler, inside the registry's own
	// (Registry.Use): the first is the outermost. Default none.
	Middleware []Middleware
}

// Middleware wraps one attempt's handler: it sees the decoded command
// (cmd) and the attempt (run), and calls next to go on down the chain (to
// the next middleware, the last to the handler) with the context the rest
// should see. It may refuse (return an error without calling next:
// Permanent poisons, any other error is retried), add to the context, and
// observe or replace the result next returns.
type Middleware func(ctx context.Context, cmd any, run *Run, next func(ctx context.Context) error) error

// chain runs cmd through mws and then handler (mws[0] outermost).
func chain(ctx context.Context, mws []Middleware, cmd any, run *Run, handler func(ctx context.Context) error) error {
	if len(mws) == 0 {
		return handler(ctx)
	}
	return mws[0](ctx, cmd, run, func(ctx context.Context) error {
		return chain(ctx, mws[1:], cmd, run, handler)
	})
}

// CommandOptions returns the fields o shares with cmdq.CommandOptions.
func (o Options) CommandOptions() cmdqtype.CommandOptions {
	return cmdqtype.CommandOptions{Queue: o.Queue, PoisonCeiling: o.PoisonCeiling, Lease: o.Lease, Timeout: o.Timeout, Retention: o.Retention,
		MaxConcurrency: o.MaxConcurrency}
}

// over returns o with its zero command fields taken from declared.
func (o Options) over(declared cmdqtype.CommandOptions) Options {
	c := o.CommandOptions().Over(declared)
	o.Queue, o.PoisonCeiling, o.Lease, o.Timeout, o.Retention = c.Queue, c.PoisonCeiling, c.Lease, c.Timeout, c.Retention
	o.MaxConcurrency = c.MaxConcurrency
	return o
}

// Handler handles one command of type T. run records steps and tells the
// attempt number and the last completed step.
type Handler[T issuer.Command] func(ctx context.Context, cmd T, run *Run) error

// Definition is a registered (or declared) command type.
type Definition struct {
	// Type is the command type name.
	Type string
	// Options are the type's options with defaults applied.
	Options
	decode func(params []byte) (any, error)
	invoke func(ctx context.Context, cmd any, run *Run) error // nil: declared only
}

// Handled reports whether the type has a handler here (Register), not only
// a declaration (Declare).
func (d *Definition) Handled() bool { return d.invoke != nil }

// Registry maps command types to definitions. Register everything before the
// processor starts; lookups are safe for concurrent use.
type Registry struct {
	mu   sync.RWMutex
	defs map[string]*Definition
	mws  []Middleware // Use: around every type's handler
}

// Use appends middleware that wraps every registered type's handler,
// outside each type's own (Options.Middleware): the first added is the
// outermost. Add it before the processor starts.
func (r *Registry) Use(mws ...Middleware) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range mws {
		if m != nil {
			r.mws = append(r.mws, m)
		}
	}
}

// middleware returns the chain around d's handler: the registry's, then
// d's own.
func (r *Registry) middleware(d *Definition) []Middleware {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.mws) == 0 {
		return d.Middleware
	}
	if len(d.Middleware) == 0 {
		return r.mws
	}
	return append(append(make([]Middleware, 0, len(r.mws)+len(d.Middleware)), r.mws...), d.Middleware...)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{defs: map[string]*Definition{}} }

// Permanent marks err as permanent: the command is poisoned at once instead of
// retried. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err (or an error it wraps) was marked with
// Permanent or is a *DecodeError.
func IsPermanent(err error) bool {
	var p *permanentError
	var d *DecodeError
	return errors.As(err, &p) || errors.As(err, &d)
}

// DecodeError: the parameters do not decode into the handler's type. It is
// permanent (the command is poisoned with this reason).
type DecodeError struct {
	// Type is the command type.
	Type string
	// Err is the JSON error.
	Err error
}

// Error names the command type and the JSON problem.
func (e *DecodeError) Error() string {
	return "handlers: params of " + e.Type + " do not decode: " + e.Err.Error()
}

// Unwrap returns the JSON error.
func (e *DecodeError) Unwrap() error { return e.Err }
