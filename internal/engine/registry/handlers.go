// Package registry is the typed handler registry: Register[T] binds a
// function to a command type, with per-type options (queue, poison
// ceiling, lease, timeout, retry policy) over the ones the type declares;
// Declare[T] records a type's routing without a handler (a process that
// only issues it). The processor looks definitions up by type name and
// invokes them with an Attempt, through which handlers record completed
// steps so a rerun resumes where the last attempt stopped. Package cmdq
// registers through it (cmdq.Register, cmdq.Declare).
package registry

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// ErrUnknownType: no handler is registered for the command type (a
// message of it is poisoned with this reason).
var ErrUnknownType = errors.New("no handler registered for command type")

// Options is cmdq.HandlerOptions (documented there) as the engine takes
// it: zero fields take the type's declared options, then the defaults.
type Options struct {
	Queue             string
	PoisonCeiling     int
	Lease             time.Duration
	Timeout           time.Duration
	Retry             model.RetryPolicy
	Retention         model.Retention
	MaxConcurrency    int
	GlobalConcurrency int
	Rate              model.Rate
	Middleware        []Middleware
	MaxDeferrals      int
	// GlobalConcurrencyPerKey and RatePerKey limit the commands of one
	// limit key (the command's LimitKey method, LimitKeyer).
	GlobalConcurrencyPerKey int
	RatePerKey              model.Rate
}

// LimitKeyer is a command whose values name a limit key (cmdq.LimitKeyer).
type LimitKeyer interface {
	LimitKey() string
}

// Middleware wraps one attempt's handler: it sees the decoded command
// (cmd) and the attempt (run), and calls next to go on down the chain (to
// the next middleware, the last to the handler) with the context the rest
// should see. It may refuse (return an error without calling next:
// Permanent poisons, any other error is retried), add to the context, and
// observe or replace the result next returns.
type Middleware func(ctx context.Context, cmd any, run *Attempt, next func(ctx context.Context) error) error

// chain runs cmd through mws and then handler (mws[0] outermost).
func chain(ctx context.Context, mws []Middleware, cmd any, run *Attempt, handler func(ctx context.Context) error) error {
	if len(mws) == 0 {
		return handler(ctx)
	}
	return mws[0](ctx, cmd, run, func(ctx context.Context) error {
		return chain(ctx, mws[1:], cmd, run, handler)
	})
}

// CommandOptions returns the fields o shares with cmdq.CommandOptions.
func (o Options) CommandOptions() model.CommandOptions {
	return model.CommandOptions{Queue: o.Queue, PoisonCeiling: o.PoisonCeiling, Lease: o.Lease, Timeout: o.Timeout, Retention: o.Retention,
		MaxConcurrency: o.MaxConcurrency, GlobalConcurrency: o.GlobalConcurrency, MaxDeferrals: o.MaxDeferrals, Rate: o.Rate,
		GlobalConcurrencyPerKey: o.GlobalConcurrencyPerKey, RatePerKey: o.RatePerKey}
}

// over returns o with its zero command fields taken from declared.
func (o Options) over(declared model.CommandOptions) Options {
	c := o.CommandOptions().Over(declared)
	o.Queue, o.PoisonCeiling, o.Lease, o.Timeout, o.Retention = c.Queue, c.PoisonCeiling, c.Lease, c.Timeout, c.Retention
	o.MaxConcurrency, o.GlobalConcurrency, o.Rate = c.MaxConcurrency, c.GlobalConcurrency, c.Rate
	o.MaxDeferrals = c.MaxDeferrals
	o.GlobalConcurrencyPerKey, o.RatePerKey = c.GlobalConcurrencyPerKey, c.RatePerKey
	return o
}

// Handler handles one command of type T. run records steps and tells the
// attempt number and the last completed step.
type Handler[T issuer.Command] func(ctx context.Context, cmd T, run *Attempt) error

// Definition is a registered (or declared) command type.
type Definition struct {
	// Type is the command type name.
	Type string
	// Options are the type's options with defaults applied.
	Options
	decode func(params []byte) (any, error)
	keyed  bool                                                   // the type is a LimitKeyer
	invoke func(ctx context.Context, cmd any, run *Attempt) error // nil: declared only
}

// Handled reports whether the type has a handler here (Register), not only
// a declaration (Declare).
func (d *Definition) Handled() bool { return d.invoke != nil }

// KeyLimited reports whether the type limits its commands per limit key
// (GlobalConcurrencyPerKey or RatePerKey).
func (d *Definition) KeyLimited() bool {
	return d.keyed && (d.GlobalConcurrencyPerKey > 0 || !d.RatePerKey.IsZero())
}

// LimitKey returns the limit key of the command with these parameters:
// its LimitKey method's answer, "" (no per-key limit applies) for a type
// that is not a LimitKeyer or parameters that do not decode (the attempt
// then fails on them).
func (d *Definition) LimitKey(params []byte) string {
	if !d.keyed || d.decode == nil {
		return ""
	}
	v, err := d.decode(params)
	if err != nil {
		return ""
	}
	if k, ok := v.(LimitKeyer); ok {
		return k.LimitKey()
	}
	return ""
}

// Registry maps command types to definitions. Register everything before the
// processor starts; lookups are safe for concurrent use.
type Registry struct {
	mu   sync.RWMutex
	defs map[string]*Definition
	mws  []Middleware // Use: around every type's handler

	declared issuer.DeclaredFunc // SetDeclared
}

// SetDeclared makes the registry read the options a registered or
// declared type declares through f too (issuer.Declared). Set it before
// registering.
func (r *Registry) SetDeclared(f issuer.DeclaredFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.declared = f
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

// RetryAfter marks err as a deferral: the command is retried after d
// instead of its retry delay, and the attempt does not count toward its
// poison ceiling while the type's deferrals last (Options.MaxDeferrals).
// The error wraps err (errors.Is and errors.As see through it); err may be
// nil.
func RetryAfter(d time.Duration, err error) error {
	return &retryAfterError{d: d, err: err}
}

type retryAfterError struct {
	d   time.Duration
	err error
}

func (e *retryAfterError) Error() string {
	if e.err == nil {
		return "retry after " + e.d.String()
	}
	return "retry after " + e.d.String() + ": " + e.err.Error()
}

func (e *retryAfterError) Unwrap() error { return e.err }

// IsRetryAfter reports whether err (or an error it wraps) was made by
// RetryAfter, and with which delay (the outermost one).
func IsRetryAfter(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.d, true
	}
	return 0, false
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
