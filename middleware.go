package cmdq

import (
	"context"
	"fmt"

	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

// Middleware wraps the handling of one attempt: it sees the command's
// decoded value (cmd, the T a handler gets) and the attempt (a: type,
// ID, attempt number, queue, correlation ID), and calls next to go on down
// the chain — to the next middleware, the last one to the handler — with
// the context the rest should see. A middleware may
//
//   - refuse: return an error without calling next (Permanent(err)
//     poisons the command at once, any other error fails the attempt,
//     which is retried after the type's retry delay);
//   - add to the context: call next with a derived context (a tenant, a
//     logger, a deadline), which the handler receives;
//   - observe or replace the result: next returns the handler's error
//     (nil on success), which the middleware may log, count, wrap or
//     return as it is.
//
// The chain of a type is: the tracing span (Config.TracerProvider), then
// Config.Middleware and Client.Use in order, then the type's own
// HandlerOptions.Middleware in order, then the handler: the first listed
// is the outermost. A panic in a middleware is a failed attempt, as one
// in the handler. Parameters that do not decode poison the command before
// any middleware runs.
type Middleware func(ctx context.Context, cmd Command, a *Attempt, next func(ctx context.Context) error) error

// Use adds middleware around the handler of every registered type, after
// (inside) Config.Middleware and the ones added before. Add it before
// Start, Run or RunFor: it fails with ErrStarted after.
func (c *Client) Use(mws ...Middleware) error {
	if err := c.editable(); err != nil {
		return err
	}
	for i, m := range mws {
		if m == nil {
			return fmt.Errorf("%w: a nil middleware at Use's argument %d; leave it out", ErrInvalidOptions, i)
		}
	}
	c.reg.Use(middleware(mws)...)
	return nil
}

// middleware converts middleware for the registry.
func middleware(mws []Middleware) []registry.Middleware {
	if len(mws) == 0 {
		return nil
	}
	out := make([]registry.Middleware, 0, len(mws))
	for _, m := range mws {
		if m == nil {
			continue
		}
		out = append(out, func(ctx context.Context, cmd any, r *registry.Attempt, next func(context.Context) error) error {
			c, _ := cmd.(Command)
			return m(ctx, c, &Attempt{r: r}, next)
		})
	}
	return out
}
