package issuer

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/record"
	"github.com/cmdq-dev/cmdq/storage"
)

// By is the By recorded on the requeued events of the Issuer's recovery
// enqueues (re-issues of a pending command, background retries).
const By = "issuer"

// Router routes command types to logical queues: QueueOf returns the queue
// of a type it knows. *registry.Registry implements it (registered and
// declared types).
type Router interface {
	QueueOf(cmdType string) (queue string, ok bool)
	// CheckParams returns an error wrapping model.ErrInvalidParams
	// when params do not decode into a known type's Go type; nil for an
	// unknown type. Called for commands issued by type name (IssueRaw).
	CheckParams(cmdType string, params []byte) error
}

// IssuerOptions configures an Issuer. The zero value works.
type IssuerOptions struct {
	// Prefix starts every storage name. Defaults to model.DefaultPrefix ("cmdq").
	Prefix string
	// Wake, if set, is called with the logical queue after each message the
	// Issuer puts on a queue (for example (*processor.Processor).Notify, to
	// wake an in-process processor at once). It must not block. Default
	// nil.
	Wake func(queue string)
	// HandOff, if set, is the in-process hand-off: asked before the
	// issue's own message is enqueued, it returns a reserved handler slot
	// of a processor in this process that polls queue and handles cmdType
	// ((*processor.Processor).HandOff), or nil. With a slot the message is
	// enqueued invisible for the slot's lease and handed to that
	// processor, which runs it without a dequeue; Wake is not called.
	// Default nil: every message is enqueued visible (docs/lifecycle.md,
	// "In-process hand-off").
	HandOff func(queue, cmdType string) HandOffSlot
	// Routes, if set, routes every type it knows (QueueOf); other types go
	// to the queue their Go type declares (CommandWithOptions, typed Issue
	// only) or to model.DefaultQueue. Default nil.
	Routes Router
	// Declared, if set, reads the options typed commands declare in a form
	// this package cannot name (package cmdq's CommandWithOptions).
	Declared DeclaredFunc
	// MaxParamsBytes limits the compact JSON parameters, in bytes. Defaults
	// to model.MaxParamsBytes (500 KiB), which is also the largest allowed value.
	MaxParamsBytes int
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// EnqueueRetry is the first delay of the Issuer's background retries of
	// enqueues that failed after the command was stored (model.ErrEnqueueFailed,
	// model.ErrNotAccepted): the Issuer tries again after EnqueueRetry, doubling
	// up to MaxEnqueueRetry (1 minute), until the message is enqueued, for
	// as long as the process lives (Close stops it). Each retry loads the
	// command first and stops once it started (the failed enqueue had
	// landed after all); otherwise it is a recovery enqueue (a requeued
	// event, a message delayed by RecoveryDelay). A command it could not
	// mark for the reconciler is marked as soon as storage answers.
	// Defaults to DefaultEnqueueRetry (1 s); negative disables the retries.
	EnqueueRetry time.Duration
	// RecoveryDelay returns the visibility delay of a recovery enqueue of a
	// command type (a re-issue of a pending, never-started command, a
	// background retry): at least the type's lease and the processors'
	// StartedWriteDelay, so that a first message that may exist after all
	// (an enqueue whose answer was lost) has been started — its `started`
	// written — or finished before the second becomes visible (see
	// docs/lifecycle.md, "Duplicate messages"). Defaults to nil: 30 s for
	// every type (the default lease); a result of 0 or less takes that
	// default too. cmdq.Client passes the leases of the types it knows.
	RecoveryDelay func(cmdType string) time.Duration
	// NewID makes the ID of a command issued without one. Defaults to, on a
	// store that commits locally (storage.Combiner: the embedded store),
	// NewOrderedID, so a new command's rows sort after the previous ones and
	// a commit touches few pages of the file; elsewhere (Azure) NewDayID
	// with Now, IDs random but for their issue day, that spread commands
	// over the table's partition servers (sequential partition keys would
	// send every write to one). Both carry the issue day, so the command
	// is stored in that day's table, which retention drops whole
	// (docs/lifecycle.md, "Retention"); an ID without a time (NewID) is
	// kept in the base table and costs a delete per command to expire.
	NewID func() string
	// ManyConcurrency is how many commands of one IssueMany call are issued
	// at once. Defaults to DefaultManyConcurrency (32).
	ManyConcurrency int
	// Shards is the number of shards of each logical queue it names: the
	// Issuer spreads a sharded queue's messages over its shards, round
	// robin (docs/scaling.md). Default none: one storage queue each.
	Shards map[string]int
	// WakeAt, if set, is called with the logical queue and the time a
	// message the Issuer put on it with a visibility delay (a scheduled
	// command's, a recovery's) becomes visible
	// ((*processor.Processor).WakeAt: the in-process processor wakes
	// itself then). It must not block. Default nil.
	WakeAt func(queue string, at time.Time)
	// HopHorizon, when above 0, is the longest visibility delay of a
	// message (default and at most storage.MaxVisibility, 7 days): a
	// command scheduled later is enqueued with it and hops when it shows
	// up (enqueue.Enqueuer.SetHorizon). Tests shorten it; the processors
	// must use the same.
	HopHorizon time.Duration
}

// DefaultManyConcurrency is IssuerOptions.ManyConcurrency's default (32):
// IssueMany's writes share the embedded store's group commits, and on Azure
// as many requests are in flight.
const DefaultManyConcurrency = 32

// Validate reports every problem with the options at once.
func (o IssuerOptions) Validate() error {
	var errs []error
	if err := (layout.Names{Prefix: cmp.Or(o.Prefix, model.DefaultPrefix), Shards: o.Shards}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.MaxParamsBytes < 0 || o.MaxParamsBytes > model.MaxParamsBytes {
		errs = append(errs, fmt.Errorf("MaxParamsBytes %d is outside 0..%d (0 = the default, %d bytes: what one table entity holds)", o.MaxParamsBytes, model.MaxParamsBytes, model.MaxParamsBytes))
	}
	if o.ManyConcurrency < 0 {
		errs = append(errs, fmt.Errorf("ManyConcurrency %d is negative (0 = the default, %d)", o.ManyConcurrency, DefaultManyConcurrency))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("commands: invalid options: %w", err)
	}
	return nil
}

// IssueOption adjusts one Issue call.
type IssueOption func(*model.Raw)

// WithID sets the command ID (idempotency key): issuing again with the same
// ID and parameters returns the existing command.
func WithID(id string) IssueOption { return func(r *model.Raw) { r.ID = id } }

// WithCorrelationID sets the correlation ID.
func WithCorrelationID(id string) IssueOption { return func(r *model.Raw) { r.CorrelationID = id } }

// At schedules the command at t (model.Raw.RunAt).
func At(t time.Time) IssueOption { return func(r *model.Raw) { r.RunAt, r.Delay = t, 0 } }

// After schedules the command d after it is issued (model.Raw.Delay).
func After(d time.Duration) IssueOption {
	return func(r *model.Raw) { r.Delay, r.RunAt = d, time.Time{} }
}

// With returns cmd with issue options attached, for IssueMany (and Issue
// alike): IssueMany(ctx, a, With(b, WithID(id))). The result is a Command
// of the same type name, routing and parameters as cmd.
func With(cmd Command, opts ...IssueOption) Command {
	if w, ok := cmd.(withOptions); ok {
		return withOptions{cmd: w.cmd, opts: append(append([]IssueOption(nil), w.opts...), opts...)}
	}
	return withOptions{cmd: cmd, opts: opts}
}

// withOptions is a Command with its issue options (see With).
type withOptions struct {
	cmd  Command
	opts []IssueOption
}

func (w withOptions) CommandType() string { return w.cmd.CommandType() }

// unwrap returns the command inside With and its options.
func unwrap(cmd Command) (Command, []IssueOption) {
	if w, ok := cmd.(withOptions); ok {
		return w.cmd, w.opts
	}
	return cmd, nil
}

// Issuer stores commands and enqueues them. Safe for concurrent use.
type Issuer struct {
	st    storage.Store
	opts  IssuerOptions
	names layout.Names

	mu  sync.Mutex
	rec *record.Store
	enq *enqueue.Enqueuer

	retry retrier // background retries of failed enqueues
}

// HandOffSlot is a processor's handler slot reserved for an issue's own
// message (IssuerOptions.HandOff): the message is enqueued invisible for
// Visibility and handed over with Take, or the slot given back with Cancel
// when the enqueue failed; exactly one of the two is called.
type HandOffSlot interface {
	// Visibility is the enqueue's visibility delay (the type's lease).
	Visibility() time.Duration
	// Take hands over the enqueued message m with text text, enqueued by
	// a call sent at sent.
	Take(m storage.Message, text string, sent time.Time)
	// Cancel gives the slot back.
	Cancel()
}

// NewIssuer returns an Issuer on st. Tables and queues are opened on first
// use. Invalid options give an error listing every problem.
func NewIssuer(st storage.Store, opts IssuerOptions) (*Issuer, error) {
	if st == nil {
		return nil, errors.New("commands: NewIssuer needs a storage.Store")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.Prefix = cmp.Or(opts.Prefix, model.DefaultPrefix)
	opts.MaxParamsBytes = cmp.Or(opts.MaxParamsBytes, model.MaxParamsBytes)
	opts.ManyConcurrency = cmp.Or(opts.ManyConcurrency, DefaultManyConcurrency)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewID == nil {
		now := opts.Now
		opts.NewID = func() string { return NewDayID(now()) }
		if _, local := st.(storage.Combiner); local {
			opts.NewID = NewOrderedID
		}
	}
	if opts.EnqueueRetry == 0 {
		opts.EnqueueRetry = DefaultEnqueueRetry
	}
	i := &Issuer{st: st, opts: opts, names: layout.Names{Prefix: opts.Prefix, Shards: opts.Shards}}
	i.retry.init(i)
	return i, nil
}

// PendingEnqueues returns the number of stored commands whose enqueue
// failed and that the Issuer is still retrying in the background.
func (i *Issuer) PendingEnqueues() int { return i.retry.pending() }

// Close stops the background retries of failed enqueues (see
// IssuerOptions.EnqueueRetry); commands still waiting for one are left to
// the reconciler (marked ones) or to a re-issue by their client. Issue
// keeps working after Close, without background retries. Close never fails.
func (i *Issuer) Close() error {
	i.retry.close()
	return nil
}

// log returns the commands log and the enqueue path, opening the tables on
// first use.
func (i *Issuer) log(ctx context.Context) (*record.Store, *enqueue.Enqueuer, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.rec != nil {
		return i.rec, i.enq, nil
	}
	s, err := record.Open(ctx, i.st, i.names, record.Options{Now: i.opts.Now, RecoveryDelay: i.opts.RecoveryDelay})
	if err != nil {
		return nil, nil, fmt.Errorf("commands: %w", err)
	}
	i.rec, i.enq = s, enqueue.NewEnqueuer(i.st, i.names, s, i.opts.Wake)
	i.enq.SetWakeAt(i.opts.WakeAt)
	i.enq.SetHorizon(i.opts.HopHorizon)
	if h := i.opts.HandOff; h != nil {
		i.enq.SetHandOff(func(queue, cmdType string) enqueue.Slot {
			if slot := h(queue, cmdType); slot != nil {
				return slot
			}
			return nil
		})
	}
	return i.rec, i.enq, nil
}

// Issue stores cmd (JSON-encoded) and enqueues it on its queue: the one
// IssuerOptions.Routes gives its type, else the one its Go type declares
// (CommandWithOptions), else model.DefaultQueue. Cost: one table batch and one
// enqueue (sent once, with no transport retries; one combined write on the
// embedded store); re-issuing an existing ID costs one failed batch and one
// point read, plus, while the command is pending and never started, a
// recovery: one batch (a requeued event) and one enqueue delayed by
// IssuerOptions.RecoveryDelay. Errors as IssueRaw.
func (i *Issuer) Issue(ctx context.Context, cmd Command, opts ...IssueOption) (model.Result, error) {
	raw, queue, err := encode(cmd, opts, i.opts.Declared)
	if err != nil {
		return model.Result{}, err
	}
	return i.issue(ctx, raw, queue, true)
}

// encode turns a typed command (possibly wrapped by With) into its model.Raw form
// and the queue its Go type declares ("" if none).
func encode(cmd Command, opts []IssueOption, declared DeclaredFunc) (model.Raw, string, error) {
	cmd, wopts := unwrap(cmd)
	if cmd == nil {
		return model.Raw{}, "", fmt.Errorf("%w: nil command", model.ErrInvalidType)
	}
	params, err := json.Marshal(cmd)
	if err != nil {
		return model.Raw{}, "", fmt.Errorf("%w: encode %T: %w", model.ErrInvalidParams, cmd, err)
	}
	raw := model.Raw{Type: cmd.CommandType(), Params: params}
	for _, o := range wopts {
		o(&raw)
	}
	for _, o := range opts {
		o(&raw)
	}
	return raw, Declared(cmd, declared).Queue, nil
}

// IssueRaw stores and enqueues a command given as type and JSON parameters,
// routed by IssuerOptions.Routes (else model.DefaultQueue).
// passReference ends the error of params over a limit: what to do instead.
const passReference = "store large data elsewhere (a blob, a file) and pass a reference to it in the params"

// Errors: model.ErrInvalidType, model.ErrInvalidID, model.ErrInvalidParams, model.ErrParamsTooLarge,
// model.ErrIDConflict, model.ErrEnqueueFailed (the command is stored, durably marked and
// accepted; model.Result.ID is valid and the reconciler enqueues it),
// model.ErrNotAccepted (stored, but neither enqueued nor marked: issue it again
// with model.Result.ID), and storage errors (nothing is stored, or it is unknown
// whether it was: issue it again with the same ID).
func (i *Issuer) IssueRaw(ctx context.Context, raw model.Raw) (model.Result, error) {
	return i.issue(ctx, raw, "", false)
}

// IssueMany issues cmds (each possibly wrapped by With for its ID or
// correlation ID) at once. On a store that commits locally
// (storage.Combiner: the embedded store) every new command of one queue is
// stored and enqueued in one durable write (one commit for the batch);
// elsewhere (Azure) up to IssuerOptions.ManyConcurrency Issue calls run at
// once, their requests overlapping. Each command is issued as Issue would
// (an existing ID is compared and answered Existing). results[i] is
// cmds[i]'s model.Result; a command that failed has an empty ID unless it was
// stored (model.ErrEnqueueFailed, model.ErrNotAccepted). err joins every failure, each
// saying which command (index and type) and wrapping its error (errors.Is
// works on the joined error).
func (i *Issuer) IssueMany(ctx context.Context, cmds ...Command) ([]model.Result, error) {
	results := make([]model.Result, len(cmds))
	errs := make([]error, len(cmds))
	fail := func(n int, err error) {
		typ := "<nil>"
		if c, _ := unwrap(cmds[n]); c != nil {
			typ = c.CommandType()
		}
		errs[n] = fmt.Errorf("command %d (%s): %w", n, typ, err)
	}
	// A command whose ID an earlier one has is issued after the others,
	// in order, so it finds the earlier one (Existing, or a conflict).
	type item struct {
		n        int
		raw      model.Raw
		declared string
	}
	var firsts, repeats []item
	seen := map[string]bool{}
	for n, cmd := range cmds {
		raw, declared, err := encode(cmd, nil, i.opts.Declared)
		key := raw.ID
		if raw.UniqueKey != "" && checkUnique(raw) == nil {
			key = layout.UniqueID(raw.Type, raw.UniqueKey, raw.UniqueWindow, i.opts.Now())
		}
		switch {
		case err != nil:
			fail(n, err)
		case key != "" && seen[key]:
			repeats = append(repeats, item{n, raw, declared})
		default:
			seen[key] = key != ""
			firsts = append(firsts, item{n, raw, declared})
		}
	}
	issue := func(it item) {
		res, err := i.issue(ctx, it.raw, it.declared, true)
		results[it.n] = res
		if err != nil {
			fail(it.n, err)
		}
	}
	if _, local := i.st.(storage.Combiner); local {
		// One durable write for the batch (per queue).
		var pcs []prepared
		var ncs []record.NewCommand
		var idx []int
		for _, it := range firsts {
			pc, err := i.prepare(it.raw, it.declared, true)
			if err != nil {
				fail(it.n, err)
				continue
			}
			pcs, ncs, idx = append(pcs, pc), append(ncs, pc.NewCommand), append(idx, it.n)
		}
		if len(ncs) > 0 {
			st, enq, err := i.log(ctx)
			var cerrs []error
			if err == nil {
				// Commands with an order key join it first, in the
				// order given; one that cannot join is not created.
				joined := ncs[:0:0]
				jidx, jpcs := idx[:0:0], pcs[:0:0]
				for k := range ncs {
					if jerr := i.joinOrder(ctx, st, &ncs[k]); jerr != nil {
						fail(idx[k], jerr)
						continue
					}
					pcs[k].NewCommand = ncs[k]
					joined, jidx, jpcs = append(joined, ncs[k]), append(jidx, idx[k]), append(jpcs, pcs[k])
				}
				ncs, idx, pcs = joined, jidx, jpcs
				cerrs, _ = enq.CreateMany(ctx, ncs)
			}
			for k, n := range idx {
				if err != nil {
					fail(n, err)
					continue
				}
				res, ierr := i.created(ctx, st, enq, pcs[k], layout.Envelope{}, cerrs[k] == nil, cerrs[k])
				results[n] = res
				if ierr != nil {
					fail(n, ierr)
				}
			}
		}
	} else {
		sem := make(chan struct{}, i.opts.ManyConcurrency)
		var wg sync.WaitGroup
		for _, it := range firsts {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				issue(it)
			}()
		}
		wg.Wait()
	}
	for _, it := range repeats {
		issue(it)
	}
	return results, errors.Join(errs...)
}

// route returns the logical queue of a command type: Routes, else the
// queue its Go type declares, else model.DefaultQueue.
func (i *Issuer) route(cmdType, declared string) string {
	if i.opts.Routes != nil {
		if q, ok := i.opts.Routes.QueueOf(cmdType); ok && q != "" {
			return q
		}
	}
	return cmp.Or(declared, model.DefaultQueue)
}

func (i *Issuer) issue(ctx context.Context, raw model.Raw, declared string, typed bool) (model.Result, error) {
	nc, err := i.prepare(raw, declared, typed)
	if err != nil {
		return model.Result{}, err
	}
	return i.store(ctx, nc)
}

// store creates the prepared command nc and enqueues it.
func (i *Issuer) store(ctx context.Context, nc prepared) (model.Result, error) {
	st, enq, err := i.log(ctx)
	if err != nil {
		return model.Result{}, err
	}
	if err := i.joinOrder(ctx, st, &nc.NewCommand); err != nil {
		return model.Result{}, err
	}
	env, enqueued, err := enq.Create(ctx, nc.NewCommand)
	return i.created(ctx, st, enq, nc, env, enqueued, err)
}

// joinOrder gives nc its place in its order key, if it has one, before
// it is stored (shared.AppendOrder: two storage calls).
func (i *Issuer) joinOrder(ctx context.Context, st *record.Store, nc *record.NewCommand) error {
	if nc.OrderKey == "" {
		return nil
	}
	seq, err := st.AppendOrder(ctx, nc.OrderKey, nc.Queue, nc.ID, nc.Type)
	if err != nil {
		return err
	}
	nc.OrderSeq = seq
	return nil
}

// IssueDerived issues cmd under id, an ID cmdq derived from what the
// command stands for (a periodic schedule's tick, layout.TickID): as for a
// unique key, a command that exists under the ID is a duplicate
// (Result.Duplicate) whatever its parameters, not a conflict. Cost as
// Issue's; a duplicate costs one failed batch and one point read.
func (i *Issuer) IssueDerived(ctx context.Context, cmd Command, id, correlationID string) (model.Result, error) {
	raw, declared, err := encode(cmd, nil, i.opts.Declared)
	if err != nil {
		return model.Result{}, err
	}
	raw.ID, raw.CorrelationID, raw.UniqueKey, raw.UniqueWindow = id, correlationID, "", 0
	nc, err := i.prepare(raw, declared, true)
	if err != nil {
		return model.Result{}, err
	}
	nc.derived = true
	return i.store(ctx, nc)
}

// prepared is a validated command ready to store: derived is true when
// its ID derives from a unique key or a periodic tick (an existing command
// under it is a duplicate, whatever its parameters).
type prepared struct {
	record.NewCommand
	derived bool
}

// checkUnique validates a unique key and window (model.ErrInvalidUnique).
func checkUnique(raw model.Raw) error {
	var errs []error
	switch n := len(raw.UniqueKey); {
	case n == 0:
		errs = append(errs, fmt.Errorf("%w: a unique window (%s) needs a unique key: 1 to %d bytes, such as an order number", model.ErrInvalidUnique, raw.UniqueWindow, model.MaxUniqueKeyLength))
	case n > model.MaxUniqueKeyLength:
		errs = append(errs, fmt.Errorf("%w: the unique key is %d bytes; the limit is %d (hash a longer key first)", model.ErrInvalidUnique, n, model.MaxUniqueKeyLength))
	}
	if w := raw.UniqueWindow; w < model.MinUniqueWindow || w > model.MaxUniqueWindow {
		errs = append(errs, fmt.Errorf("%w: the unique window is %s; give a duration from %s to %s (such as 1h): issuing the same type and key again within it returns the first command", model.ErrInvalidUnique, w, model.MinUniqueWindow, "720h (30 days)"))
	}
	if raw.ID != "" {
		errs = append(errs, fmt.Errorf("%w: a unique key derives the command ID; give either an ID or a unique key, not both", model.ErrInvalidUnique))
	}
	return errors.Join(errs...)
}

// prepare validates a command and returns what to store: its ID (a new one
// when raw has none), compact parameters and queue.
func (i *Issuer) prepare(raw model.Raw, declared string, typed bool) (prepared, error) {
	nc, err := i.prepareCommand(raw, declared, typed)
	return prepared{NewCommand: nc, derived: raw.UniqueKey != ""}, err
}

func (i *Issuer) prepareCommand(raw model.Raw, declared string, typed bool) (record.NewCommand, error) {
	if err := model.ValidateType(raw.Type); err != nil {
		return record.NewCommand{}, err
	}
	id := raw.ID
	switch {
	case raw.UniqueKey != "" || raw.UniqueWindow != 0:
		if err := checkUnique(raw); err != nil {
			return record.NewCommand{}, err
		}
		// The ID of the key's current window: it carries the day its
		// bucket starts, which a window of more than two days may place
		// before the issue window (the ID is cmdq's own, for now).
		id = layout.UniqueID(raw.Type, raw.UniqueKey, raw.UniqueWindow, i.opts.Now())
	case id == "":
		id = i.opts.NewID()
	default:
		if err := model.ValidateID(id); err != nil {
			return record.NewCommand{}, err
		}
		if err := layout.CheckIssueWindow(id, i.opts.Now()); err != nil {
			return record.NewCommand{}, fmt.Errorf("%w: %w", model.ErrInvalidID, err)
		}
	}
	// One clock read for the issue time and the run-at time a delay
	// counts from: the status's runAt is its createdAt plus the delay.
	now := i.opts.Now()
	runAt, err := model.ValidSchedule(raw, now)
	if err != nil {
		return record.NewCommand{}, err
	}
	if len(raw.CorrelationID) > model.MaxCorrelationIDLength {
		return record.NewCommand{}, fmt.Errorf("%w: correlation ID is %d bytes; the limit is %d", model.ErrInvalidParams, len(raw.CorrelationID), model.MaxCorrelationIDLength)
	}
	params := []byte("{}")
	if len(bytes.TrimSpace(raw.Params)) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw.Params); err != nil {
			return record.NewCommand{}, fmt.Errorf("%w: params are not valid JSON: %w", model.ErrInvalidParams, err)
		}
		params = buf.Bytes()
	}
	if len(params) > i.opts.MaxParamsBytes {
		return record.NewCommand{}, fmt.Errorf("%w: the params of %s are %d bytes of JSON, over the %d-byte limit: %s", model.ErrParamsTooLarge, raw.Type, len(params), i.opts.MaxParamsBytes, passReference)
	}
	if !typed && i.opts.Routes != nil {
		// Issued by type name: the params must decode into the type's Go
		// type when this process knows it (Register, Declare). A typed
		// issue's params are the type's own JSON encoding.
		if err := i.opts.Routes.CheckParams(raw.Type, params); err != nil {
			return record.NewCommand{}, err
		}
	}
	queue := i.route(raw.Type, declared)
	if err := storage.ValidateQueueName(i.names.Queue(queue)); err != nil {
		return record.NewCommand{}, fmt.Errorf("commands: queue %q of %s: %w", queue, raw.Type, err)
	}
	nc := record.NewCommand{ID: id, Type: raw.Type, Params: params, CorrelationID: raw.CorrelationID, Queue: queue, IssuedAt: now, RunAt: runAt}
	if raw.OrderKey != "" {
		if err := model.ValidateOrderKey(raw.OrderKey); err != nil {
			return record.NewCommand{}, err
		}
		nc.OrderKey = raw.OrderKey
	}
	if raw.TraceParent != "" && len(raw.TraceParent) <= maxTraceParent && len(raw.TraceState) <= maxTraceState {
		nc.TraceParent, nc.TraceState = raw.TraceParent, raw.TraceState
	}
	return nc, nil
}

// The longest trace context stored with a command: a W3C traceparent of
// version 00 is 55 characters (later versions may append fields), a
// tracestate at most 32 entries of 256 (the W3C limits; propagators keep
// it to 512 characters).
const (
	maxTraceParent = 256
	maxTraceState  = 8192
)

// created finishes an issue whose create (enq.Create, or one item of
// CreateMany) returned err and, without one, enqueued or not: an existing
// ID is compared (and re-enqueued while pending and never started), a
// stored command not yet enqueued is enqueued.
func (i *Issuer) created(ctx context.Context, st *record.Store, enq *enqueue.Enqueuer, pc prepared, env layout.Envelope, enqueued bool, err error) (model.Result, error) {
	nc := pc.NewCommand
	id := nc.ID
	res := model.Result{ID: id, Queue: nc.Queue}
	if !nc.RunAt.IsZero() {
		res.RunAt = nc.RunAt.UTC().Truncate(time.Millisecond)
	}
	switch {
	case errors.Is(err, storage.ErrExists):
		var rec *record.Record
		if ee := (*record.ExistsError)(nil); errors.As(err, &ee) {
			rec = ee.Current // read by the create
		} else {
			var lerr error
			if rec, lerr = st.Load(ctx, id); lerr != nil {
				return model.Result{}, fmt.Errorf("commands: command %s exists but cannot be read: %w", id, lerr)
			}
		}
		switch {
		case pc.derived && rec.Type == nc.Type:
			// A unique key's (or a tick's) duplicate: the first command
			// stands, whatever the parameters.
			res.Duplicate = true
		case rec.Type != nc.Type || rec.ParamsHash != record.HashParams(nc.Params) || rec.CorrelationID != nc.CorrelationID:
			return model.Result{}, fmt.Errorf("%w: command %s exists as %s with other params or another correlation ID; use a new ID for a different command", model.ErrIDConflict, id, rec.Type)
		}
		res.Existing, res.Queue, res.RunAt = true, rec.Queue, time.Time{}
		// A duplicate re-enqueues only a command older than its recovery
		// delay: before then the first issuer's own enqueue (or its
		// background retry) is still on its way, and duplicates of a
		// unique key or a tick come together by design.
		young := pc.derived && i.opts.Now().Sub(rec.IssuedAt) < i.recoveryDelay(rec.Type)
		if _, combined := i.st.(storage.Combiner); !combined && !young && rec.State == model.StatePending && rec.Attempts == 0 {
			// The first issue may have stopped between storing the command
			// and enqueueing it (a crashed process, a failed enqueue), and
			// a caller retrying is exactly that case: make sure a message
			// exists, as a recovery (a requeued event, then a message
			// delayed by the recovery delay). If the first message exists
			// after all, the second is harmless (docs/lifecycle.md,
			// "Duplicate messages").
			i.retry.forget(res.ID)
			return res, i.recover(ctx, st, enq, rec, "re-issued while pending and never started: enqueued again")
		}
		return res, nil
	case errors.Is(err, record.ErrParamsTooLarge):
		// One sentence, without the storage layer's words (it wraps
		// storage.ErrTooLarge; callers branch on ErrParamsTooLarge).
		return model.Result{}, fmt.Errorf("%w: the params of %s do not fit in one stored command (%d UTF-16 code units at most; a character outside the Basic Multilingual Plane counts as two): %s",
			model.ErrParamsTooLarge, nc.Type, layout.MaxParamsChunks*layout.ParamsChunkUnits, passReference)
	case err != nil:
		return model.Result{}, fmt.Errorf("commands: store command %s: %w", id, err)
	case enqueued:
		return res, nil
	}
	if env.ID == "" {
		env = layout.Envelope{ID: id, Type: nc.Type}
	}
	return res, i.enqueue(ctx, st, enq, env, nc.Queue)
}

// recoveryDelay is the recovery delay of cmdType (IssuerOptions.RecoveryDelay).
func (i *Issuer) recoveryDelay(cmdType string) time.Duration {
	if f := i.opts.RecoveryDelay; f != nil {
		if d := f(cmdType); d > 0 {
			return d
		}
	}
	return record.DefaultRecoveryDelay
}

// enqueue puts the first message of a stored command on its queue, with
// no transport retries (enqueue.Enqueuer.Enqueue). If that fails it marks the command
// for the reconciler and returns model.ErrEnqueueFailed (the command is
// accepted); if the marker cannot be written either it returns
// model.ErrNotAccepted. Either way the background retrier keeps trying.
func (i *Issuer) enqueue(ctx context.Context, st *record.Store, enq *enqueue.Enqueuer, env layout.Envelope, queue string) error {
	err := enq.EnqueueEnvelope(ctx, env, queue)
	if err == nil {
		return nil
	}
	return i.failed(ctx, st, env.ID, env.Type, queue, err)
}

// recover re-enqueues the stored command rec (pending, never started) as a
// recovery (enqueue.Enqueuer.Recover). If that fails it marks the command,
// as enqueue.
func (i *Issuer) recover(ctx context.Context, st *record.Store, enq *enqueue.Enqueuer, rec *record.Record, note string) error {
	// Again on a conflict with another recovery: the client was told it
	// is accepted only once a message is on its way.
	_, _, err := enq.Recover(ctx, rec, By, note, true)
	if err == nil {
		return nil
	}
	return i.failed(ctx, st, rec.ID, rec.Type, rec.Queue, err)
}

// failed handles a failed enqueue of a stored command: mark it for the
// reconciler (model.ErrEnqueueFailed) or, when the marker fails too,
// model.ErrNotAccepted; the background retrier keeps trying either way.
func (i *Issuer) failed(ctx context.Context, st *record.Store, id, cmdType, queue string, err error) error {
	if merr := st.MarkUnqueued(ctx, id, queue); merr != nil {
		i.retry.add(id, cmdType, queue, false)
		return fmt.Errorf("%w: command %s is stored but neither enqueued nor marked for the reconciler; issue it again with the same ID: %w", model.ErrNotAccepted, id, errors.Join(err, merr))
	}
	i.retry.add(id, cmdType, queue, true)
	return fmt.Errorf("%w: command %s is stored and marked; the reconciler will enqueue it: %w", model.ErrEnqueueFailed, id, err)
}
