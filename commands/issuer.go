package commands

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/status"
	"github.com/cmdq-dev/cmdq/storage"
)

// DefaultMaxParamsBytes is the default and largest Options.MaxParamsBytes:
// 500 KiB of compact JSON. Parameters are stored as UTF-16 strings in one
// table entity (1 MiB, split into 64 KiB properties), so about 512 Ki UTF-16
// code units is what one entity holds; a UTF-8 byte never takes more than one
// UTF-16 unit, so 500 KiB of JSON always fits.
const DefaultMaxParamsBytes = 500 * 1024

// MaxCorrelationIDLength is the longest correlation ID, in bytes.
const MaxCorrelationIDLength = 256

// Options configures an Issuer. The zero value works.
type Options struct {
	// Prefix starts every storage name (default "cmdq").
	Prefix string
	// Notify, if set, is called with the logical queue name after each
	// successful enqueue (e.g. (*processor.Processor).Notify, to wake an
	// in-process processor at once). It must not block.
	Notify func(queue string)
	// QueueFor routes a command type to a logical queue (default: every type
	// to "commands"). The result must make a valid queue name with the
	// prefix; "" means "commands".
	QueueFor func(cmdType string) string
	// MaxParamsBytes limits the compact JSON parameters, in bytes (0 =
	// DefaultMaxParamsBytes, which is also the largest allowed value).
	MaxParamsBytes int
	// Now returns the current time (default time.Now).
	Now func() time.Time
	// EnqueueRetry is the first delay of the Issuer's background retries of
	// enqueues that failed after the command was stored (ErrEnqueueFailed,
	// ErrNotAccepted): the Issuer tries again after EnqueueRetry, doubling
	// up to MaxEnqueueRetry (1 minute), until the message is enqueued, for
	// as long as the process lives (Close stops it). A command it could not
	// mark for the reconciler is marked as soon as storage answers. Default
	// 1 s; negative disables the retries.
	EnqueueRetry time.Duration
	// NewID makes the ID of a command issued without one. Default: on a
	// store that commits locally (storage.Combiner: the embedded store)
	// NewOrderedID, so a new command's rows sort after the previous ones and
	// a commit touches few pages of the file; elsewhere (Azure) NewID,
	// random UUIDs that spread commands over the table's partition servers
	// (sequential partition keys would send every write to one).
	NewID func() string
}

// Validate reports every problem with the options at once.
func (o Options) Validate() error {
	var errs []error
	if err := (status.Names{Prefix: o.Prefix}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.MaxParamsBytes < 0 || o.MaxParamsBytes > DefaultMaxParamsBytes {
		errs = append(errs, fmt.Errorf("MaxParamsBytes %d is outside 0..%d (0 = the default, %d bytes: what one table entity holds)", o.MaxParamsBytes, DefaultMaxParamsBytes, DefaultMaxParamsBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("commands: invalid options: %w", err)
	}
	return nil
}

// Result is the outcome of issuing a command.
type Result struct {
	// ID is the command ID.
	ID string `json:"id"`
	// Existing is true when a command with this ID and the same type,
	// parameters and correlation ID already existed; nothing was written (a message is enqueued again only
	// if the command is still pending and never started).
	Existing bool `json:"existing,omitempty"`
	// Queue is the logical queue the command is on.
	Queue string `json:"queue"`
}

// Raw is a command given as type name and JSON parameters (the HTTP API's
// form).
type Raw struct {
	// ID is the command ID ("" = a new random UUID).
	ID string
	// Type is the command type name.
	Type string
	// Params is the JSON parameters (nil or empty = {}). Whitespace is
	// removed (json.Compact) before storing and comparing.
	Params json.RawMessage
	// CorrelationID is an optional caller-chosen ID (at most 256 bytes).
	CorrelationID string
}

// IssueOption adjusts one Issue call.
type IssueOption func(*Raw)

// WithID sets the command ID (idempotency key): issuing again with the same
// ID and parameters returns the existing command.
func WithID(id string) IssueOption { return func(r *Raw) { r.ID = id } }

// WithCorrelationID sets the correlation ID.
func WithCorrelationID(id string) IssueOption { return func(r *Raw) { r.CorrelationID = id } }

// Issuer stores commands and enqueues them. Safe for concurrent use.
type Issuer struct {
	st    storage.Store
	opts  Options
	names status.Names

	mu     sync.Mutex
	store  *status.Store
	queues map[string]storage.Queue

	retry retrier // background retries of failed enqueues
}

// NewIssuer returns an Issuer on st. Tables and queues are opened on first
// use. Invalid options give an error listing every problem.
func NewIssuer(st storage.Store, opts Options) (*Issuer, error) {
	if st == nil {
		return nil, errors.New("commands: NewIssuer needs a storage.Store")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.MaxParamsBytes == 0 {
		opts.MaxParamsBytes = DefaultMaxParamsBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewID == nil {
		opts.NewID = NewID
		if _, local := st.(storage.Combiner); local {
			opts.NewID = NewOrderedID
		}
	}
	if opts.EnqueueRetry == 0 {
		opts.EnqueueRetry = DefaultEnqueueRetry
	}
	i := &Issuer{st: st, opts: opts, names: status.Names{Prefix: opts.Prefix}, queues: map[string]storage.Queue{}}
	i.retry.init(i)
	return i, nil
}

// PendingEnqueues returns the number of stored commands whose enqueue
// failed and that the Issuer is still retrying in the background.
func (i *Issuer) PendingEnqueues() int { return i.retry.pending() }

// Close stops the background retries of failed enqueues (see
// Options.EnqueueRetry); commands still waiting for one are left to the
// reconciler (marked ones) or to a re-issue by their client. Issue keeps
// working after Close, without background retries. Close never fails.
func (i *Issuer) Close() error {
	i.retry.close()
	return nil
}

func (i *Issuer) statusStore(ctx context.Context) (*status.Store, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.store != nil {
		return i.store, nil
	}
	s, err := status.Open(ctx, i.st, i.names, status.Options{Now: i.opts.Now})
	if err != nil {
		return nil, fmt.Errorf("commands: %w", err)
	}
	i.store = s
	return s, nil
}

func (i *Issuer) queue(ctx context.Context, logical string) (storage.Queue, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if q, ok := i.queues[logical]; ok {
		return q, nil
	}
	q, err := i.st.Queue(ctx, i.names.Queue(logical))
	if err != nil {
		return nil, err
	}
	i.queues[logical] = q
	return q, nil
}

// Issue stores cmd (JSON-encoded) and enqueues it. Cost: one table batch and
// one enqueue; re-issuing an existing ID costs one failed batch and one point
// read, plus one enqueue while the command is pending and never started.
// Errors as IssueRaw.
func (i *Issuer) Issue(ctx context.Context, cmd Command, opts ...IssueOption) (Result, error) {
	if cmd == nil {
		return Result{}, fmt.Errorf("%w: nil command", ErrInvalidType)
	}
	params, err := json.Marshal(cmd)
	if err != nil {
		return Result{}, fmt.Errorf("%w: encode %T: %w", ErrInvalidParams, cmd, err)
	}
	raw := Raw{Type: cmd.CommandType(), Params: params}
	for _, o := range opts {
		o(&raw)
	}
	return i.IssueRaw(ctx, raw)
}

// IssueRaw stores and enqueues a command given as type and JSON parameters.
// Errors: ErrInvalidType, ErrInvalidID, ErrInvalidParams, ErrParamsTooLarge,
// ErrIDConflict, ErrEnqueueFailed (the command is stored, durably marked and
// accepted; Result.ID is valid and the reconciler enqueues it),
// ErrNotAccepted (stored, but neither enqueued nor marked: issue it again
// with Result.ID), and storage errors (nothing is stored, or it is unknown
// whether it was: issue it again with the same ID).
func (i *Issuer) IssueRaw(ctx context.Context, raw Raw) (Result, error) {
	if err := ValidateType(raw.Type); err != nil {
		return Result{}, err
	}
	id := raw.ID
	if id == "" {
		id = i.opts.NewID()
	} else if err := ValidateID(id); err != nil {
		return Result{}, err
	}
	if len(raw.CorrelationID) > MaxCorrelationIDLength {
		return Result{}, fmt.Errorf("%w: correlation ID is %d bytes; the limit is %d", ErrInvalidParams, len(raw.CorrelationID), MaxCorrelationIDLength)
	}
	params := []byte("{}")
	if len(bytes.TrimSpace(raw.Params)) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw.Params); err != nil {
			return Result{}, fmt.Errorf("%w: params are not valid JSON: %w", ErrInvalidParams, err)
		}
		params = buf.Bytes()
	}
	if len(params) > i.opts.MaxParamsBytes {
		return Result{}, fmt.Errorf("%w: params of %s are %d bytes of JSON; the limit is %d bytes (store large data elsewhere and pass a reference)", ErrParamsTooLarge, raw.Type, len(params), i.opts.MaxParamsBytes)
	}
	queue := status.DefaultQueue
	if i.opts.QueueFor != nil {
		if q := i.opts.QueueFor(raw.Type); q != "" {
			queue = q
		}
	}
	if err := storage.ValidateQueueName(i.names.Queue(queue)); err != nil {
		return Result{}, fmt.Errorf("commands: QueueFor(%q) = %q: %w", raw.Type, queue, err)
	}
	st, err := i.statusStore(ctx)
	if err != nil {
		return Result{}, err
	}
	res := Result{ID: id, Queue: queue}
	nc := status.NewCommand{ID: id, Type: raw.Type, Params: params, CorrelationID: raw.CorrelationID, Queue: queue}
	// A store that can commit the issue batch and the enqueue together
	// (storage.Combiner, the embedded store) does both in one durable write:
	// there is no gap for the reconciler to close.
	cb, combined := i.st.(storage.Combiner)
	if combined {
		err = st.CreateAndEnqueue(ctx, nc, cb, i.names.Queue(queue), Envelope{ID: id, Type: raw.Type}.Marshal())
	} else {
		err = st.Create(ctx, nc)
	}
	switch {
	case errors.Is(err, storage.ErrExists):
		rec, lerr := st.Load(ctx, id)
		if lerr != nil {
			return Result{}, fmt.Errorf("commands: command %s exists but cannot be read: %w", id, lerr)
		}
		if rec.Type != raw.Type || rec.ParamsHash != status.HashParams(params) || rec.CorrelationID != raw.CorrelationID {
			return Result{}, fmt.Errorf("%w: command %s exists as %s with other params or another correlation ID; use a new ID for a different command", ErrIDConflict, id, rec.Type)
		}
		res.Existing, res.Queue = true, rec.Queue
		if !combined && rec.Status.Status == status.Pending && rec.Attempts == 0 {
			// The first issue may have stopped between storing the command
			// and enqueueing it (a crashed process, a failed enqueue), and
			// a caller retrying is exactly that case: make sure a message
			// exists. If one does, the duplicate is harmless: a processor
			// never runs a command twice at once, and deletes a message
			// whose command is already final without running it.
			i.retry.forget(res.ID)
			return res, i.enqueue(ctx, st, res.ID, rec.Type, rec.Queue)
		}
		return res, nil
	case errors.Is(err, status.ErrParamsTooLarge):
		return Result{}, fmt.Errorf("%w: %w", ErrParamsTooLarge, err)
	case err != nil:
		return Result{}, fmt.Errorf("commands: store command %s: %w", id, err)
	}
	if combined {
		if i.opts.Notify != nil {
			i.opts.Notify(queue)
		}
		return res, nil
	}
	return res, i.enqueue(ctx, st, id, raw.Type, queue)
}

// enqueue puts the message of a stored command on its queue. If that fails
// it marks the command for the reconciler and returns ErrEnqueueFailed (the
// command is accepted); if the marker cannot be written either it returns
// ErrNotAccepted. Either way the background retrier keeps trying.
func (i *Issuer) enqueue(ctx context.Context, st *status.Store, id, cmdType, queue string) error {
	marked, err := enqueueOrMark(ctx, st, i.queue, id, cmdType, queue)
	switch {
	case err == nil:
		if i.opts.Notify != nil {
			i.opts.Notify(queue)
		}
		return nil
	case marked:
		i.retry.add(id, cmdType, queue, true)
		return fmt.Errorf("%w: command %s is stored and marked; the reconciler will enqueue it: %w", ErrEnqueueFailed, id, err)
	default:
		i.retry.add(id, cmdType, queue, false)
		return fmt.Errorf("%w: command %s is stored but neither enqueued nor marked for the reconciler; issue it again with the same ID: %w", ErrNotAccepted, id, err)
	}
}

// enqueueOrMark puts the message of the stored command id on the logical
// queue (opened with open); if that fails it marks the command unqueued for
// the reconciler. It returns nil once enqueued; otherwise the enqueue error
// (joined with the marker's) and whether the marker was written.
func enqueueOrMark(ctx context.Context, st *status.Store, open func(context.Context, string) (storage.Queue, error), id, cmdType, queue string) (marked bool, err error) {
	if err = enqueueOnly(ctx, open, id, cmdType, queue); err == nil {
		return false, nil
	}
	if merr := st.MarkUnqueued(ctx, id, queue); merr != nil {
		return false, errors.Join(err, merr)
	}
	return true, err
}

// enqueueOnly puts the message of the stored command id on the logical queue.
func enqueueOnly(ctx context.Context, open func(context.Context, string) (storage.Queue, error), id, cmdType, queue string) error {
	q, err := open(ctx, queue)
	if err == nil {
		_, err = q.Enqueue(ctx, Envelope{ID: id, Type: cmdType}.Marshal(), 0, storage.NoExpiry)
	}
	return err
}
