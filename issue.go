package cmdq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cmdq-dev/cmdq/cmdqtype"
	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/storage"
)

// issuer returns the current Issuer.
func (c *Client) issuer() *issuer.Issuer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.iss
}

// Issue stores cmd (its JSON encoding is the parameters) and puts it on its
// queue: the queue its type was registered or declared with on c, else the
// one the type declares (CommandWithOptions), else "commands". An
// in-process processor is woken at once. With WithID the call is
// idempotent: the same ID and parameters again return the existing command
// (Result.Existing) instead of a second one; with UniqueKey the same type
// and key within the window return it whatever the parameters
// (Result.Duplicate). Cost: one table batch and one
// enqueue (one combined write on the embedded store).
//
// Errors (test with errors.Is): cmdq.ErrInvalidType, ErrInvalidID,
// ErrInvalidParams, ErrParamsTooLarge, ErrInvalidUnique, ErrIDConflict (the
// ID is taken by another command); cmdq.ErrEnqueueFailed means the command is stored
// and will be enqueued by the reconciler (it is accepted, Result.ID is
// valid); cmdq.ErrNotAccepted means it is stored but not queued: issue
// it again with the same ID. A storage error leaves it unknown whether the
// command was stored: issue it again with the same ID.
//
// The issue is a span "cmdq issue TYPE" of Config.TracerProvider in ctx's
// trace; the trace context (that span's, else ctx's) is stored with the
// command, and every attempt's span joins it.
func (c *Client) Issue(ctx context.Context, cmd Command, opts ...IssueOption) (Result, error) {
	if cmd == nil {
		return c.issuer().Issue(ctx, cmd, engineOptions(opts)...)
	}
	typ := cmd.CommandType()
	span, parent, state := c.startIssue(ctx, typ, "", "")
	corr := corrOf(span)
	eopts := append(engineOptions(opts), withTrace(parent, state, corr))
	res, err := c.issuer().Issue(ctx, cmd, eopts...)
	endIssue(span, typ, deref(corr), res, err)
	return res, err
}

// IssueRaw issues a command given as type name and JSON parameters (the
// HTTP API's form), routed by the types c knows (Register, Declare), else
// to "commands". Errors as Issue. Its span's parent is the trace context
// raw names (Raw.TraceParent), else ctx's.
func (c *Client) IssueRaw(ctx context.Context, raw Raw) (Result, error) {
	span, parent, state := c.startIssue(ctx, raw.Type, raw.TraceParent, raw.TraceState)
	raw.TraceParent, raw.TraceState = parent, state
	res, err := c.issuer().IssueRaw(ctx, raw)
	endIssue(span, raw.Type, raw.CorrelationID, res, err)
	return res, err
}

// IssueMany issues cmds at once (wrap one with With to give it an ID or a
// correlation ID): on the embedded store the whole batch is stored and
// queued in one commit (per queue), on Azure 32 issues run at a time. Each
// command is issued as Issue would; a repeated ID is issued after the
// earlier one, so it is found Existing (or conflicting). results[i] is
// cmds[i]'s Result; err joins every failure, each naming its command's
// index and type and wrapping its error (errors.Is works on err).
//
// Each command's issue is a span "cmdq issue TYPE" in ctx's trace, as
// Issue's.
func (c *Client) IssueMany(ctx context.Context, cmds ...Command) ([]Result, error) {
	ecmds := make([]issuer.Command, len(cmds))
	spans := make([]trace.Span, len(cmds))
	corrs := make([]*string, len(cmds))
	for i, cmd := range cmds {
		ecmds[i] = cmd
		if cmd == nil {
			continue
		}
		var parent, state string
		spans[i], parent, state = c.startIssue(ctx, cmd.CommandType(), "", "")
		corrs[i] = corrOf(spans[i])
		ecmds[i] = issuer.With(cmd, withTrace(parent, state, corrs[i]))
	}
	res, err := c.issuer().IssueMany(ctx, ecmds...)
	for i, span := range spans {
		if span == nil {
			continue
		}
		var ierr error
		if err != nil && (i >= len(res) || res[i].ID == "") {
			ierr = err
		}
		var r Result
		if i < len(res) {
			r = res[i]
		}
		endIssue(span, cmds[i].CommandType(), deref(corrs[i]), r, ierr)
	}
	return res, err
}

// Get returns a command's status: one point read, or none for a
// completed, discarded or cancelled command read before (see Config.FinalCache).
// Unknown ID → an error wrapping ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (Status, error) {
	if st, ok := c.cachedFinal(id); ok {
		return st, nil
	}
	return c.readStatus(ctx, id)
}

// GetParams returns a command's status and its JSON parameters: the same
// one point read as Get. Unknown ID → an error wrapping ErrNotFound.
func (c *Client) GetParams(ctx context.Context, id string) (Status, json.RawMessage, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return Status{}, nil, err
	}
	rec, err := r.Load(ctx, id)
	if err != nil {
		return Status{}, nil, err
	}
	return rec.Status.AsOf(time.Now()), json.RawMessage(rec.Params), nil
}

// Events returns a command's lifecycle events, oldest first (one query per
// 1000 events). Unknown ID → an error wrapping ErrNotFound.
func (c *Client) Events(ctx context.Context, id string) ([]Event, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return nil, err
	}
	return r.Events(ctx, id)
}

// Wait returns a command's status once it is final (completed, poisoned,
// discarded or cancelled), or ctx's error with the last status known. It
// watches the command (see Watch): an outcome recorded by this Client's
// processor, or a requeue, discard or cancel through it, ends the wait at
// once; a change made by
// another process is found by a storage read shared with every other
// watcher of the command, at most once per Config.WaitPollInterval (1 s),
// backing off to WaitMaxPollInterval (5 s) while nothing changes. A
// poisoned command is final until an operator requeues it.
func (c *Client) Wait(ctx context.Context, id string) (Status, error) {
	w := c.Watch(id)
	defer w.Close()
	for {
		st, _, changed, err := w.Current(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return st, fmt.Errorf("cmdq: wait for %s: %w", id, ctx.Err())
		case err != nil:
			return st, err
		case st.State.Final():
			return st, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return st, fmt.Errorf("cmdq: wait for %s (still %s): %w", id, st.State, ctx.Err())
		}
	}
}

// Statuses returns the status of each command in ids, read at once (16
// point reads at a time; none for a completed, discarded or cancelled command read
// before): the "are these done?" query. A command that does
// not exist is missing from the map; any other failure fails the call.
func (c *Client) Statuses(ctx context.Context, ids ...string) (map[string]Status, error) {
	if _, err := c.reader(ctx); err != nil {
		return nil, err
	}
	out := make(map[string]Status, len(ids))
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, 16)
	for _, id := range ids {
		if st, ok := c.cachedFinal(id); ok {
			out[id] = st
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			st, err := c.readStatus(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				out[id] = st
			case !errors.Is(err, cmdqtype.ErrNotFound):
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// ListCommands lists commands in ID order (or newest first: q.Newest),
// filtered by type, state and last change (q.Since), a page at a time,
// with a summary when q.Summary asks (counts per state, outcomes per
// minute). It reads the whole commands table (one request per 1000 rows;
// with a summary every row, events included; q.ScanLimit bounds it): for
// tests, tools, the operator page and small stores, not for a hot path.
// Nothing it does adds a call to issuing or processing.
func (c *Client) ListCommands(ctx context.Context, q CommandQuery) (CommandPage, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return CommandPage{}, err
	}
	return r.ListCommands(ctx, q)
}

// ListPoison lists poison entries, newest first, a page at a time (it
// reads the whole poison table: poison tables are small).
func (c *Client) ListPoison(ctx context.Context, q PoisonQuery) (PoisonPage, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return PoisonPage{}, err
	}
	return r.ListPoison(ctx, q)
}

// GetPoison returns one poison entry: one point read. Unknown → an error
// wrapping ErrNotFound.
func (c *Client) GetPoison(ctx context.Context, id string) (PoisonEntry, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return PoisonEntry{}, err
	}
	return r.GetPoison(ctx, id)
}

// Requeue puts a poisoned command back on its queue as pending (a requeued
// event with By = by, attempts from 1 again) and removes its poison entry;
// an in-process processor is woken at once. Not poisoned →
// ErrNotPoisoned; unknown → ErrNotFound; an entry with no stored command
// (a malformed message) → ErrNoCommand (Discard it). If the enqueue fails
// the command is pending and marked for the reconciler, and the error says
// so.
func (c *Client) Requeue(ctx context.Context, id, by string) error {
	r, err := c.reader(ctx)
	if err != nil {
		return err
	}
	return r.Requeue(ctx, id, by)
}

// Discard gives up on a poisoned command: a discarded event (By = by), its
// poison entry removed; the command is final. Not poisoned →
// ErrNotPoisoned; unknown → ErrNotFound. An entry with no stored command is
// just removed.
func (c *Client) Discard(ctx context.Context, id, by string) error {
	r, err := c.reader(ctx)
	if err != nil {
		return err
	}
	return r.Discard(ctx, id, by)
}

// QueueDepth returns the approximate number of messages on a logical queue
// ("commands", or a type's queue), visible or not: one storage call.
func (c *Client) QueueDepth(ctx context.Context, queue string) (int, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return 0, err
	}
	return r.Depth(ctx, queue)
}

// StorageQueue returns the storage queue of a logical queue ("<prefix>-<queue>",
// opened and created if needed), for tools and metrics
// (metrics.Metrics.WatchQueue). Messages taken from it directly are not
// processed by cmdq.
func (c *Client) StorageQueue(ctx context.Context, queue string) (storage.Queue, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return nil, err
	}
	return r.Queue(ctx, queue)
}
