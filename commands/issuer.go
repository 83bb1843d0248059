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
	// as long as the process lives (Close stops it). Each retry loads the
	// command first and stops once it started (the failed enqueue had
	// landed after all); otherwise it is a recovery enqueue (a requeued
	// event, a message delayed by RecoveryDelay). A command it could not
	// mark for the reconciler is marked as soon as storage answers. Default
	// 1 s; negative disables the retries.
	EnqueueRetry time.Duration
	// RecoveryDelay returns the visibility delay of a recovery enqueue of a
	// command type (a re-issue of a pending, never-started command, a
	// background retry): at least the type's lease and the processors'
	// StartedWriteDelay, so that a first message that may exist after all
	// (an enqueue whose answer was lost) has been started — its `started`
	// written — or finished before the second becomes visible (see
	// docs/lifecycle.md, "Duplicate messages"). nil, or a result ≤ 0:
	// status.DefaultRecoveryDelay (30 s, the default lease). Pass
	// (*processor.Processor).RecoveryDelay when the processor runs in the
	// same process; an API-only server with types whose lease is longer
	// than 30 s should pass their leases.
	RecoveryDelay func(cmdType string) time.Duration
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

// IssuerWorker is the Worker recorded on the requeued events of the
// Issuer's recovery enqueues (re-issues and background retries).
const IssuerWorker = "issuer"

// recoveryDelay returns the visibility delay of a recovery enqueue of cmdType.
func (i *Issuer) recoveryDelay(cmdType string) time.Duration {
	return recoveryDelay(i.opts.RecoveryDelay, cmdType)
}

func recoveryDelay(f func(string) time.Duration, cmdType string) time.Duration {
	if f != nil {
		if d := f(cmdType); d > 0 {
			return d
		}
	}
	return status.DefaultRecoveryDelay
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
// one enqueue (sent once, with no transport retries); re-issuing an existing
// ID costs one failed batch and one point read, plus, while the command is
// pending and never started, a recovery: one batch (a requeued event) and
// one enqueue delayed by Options.RecoveryDelay.
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
			// exists, as a recovery (a requeued event, then a message
			// delayed by the recovery delay). If the first message exists
			// after all, the second is harmless (docs/lifecycle.md,
			// "Duplicate messages").
			i.retry.forget(res.ID)
			return res, i.recover(ctx, st, rec, "re-issued while pending and never started: enqueued again")
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

// enqueue puts the first message of a stored command on its queue, with
// no transport retries (enqueueOnly). If that fails it marks the command
// for the reconciler and returns ErrEnqueueFailed (the command is
// accepted); if the marker cannot be written either it returns
// ErrNotAccepted. Either way the background retrier keeps trying.
func (i *Issuer) enqueue(ctx context.Context, st *status.Store, id, cmdType, queue string) error {
	err := enqueueOnly(ctx, i.queue, id, cmdType, queue, 0)
	if err == nil {
		if i.opts.Notify != nil {
			i.opts.Notify(queue)
		}
		return nil
	}
	return i.failed(ctx, st, id, cmdType, queue, err)
}

// recover re-enqueues the stored command rec (pending, never started) as a
// recovery (see requeue). If that fails it marks the command, as enqueue.
func (i *Issuer) recover(ctx context.Context, st *status.Store, rec *status.Record, note string) error {
	// Again on a conflict with another recovery: the client was told it
	// is accepted only once a message is on its way.
	_, _, err := requeue(ctx, st, i.queue, rec, IssuerWorker, note, i.recoveryDelay(rec.Type), true)
	if err == nil {
		if i.opts.Notify != nil {
			i.opts.Notify(rec.Queue)
		}
		return nil
	}
	return i.failed(ctx, st, rec.ID, rec.Type, rec.Queue, err)
}

// failed handles a failed enqueue of a stored command: mark it for the
// reconciler (ErrEnqueueFailed) or, when the marker fails too,
// ErrNotAccepted; the background retrier keeps trying either way.
func (i *Issuer) failed(ctx context.Context, st *status.Store, id, cmdType, queue string, err error) error {
	if merr := st.MarkUnqueued(ctx, id, queue); merr != nil {
		i.retry.add(id, cmdType, queue, false)
		return fmt.Errorf("%w: command %s is stored but neither enqueued nor marked for the reconciler; issue it again with the same ID: %w", ErrNotAccepted, id, errors.Join(err, merr))
	}
	i.retry.add(id, cmdType, queue, true)
	return fmt.Errorf("%w: command %s is stored and marked; the reconciler will enqueue it: %w", ErrEnqueueFailed, id, err)
}

// enqueueOnly puts the message of the stored command id on the logical
// queue, visible after delay. It is sent with no transport retries
// (storage.WithCallBudget with 0 retries; a per-try timeout in ctx is
// kept): a try whose answer was lost after the message landed is a failed
// enqueue, which the caller recovers from (marker, background retry,
// reconciler), never a silent second message.
func enqueueOnly(ctx context.Context, open func(context.Context, string) (storage.Queue, error), id, cmdType, queue string, delay time.Duration) error {
	q, err := open(ctx, queue)
	if err == nil {
		b, _ := storage.CallBudgetFrom(ctx)
		_, err = q.Enqueue(storage.WithCallBudget(ctx, b.PerTry, 0), Envelope{ID: id, Type: cmdType}.Marshal(), delay, storage.NoExpiry)
	}
	return err
}

// requeue is a recovery enqueue of the stored command rec, which is
// pending and has never started: a message may exist for it after all (an
// enqueue whose answer was lost, another recovery). It appends a requeued
// event by `by` (conditional on rec's ETag; on a conflict, someone else
// wrote the command: one that started is left alone, nothing done, no
// error; one still pending — another recovery's requeued — is requeued
// once more with again, or left alone without), then
// enqueues its message with a visibility delay of delay and no transport
// retries. The requeued event makes the processor claim the command with
// its started event before running it (a conditional write), so that of
// two messages only one runs it; the delay lets a first message that is
// being handled write its started first, so that the second is deleted
// unrun. See docs/lifecycle.md, "Duplicate messages". Cost: 1 batch + 1
// enqueue (+ 1 point read on a conflict).
func requeue(ctx context.Context, st *status.Store, open func(context.Context, string) (storage.Queue, error), rec *status.Record, by, note string, delay time.Duration, again bool) (requeued, enqueued bool, err error) {
	for try := 0; ; try++ {
		err = st.Append(ctx, rec, status.Event{Kind: status.Requeued, Worker: by, Note: note})
		if err == nil {
			break
		}
		if !errors.Is(err, storage.ErrConflict) || try > 0 {
			return false, false, fmt.Errorf("commands: record the requeue of %s: %w", rec.ID, err)
		}
		var ce *status.ConflictError
		if !errors.As(err, &ce) || ce.Current == nil {
			return false, false, fmt.Errorf("commands: record the requeue of %s: %w", rec.ID, err)
		}
		if cur := ce.Current; cur.Status.Status != status.Pending || cur.Attempts != 0 || !again {
			return false, false, nil // started (or finished) meanwhile: it has a message; or another recovery's
		}
		rec = ce.Current
	}
	if err := enqueueOnly(ctx, open, rec.ID, rec.Type, rec.Queue, delay); err != nil {
		return true, false, err
	}
	return true, true, nil
}
