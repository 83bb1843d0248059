package cmdq

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage"
)

// Issuing: a command's options (ID, correlation ID, schedule, unique
// key), its result, and the Client's Issue, IssueRaw and IssueMany.

// IssueOption adjusts one issue (CommandID, CorrelationID, UniqueKey,
// OrderKey, At, After). Given twice, the last one wins.
type IssueOption func(*Raw)

// CommandID sets the command ID (a lowercase canonical UUID, such as one
// from NewID): the idempotency key. Issuing again with the same ID and
// parameters returns the existing command (Result.Existing); other
// parameters under the same ID fail with ErrIDConflict.
func CommandID(id string) IssueOption { return func(r *Raw) { r.ID = id } }

// CorrelationID sets the command's correlation ID (free text, at most
// MaxCorrelationIDLength bytes), shown with its status.
func CorrelationID(id string) IssueOption { return func(r *Raw) { r.CorrelationID = id } }

// UniqueKey makes the command unique per type and key within window: its
// ID derives from the type, key and the window's time bucket (the UTC time
// truncated to a multiple of window: 1h buckets start on the hour, 24h
// ones at midnight UTC), so issuing the same type and key again in the
// same bucket returns the first command (Result.Duplicate and
// Result.Existing true) instead of a second one, whatever the parameters,
// and writes nothing. "Within the window" means in the same bucket: two
// issues a minute apart across an hour's boundary make two commands with
// a 1h window. key is 1 to MaxUniqueKeyLength (256) bytes; window is
// MinUniqueWindow (1 s) to MaxUniqueWindow (30 days); the key holds while
// the first command is kept (its retention). Not together with CommandID.
// Bad input fails with ErrInvalidUnique and stores nothing. Cost: as a
// plain issue; a duplicate costs one failed batch and one point read
// (docs/lifecycle.md, "Unique commands").
func UniqueKey(key string, window time.Duration) IssueOption {
	return func(r *Raw) { r.UniqueKey, r.UniqueWindow = key, window }
}

// OrderKey makes the command one of the commands ordered by key (an
// aggregate's ID, say): the commands issued with the same key run one at a
// time, in issue order, whatever their types, across every process on
// every machine sharing the store and prefix. The head of a key (the
// oldest of its commands not yet final) holds it through its retries; a
// completed, poisoned or cancelled head hands it to the next. key is 1 to
// MaxOrderKeyLength (256) bytes of any kind; the key's commands must share
// a queue (ErrOrderKeyQueue otherwise). Bad input fails with
// ErrInvalidOrderKey and stores nothing. Cost: two storage calls at the
// issue (the key's tail row read and one batch), and at the processor a
// point read of the command, one query per start (is it the head?) and
// one batch when it ends (docs/lifecycle.md, "Order keys").
func OrderKey(key string) IssueOption { return func(r *Raw) { r.OrderKey = key } }

// At schedules the command at t: it is StateScheduled until then and
// never starts before t (by the processor's clock), and starts within
// Config.MaxPollInterval after it at worst (at once on a processor of
// the issuing Client). A t at or before now is due at once; a t more than
// MaxScheduleAhead (2 years) ahead is refused with ErrInvalidSchedule,
// nothing stored. Any horizon works: past the queue's 7-day visibility
// limit the message hops once a week (docs/lifecycle.md, "Scheduled
// commands"). Scheduling costs no storage call: the delay rides on the
// issue's one enqueue. At and After replace each other (the last one
// given wins).
func At(t time.Time) IssueOption { return func(r *Raw) { r.RunAt, r.Delay = t, 0 } }

// After schedules the command d after it is issued (by the issuer's
// clock), as At(now + d). A negative d, or one over MaxScheduleAhead, is
// refused with ErrInvalidSchedule, nothing stored; After(0) is due at
// once.
func After(d time.Duration) IssueOption { return func(r *Raw) { r.Delay, r.RunAt = d, time.Time{} } }

// WithOptions attaches issue options to cmd, for IssueMany:
// c.IssueMany(ctx, a, cmdq.WithOptions(b, cmdq.CommandID(id))).
func WithOptions(cmd Command, opts ...IssueOption) Command {
	return issuer.With(cmd, engineOptions(opts)...)
}

// engineOptions converts issue options for the Issuer.
func engineOptions(opts []IssueOption) []issuer.IssueOption {
	if len(opts) == 0 {
		return nil
	}
	out := make([]issuer.IssueOption, len(opts))
	for i, o := range opts {
		out[i] = func(r *model.Raw) { o((*Raw)(r)) }
	}
	return out
}

// NewID returns a new command ID (for CommandID) that carries today's date
// (UTC): a UUID version 8, random but for the day, so the command is
// stored in its day's table and removed with it at no cost per command
// (docs/lifecycle.md, "Retention"). Issue it within IssueWindowPastDays
// (2) days: an older one is refused. An ID kept longer before it is
// issued may be a random UUIDv4 (stored in the base table, removed one by
// one).
func NewID() string { return issuer.NewDayID(time.Now()) }

// ValidateID checks a command ID: a UUID in lowercase canonical form
// (8-4-4-4-12 hex digits). The error wraps ErrInvalidID and says what to
// send instead.
func ValidateID(id string) error { return model.ValidateID(id) }

// NormalizeID returns id in the lowercase canonical form when it is a
// canonical UUID written in upper or mixed case, and id unchanged
// otherwise (ValidateID then says what is wrong with it). The HTTP API,
// the console and the CLI take command IDs through it: upper case is
// accepted and means the same command.
func NormalizeID(id string) string { return model.NormalizeID(id) }

// MaxParamsBytes is the largest (and default) limit on a command's compact
// JSON parameters: 500 KiB. Parameters are stored as UTF-16 strings in one
// table entity (1 MiB, split into 64 KiB properties), so about 512 Ki UTF-16
// code units is what one entity holds; a UTF-8 byte never takes more than one
// UTF-16 unit, so 500 KiB of JSON always fits.
const MaxParamsBytes = model.MaxParamsBytes

// MaxOrderKeyLength is the longest order key (OrderKey), in bytes (256).
const MaxOrderKeyLength = model.MaxOrderKeyLength

// MaxCorrelationIDLength is the longest correlation ID, in bytes (256).
const MaxCorrelationIDLength = model.MaxCorrelationIDLength

// Result is the outcome of issuing a command.
type Result struct {
	// ID is the command ID.
	ID string `json:"id"`
	// Existing is true when a command with this ID and the same type,
	// parameters and correlation ID already existed, or a unique key's
	// command (Duplicate); nothing was written (a message is enqueued
	// again only if the command is still pending and never started, and,
	// for a Duplicate, older than its recovery delay).
	Existing bool `json:"existing,omitempty"`
	// Duplicate is true when the issue had a unique key (Raw.UniqueKey)
	// and a command of the same type and key already existed in the same
	// window: that command is returned (Existing is true too), whatever
	// its parameters, and nothing was written.
	Duplicate bool `json:"duplicate,omitempty"`
	// Queue is the logical queue the command is on.
	Queue string `json:"queue"`
	// RunAt is the run-at time the command was issued with (UTC,
	// millisecond precision; for a delay, the issuer's clock plus it),
	// zero when none. For an existing command it is zero: its status has
	// its own.
	RunAt time.Time `json:"runAt,omitzero"`
}

// Raw is a command given as type name and JSON parameters (the HTTP API's
// form, and what issue options set).
type Raw struct {
	// ID is the command ID ("" = a new one).
	ID string
	// Type is the command type name.
	Type string
	// Params is the JSON parameters (nil or empty = {}). Whitespace is
	// removed (json.Compact) before storing and comparing.
	Params json.RawMessage
	// CorrelationID is an optional caller-chosen ID (at most
	// MaxCorrelationIDLength bytes).
	CorrelationID string
	// UniqueKey, when set, makes the command unique per type and key
	// within UniqueWindow: its ID derives from the type, the key and the
	// window's time bucket (docs/lifecycle.md, "Unique commands"), so
	// issuing the same type and key again in the same bucket returns the
	// existing command (Result.Duplicate) whatever the parameters. 1 to
	// MaxUniqueKeyLength bytes; not together with ID. Default "": not
	// unique.
	UniqueKey string
	// UniqueWindow is the length of the unique key's time buckets,
	// MinUniqueWindow (1 s) to MaxUniqueWindow (30 days); required with
	// UniqueKey. A bucket is the UTC time truncated to a multiple of the
	// window (time.Time.Truncate): 1h buckets start on the hour, 24h ones
	// at midnight UTC.
	UniqueWindow time.Duration
	// RunAt, when set, schedules the command: it does not start before
	// this time (a time at or before now: due at once). At most
	// MaxScheduleAhead ahead; not together with Delay. Default zero: due
	// at once.
	RunAt time.Time
	// Delay, when above 0, schedules the command this long after it is
	// issued (the run-at time is the issuer's clock plus Delay). Not
	// negative, at most MaxScheduleAhead; not together with RunAt.
	// Default 0: due at once.
	Delay time.Duration
	// TraceParent and TraceState are the W3C trace context
	// (https://www.w3.org/TR/trace-context/) the command is issued in:
	// stored with it, so that every attempt's span joins that trace.
	// Client fills them from the issuing context's span (through its
	// own issue span, when a TracerProvider records); set them to issue on
	// behalf of another trace (a value that does not parse is ignored).
	// Not compared on a re-issue of the same ID. Default "": the context's.
	TraceParent, TraceState string
	// OrderKey, when set, orders the command among every command issued
	// with the same key, whatever its type: they run one at a time, in
	// issue order, across every process (OrderKey; docs/lifecycle.md,
	// "Order keys"). 1 to MaxOrderKeyLength (256) bytes; the key's
	// commands must share a queue. Not compared on a re-issue of the same
	// ID. Default "": none.
	OrderKey string
}

// Limits of unique commands (Raw.UniqueKey, Raw.UniqueWindow).
const (
	// MaxUniqueKeyLength is the longest unique key, in bytes (256).
	MaxUniqueKeyLength = model.MaxUniqueKeyLength
	// MinUniqueWindow is the shortest unique window (1 s).
	MinUniqueWindow = model.MinUniqueWindow
	// MaxUniqueWindow is the longest unique window (30 days). The key
	// holds for the whole window only while its first command is kept:
	// a window longer than the type's retention of final commands (7
	// days completed, 30 days discarded or cancelled, by default) may see
	// a second command after the first was removed.
	MaxUniqueWindow = model.MaxUniqueWindow
)

// Issue window: a command ID that carries a time (a UUIDv7, or a day ID
// from NewID) is accepted only when its day is at most IssueWindowPastDays
// (2) before today (UTC) and at most IssueWindowFutureDays (1) after it;
// other IDs are refused with an error wrapping ErrInvalidID and
// ErrIDOutsideWindow. Within the window, issuing the same ID again is
// always recognised as a re-issue (Result.Existing): day tables are
// dropped only once the window has passed (plus one day for clock skew
// between machines).
const (
	IssueWindowPastDays   = model.IssueWindowPastDays
	IssueWindowFutureDays = model.IssueWindowFutureDays
)

// MaxScheduleAhead is the furthest ahead a command may be scheduled
// (Raw.RunAt, Raw.Delay, At, After): 2 years (730 days). Further is
// refused with ErrInvalidSchedule.
const MaxScheduleAhead = model.MaxScheduleAhead

// MaxClockSkew is the difference between two machines' clocks cmdq allows
// for where it compares times written by one with the clock of another
// (the first delivery's fast path, cancels and run-now of commands about
// to start): 2 s.
const MaxClockSkew = model.MaxClockSkew

// issuer returns the current Issuer.
func (c *Client) issuer() *issuer.Issuer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.iss
}

// Issue stores cmd (its JSON encoding is the parameters) and puts it on its
// queue: the queue its type was registered or declared with on c, else the
// one the type declares (CommandWithOptions), else "commands". An
// in-process processor is woken at once. With CommandID the call is
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
	if err := c.issueSpace(); err != nil {
		return Result{}, err
	}
	if cmd == nil {
		res, err := c.issuer().Issue(ctx, cmd, engineOptions(opts)...)
		return Result(res), err
	}
	typ := cmd.CommandType()
	span, parent, state := c.startIssue(ctx, typ, "", "")
	corr := corrOf(span)
	eopts := append(engineOptions(opts), withTrace(parent, state, corr))
	mres, err := c.issuer().Issue(ctx, cmd, eopts...)
	res := Result(mres)
	endIssue(span, typ, deref(corr), res, err)
	return res, err
}

// IssueRaw issues a command given as type name and JSON parameters (the
// HTTP API's form), routed by the types c knows (Register, Declare), else
// to "commands". Errors as Issue. Its span's parent is the trace context
// raw names (Raw.TraceParent), else ctx's.
func (c *Client) IssueRaw(ctx context.Context, raw Raw) (Result, error) {
	if err := c.issueSpace(); err != nil {
		return Result{}, err
	}
	span, parent, state := c.startIssue(ctx, raw.Type, raw.TraceParent, raw.TraceState)
	raw.TraceParent, raw.TraceState = parent, state
	mres, err := c.issuer().IssueRaw(ctx, model.Raw(raw))
	res := Result(mres)
	endIssue(span, raw.Type, raw.CorrelationID, res, err)
	return res, err
}

// IssueMany issues cmds at once (wrap one with WithOptions to give it an ID or a
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
	if err := c.issueSpace(); err != nil {
		return make([]Result, len(cmds)), fmt.Errorf("cmdq: issue %d commands: none stored: %w", len(cmds), err)
	}
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
	mres, err := c.issuer().IssueMany(ctx, ecmds...)
	res := make([]Result, len(mres))
	for i, r := range mres {
		res[i] = Result(r)
	}
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

// issueSpace returns an error wrapping ErrStorageFull while the store's
// disk has less than its reserve plus Config.IssueHeadroom free (no
// storage call: the store's cached probe).
func (c *Client) issueSpace() error {
	h := c.cfg.IssueHeadroom
	switch {
	case h == 0:
		h = DefaultIssueHeadroom
	case h < 0:
		h = 0
	}
	if err := storage.CheckSpace(c.st, uint64(h)); err != nil {
		return fmt.Errorf("cmdq: issue refused, nothing stored: %w", err)
	}
	return nil
}
