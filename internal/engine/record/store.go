package record

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cmdq-dev/cmdq/internal/engine/days"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/storage"
)

// ErrFinal: Append or Poison refused to write an attempt's event (started,
// step_completed, failed, deferred, completed, poisoned, lease_lost) to a command
// whose loaded projection is final (completed, poisoned, discarded): the
// attempt is over and must write nothing more. Two events stay allowed: an
// operator's requeued or discarded on a poisoned command, and the
// lease_lost of the attempt that completed the command (its lease ended
// before its message was deleted).
var ErrFinal = errors.New("cmdq: command is final")

// NewCommand is what Store.Create writes.
type NewCommand struct {
	// ID is the command ID (lowercase canonical UUID; validated by the caller).
	ID string
	// Type is the command type name.
	Type string
	// Params is the JSON parameters (compact). nil is stored as "{}".
	Params []byte
	// CorrelationID is the caller's correlation ID ("" = none).
	CorrelationID string
	// Queue is the logical queue (required; the issuer routes it).
	Queue string
	// IssuedAt is the issue time (zero = now); stored in UTC, millisecond precision.
	IssuedAt time.Time
	// RunAt, when not zero, is the run-at time the command was issued
	// with (UTC, millisecond precision): it starts no earlier.
	RunAt time.Time
	// TraceParent and TraceState are the W3C trace context of the span
	// that issued the command ("" = none): stored on the command row
	// (properties TraceParent and TraceState, written only when set) and
	// carried by the issue's own message, so that every attempt's span
	// joins the issuing trace.
	TraceParent, TraceState string
	// OrderKey and OrderSeq, when OrderKey is set, are the command's order
	// key and its place in the key's order (shared.AppendOrder, written
	// before the command): stored as properties OrderKey and OrderSeq.
	OrderKey string
	OrderSeq int64
}

// Record is a loaded command: its status, its parameters and the concurrency
// token for the next write.
type Record struct {
	model.Status
	// Params is the command's JSON parameters.
	Params []byte
	// ParamsHash is the hex SHA-256 of Params (for idempotent re-issue).
	ParamsHash string
	// IssuedAt is the issue time (UTC).
	IssuedAt time.Time
	// ETag is the ETag of the command row (RowCommand); Append and Poison
	// write only if it still matches.
	ETag string
	// EventSeq is the sequence number of the last event.
	EventSeq int64
	// Settled is the last attempt whose outcome (failed, completed,
	// poisoned or lease_lost) is recorded (see layout.Settle); 0 after created and
	// requeued.
	Settled int
	// WriteID identifies the last write that landed on the command (the
	// issue batch or an Append): Append recognises its own write by it when
	// a transport retry meets the write's own effect.
	WriteID string
	// Owner is the ID of the queue message whose delivery started the
	// command's current attempt (the last started event's MessageID; ""
	// when pending, or when that event carried none). That message is
	// deleted only once the command is final, so a delivery of another
	// message for a started command is a duplicate (see layout.Own).
	Owner string
	// TraceParent and TraceState are the W3C trace context the command
	// was issued in ("" = none; see NewCommand).
	TraceParent, TraceState string
	// OrderSeq is the command's place in its order key's order
	// (Status.OrderKey; 0 when it has none).
	OrderSeq int64
	// StartedAt and StartedSeq are the start of the completing attempt
	// when the command row holds its started and completed events
	// (layout.StartedAtProp; see implied); zero when it never did. Values
	// left from an earlier write mean nothing once StartedSeq is not
	// EventSeq-1.
	StartedAt  time.Time
	StartedSeq int64
	// CreatedInRow: the command row holds the created event
	// (layout.CreatedInRowProp).
	CreatedInRow bool
	// WrittenAt is when the command row's last write landed, by the
	// storage's clock (the row's Timestamp; zero on a record not read
	// from storage). A write that storage held is recorded with its
	// writer's decision time (Status.UpdatedAt) but lands later: rules
	// that count from a command's last write count from the later of the
	// two.
	WrittenAt time.Time

	// table is the table the command was loaded from (nil: the table
	// of its ID, see layout.Names.TableOf).
	table storage.Table
}

// DefaultRecoveryDelay is the visibility delay of a recovery enqueue (a
// message sent for a command that may have one already: a re-issue, a
// retried or reconciled enqueue, a repeated requeue) when the sender does
// not know the command type's lease: 30 s, the default lease. See
// docs/lifecycle.md, "Duplicate messages".
const DefaultRecoveryDelay = 30 * time.Second

// Options configures a Store or Reader. The zero value works.
type Options struct {
	// Now returns the current time (default time.Now). Times are stored in
	// UTC with millisecond precision.
	Now func() time.Time
	// Changed, when set, is called after every write of this Store that
	// changed a command (Append, AppendAndDelete, and so Poison, Discard
	// and Requeue), with the command's status after the write and the
	// events it wrote, numbered, oldest first (nil when the write was
	// recognised as landed after a conflict: the events are then not
	// known). It is the in-process change feed (cmdq.Client wakes its
	// watchers with it); it runs on the writer's goroutine and must not
	// block. Default nil.
	Changed func(st model.Status, events []model.Event)
	// RecoveryDelay returns the visibility delay of a recovery enqueue of a
	// command type (Enqueuer's re-issues, retries, reconciles and repeated
	// requeues): at least the type's lease and the processors'
	// StartedWriteDelay. nil, or a result <= 0: DefaultRecoveryDelay.
	RecoveryDelay func(cmdType string) time.Duration
	// Store and Names, when Store is set, route each command to the table
	// of its ID (its day table, or the base commands table: see
	// layout.Names.TableOf and docs/lifecycle.md, "Retention"). Open sets them;
	// a Store made by New without them keeps every command in the base
	// table.
	Store storage.Store
	Names layout.Names
	// Retention is how long final commands are kept (for the error of a
	// read of an expired command, and the sweeper's defaults). The zero
	// value is the defaults (DefaultRetention).
	Retention RetentionPolicy
}

// Store writes command records: Create (issue), Load, Append (lifecycle
// events) and Poison. It is safe for concurrent use.
type Store struct {
	commands, poison   storage.Table
	now                func() time.Time
	changed            func(model.Status, []model.Event)
	recovery           func(cmdType string) time.Duration
	tables             *days.Tables
	retention          RetentionPolicy
	*shared.Partitions // the shared partitions (package shared)
}

// New returns a Store on the commands and poison tables (see Names and
// OpenTables).
func New(commands, poison storage.Table, opts Options) *Store {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	s := &Store{commands: commands, poison: poison, now: now, changed: opts.Changed, recovery: opts.RecoveryDelay, retention: opts.Retention.WithDefaults(),
		Partitions: shared.New(commands, now)}
	s.tables = days.New(opts.Store, opts.Names, commands, now)
	return s
}

// RecoveryDelay returns the visibility delay of a recovery enqueue of
// cmdType: Options.RecoveryDelay's, or DefaultRecoveryDelay when it is nil
// or gives 0 or less.
func (s *Store) RecoveryDelay(cmdType string) time.Duration {
	if s.recovery != nil {
		if d := s.recovery(cmdType); d > 0 {
			return d
		}
	}
	return DefaultRecoveryDelay
}

// Open opens (creating if needed) the tables named by names on st and returns
// a Store on them.
func Open(ctx context.Context, st storage.Store, names layout.Names, opts Options) (*Store, error) {
	c, p, err := OpenTables(ctx, st, names)
	if err != nil {
		return nil, err
	}
	opts.Store, opts.Names = st, names
	return New(c, p, opts), nil
}

// OpenTables opens (creating if needed) the commands and poison tables named
// by names.
func OpenTables(ctx context.Context, st storage.Store, names layout.Names) (commands, poison storage.Table, err error) {
	if err := names.Validate(); err != nil {
		return nil, nil, err
	}
	commands, err = st.Table(ctx, names.CommandsTable())
	if err != nil {
		return nil, nil, fmt.Errorf("cmdq: open commands table %q: %w", names.CommandsTable(), err)
	}
	poison, err = st.Table(ctx, names.PoisonTable())
	if err != nil {
		return nil, nil, fmt.Errorf("cmdq: open poison table %q: %w", names.PoisonTable(), err)
	}
	return commands, poison, nil
}

// CommandsTable returns the commands table.
func (s *Store) CommandsTable() storage.Table { return s.commands }

// PoisonTable returns the poison table.
func (s *Store) PoisonTable() storage.Table { return s.poison }

// Tables returns the commands tables: the base table and the day tables,
// and which holds a command.
func (s *Store) Tables() *days.Tables { return s.tables }

func (s *Store) nowUTC() time.Time { return layout.Millis(s.now()) }

// HashParams returns the hex SHA-256 of params, as stored in ParamsHash.
func HashParams(params []byte) string {
	h := sha256.Sum256(params)
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], h[:])
	return string(out[:])
}

// ErrParamsTooLarge: the parameters do not fit in one entity (more than
// MaxParamsChunks × ParamsChunkUnits UTF-16 units). It wraps storage.ErrTooLarge.
var ErrParamsTooLarge = fmt.Errorf("%w: params exceed %d UTF-16 code units (%d properties of %d units: what one entity holds)",
	storage.ErrTooLarge, layout.MaxParamsChunks*layout.ParamsChunkUnits, layout.MaxParamsChunks, layout.ParamsChunkUnits)

// splitParams splits s into chunks of at most ParamsChunkUnits UTF-16 units,
// at rune boundaries (layout.SplitParams).
func splitParams(s string) ([]string, error) {
	chunks, ok := layout.SplitParams(s)
	if !ok {
		return nil, ErrParamsTooLarge
	}
	return chunks, nil
}

// Create writes a new command in one batch: the command row (the command
// and its pending projection) and the created event. If the ID exists, the error wraps
// storage.ErrExists. Params that do not fit in one entity give an error
// wrapping ErrParamsTooLarge (and storage.ErrTooLarge); nothing is written.
func (s *Store) Create(ctx context.Context, c NewCommand) error {
	_, err := s.CreateETag(ctx, c)
	return err
}

// CreateETag is Create returning the ETag of the new command row (what the
// issue's own message carries: FirstEnvelope).
//
// A taken ID costs one point read of the command row: when its write ID is
// this batch's, the batch was sent again by the driver's transport retries
// after its first try landed unanswered, and that is this create's success
// (the row's ETag is returned); otherwise the error is an *ExistsError
// carrying the stored command, so the caller need not read it again.
func (s *Store) CreateETag(ctx context.Context, c NewCommand) (etag string, err error) {
	wid := newWriteID()
	ops, err := s.createOps(c, wid)
	if err != nil {
		return "", err
	}
	tb, err := s.tables.ForWrite(ctx, c.ID)
	if err != nil {
		return "", createErr(c.ID, err)
	}
	etags, err := tb.Batch(ctx, c.ID, ops)
	if errors.Is(err, storage.ErrNotFound) && tb != s.commands {
		// The day table is gone (dropped by hand, or this handle is
		// older than a delete): create it again, once.
		if tb, err = s.tables.Recreate(ctx, c.ID); err == nil {
			etags, err = tb.Batch(ctx, c.ID, ops)
		}
	}
	if errors.Is(err, storage.ErrExists) {
		if cur, lerr := s.Load(ctx, c.ID); lerr == nil {
			if cur.WriteID == wid {
				return cur.ETag, nil // written by this batch's first try
			}
			return "", &ExistsError{Current: cur, Err: createErr(c.ID, err)}
		}
	}
	if err != nil {
		return "", createErr(c.ID, err)
	}
	return etags[0], nil
}

// ExistsError is the error of a create whose ID another command holds: it
// wraps storage.ErrExists and carries that command as stored (Current).
type ExistsError struct {
	Current *Record
	Err     error
}

func (e *ExistsError) Error() string { return e.Err.Error() }

func (e *ExistsError) Unwrap() error { return e.Err }

// CreateAndEnqueue is Create plus an enqueue of text on the storage queue
// named queue (e.g. "cmdq-commands"), both in one atomic write through cb
// (see storage.Combiner; the embedded store implements it): both happen or
// neither does. Errors are Create's; a failed enqueue wraps its own error.
// It costs one commit on the embedded store instead of two.
func (s *Store) CreateAndEnqueue(ctx context.Context, c NewCommand, cb storage.Combiner, queue, text string) error {
	ops, err := s.createOps(c, newWriteID())
	if err != nil {
		return err
	}
	tb, err := s.tables.ForWrite(ctx, c.ID)
	if err != nil {
		return createErr(c.ID, err)
	}
	_, _, err = cb.BatchEnqueue(ctx, tb.Name(), c.ID, ops, queue, text, 0, storage.NoExpiry)
	return createErr(c.ID, err)
}

// StampIssued returns c with IssuedAt set to the issue time as it will be
// stored (now, when zero; UTC, millisecond precision), so that the issue's
// own message can carry it.
func (s *Store) StampIssued(c NewCommand) NewCommand {
	if c.IssuedAt.IsZero() {
		c.IssuedAt = s.nowUTC()
	}
	c.IssuedAt = layout.Millis(c.IssuedAt)
	return c
}

// CreateOps returns the issue batch of a new command (see createOps), for
// a Combiner's BatchEnqueueMany. Errors as Create's.
func (s *Store) CreateOps(c NewCommand) ([]storage.BatchOp, error) {
	return s.createOps(c, newWriteID())
}

// CreateErr wraps the error of an issue batch of command id as Create does
// (storage.ErrExists for an existing ID).
func CreateErr(id string, err error) error { return createErr(id, err) }

// createErr wraps the error of the issue batch.
func createErr(id string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, storage.ErrExists):
		return fmt.Errorf("cmdq: command %s already exists: %w", id, err)
	case errors.Is(err, storage.ErrTooLarge) && !errors.Is(err, ErrParamsTooLarge):
		// The command row over the entity limit (the driver's check):
		// its params make it so.
		return fmt.Errorf("cmdq: create command %s: %w (%w)", id, ErrParamsTooLarge, err)
	default:
		return fmt.Errorf("cmdq: create command %s: %w", id, err)
	}
}

// createOps builds the issue batch, written by write wid: a:cmd (command +
// pending projection), which holds the created event
// (layout.CreatedInRowProp), or for a command with a run-at time a:cmd and
// the created event's row.
func (s *Store) createOps(c NewCommand, wid string) ([]storage.BatchOp, error) {
	if c.ID == "" {
		return nil, fmt.Errorf("%w: empty command ID", storage.ErrInvalidKey)
	}
	params := c.Params
	if len(params) == 0 {
		params = []byte("{}")
	}
	chunks, err := splitParams(string(params))
	if err != nil {
		return nil, fmt.Errorf("cmdq: create command %s: %w", c.ID, err)
	}
	queue := c.Queue
	if queue == "" {
		return nil, fmt.Errorf("%w: command %s has no queue (callers route it: cmdq.DefaultQueue unless declared)", storage.ErrInvalidArgument, c.ID)
	}
	issued := layout.Millis(c.IssuedAt)
	if c.IssuedAt.IsZero() {
		issued = s.nowUTC()
	}
	// One slice, sized for the command's properties and the projection's.
	n := 6 + len(chunks) + projectionSize(&model.Status{RunAt: c.RunAt}, false)
	if c.TraceParent != "" {
		n += 2
	}
	if c.OrderKey != "" {
		n += 2
	}
	props := appendCommand(make([]storage.Prop, 0, n), commandRow{
		Type: c.Type, ParamsHash: HashParams(params), IssuedAt: issued, CorrelationID: c.CorrelationID, Queue: queue,
		TraceParent: c.TraceParent, TraceState: c.TraceState, OrderKey: c.OrderKey, OrderSeq: c.OrderSeq,
	}, chunks)
	if !c.RunAt.IsZero() {
		c.RunAt = layout.Millis(c.RunAt)
	}
	st := model.Status{ID: c.ID, Type: c.Type, CorrelationID: c.CorrelationID, Queue: queue, TraceID: TraceIDOf(c.TraceParent), OrderKey: c.OrderKey}
	ev := layout.CreatedEvent(issued)
	ev.RunAt = c.RunAt
	layout.Apply(&st, ev)
	props = appendProjection(props, &st, 0, "", 1, wid)
	if c.RunAt.IsZero() {
		// The created event is the row's (layout.CreatedInRowProp).
		props = append(props, storage.BoolProp(layout.CreatedInRowProp, true))
		return []storage.BatchOp{{Kind: storage.OpInsert, Entity: storage.Entity{PartitionKey: c.ID, RowKey: layout.RowCommand, Props: props}}}, nil
	}
	// Not validated here: the driver validates the batch before it writes
	// anything (the storage contract), and createErr names a row too
	// large for what it is (the params: every other property's length is
	// bounded before the issue gets here).
	cmd := storage.Entity{PartitionKey: c.ID, RowKey: layout.RowCommand, Props: props}
	ops := []storage.BatchOp{
		{Kind: storage.OpInsert, Entity: cmd},
		{Kind: storage.OpInsert, Entity: eventEntity(c.ID, ev, wid)},
	}
	return ops, nil
}

// commandRow is the command's own part of its row, written once by the
// issue batch.
type commandRow struct {
	Type, ParamsHash, CorrelationID, Queue string
	IssuedAt                               time.Time
	TraceParent, TraceState                string
	OrderKey                               string
	OrderSeq                               int64
}

// appendCommand appends the command's own properties to props: Type,
// ParamsHash, IssuedAt, CorrelationID, Queue; TraceParent and TraceState,
// each only when set (a command issued outside a trace adds nothing to its
// row); OrderKey and OrderSeq when it has an order key; the parameters'
// chunks.
func appendCommand(props []storage.Prop, c commandRow, chunks []string) []storage.Prop {
	props = append(props,
		storage.StringProp("Type", c.Type),
		storage.StringProp("ParamsHash", c.ParamsHash),
		storage.TimeProp("IssuedAt", c.IssuedAt),
		storage.StringProp("CorrelationID", c.CorrelationID),
		storage.StringProp("Queue", c.Queue))
	if c.TraceParent != "" {
		props = append(props, storage.StringProp("TraceParent", c.TraceParent))
		if c.TraceState != "" {
			props = append(props, storage.StringProp("TraceState", c.TraceState))
		}
	}
	if c.OrderKey != "" {
		props = append(props, storage.StringProp("OrderKey", c.OrderKey), storage.Int64Prop("OrderSeq", c.OrderSeq))
	}
	for i, ch := range chunks {
		props = append(props, storage.StringProp(layout.ParamsProp(i), ch))
	}
	return props
}

// newWriteID returns a random write ID (16 hex digits).
func newWriteID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	var out [16]byte
	hex.Encode(out[:], b[:])
	return string(out[:])
}

// projectionProps returns the projection's properties of the command row.
// Every one is always written (LastError "" clears it), so a Merge update
// replaces the whole projection and leaves the command's properties alone.
func projectionProps(st *model.Status, settled int, owner string, seq int64, writeID string, clearDeferrals bool, extra int) []storage.Prop {
	props := make([]storage.Prop, 0, projectionSize(st, clearDeferrals)+extra)
	props = appendProjection(props, st, settled, owner, seq, writeID)
	if clearDeferrals && !(st.Deferrals > 0 || st.Deferred) {
		props = appendDeferrals(props, st) // clear them (a Merge keeps what it does not write)
	}
	return props
}

// projectionSize is the number of properties appendProjection appends
// for st, or at most that (and the deferrals when clearDeferrals).
func projectionSize(st *model.Status, clearDeferrals bool) int {
	n := 11
	if !st.RunAt.IsZero() {
		n++
	}
	if len(st.Output) > 0 {
		n++
	}
	if clearDeferrals || st.Deferrals > 0 || st.Deferred {
		n += 2
	}
	return n
}

// appendProjection appends the projection's properties to props.
func appendProjection(props []storage.Prop, st *model.Status, settled int, owner string, seq int64, writeID string) []storage.Prop {
	props = append(props,
		storage.StringProp("WriteID", writeID),
		storage.Int32Prop("Settled", int32(settled)),
		storage.StringProp("Owner", owner),
		storage.StringProp("Status", string(st.State)),
		storage.Int32Prop("Attempts", int32(st.Attempts)),
		storage.Int32Prop("Step", int32(st.Step)),
		storage.StringProp("LastError", layout.Truncate(st.LastError, layout.MaxTextUnits)),
		storage.TimeProp("CreatedAt", layout.Millis(st.CreatedAt)),
		storage.TimeProp("UpdatedAt", layout.Millis(st.UpdatedAt)),
		storage.StringProp("Worker", layout.Truncate(st.Worker, layout.MaxTextUnits)),
		storage.Int64Prop("EventSeq", seq))
	if !st.RunAt.IsZero() {
		// Written only once set (a command issued without a run-at time
		// that never failed has none); it changes but is never cleared.
		props = append(props, storage.TimeProp("RunAt", layout.Millis(st.RunAt)))
	}
	if st.State == model.StateCompleted && len(st.Output) > 0 {
		// The completing attempt's recorded output (Run.SetOutput), in
		// the final batch: only a completed command has one.
		props = append(props, storage.StringProp("Output", string(st.Output)))
	}
	if st.Deferrals > 0 || st.Deferred {
		props = appendDeferrals(props, st)
	}
	return props
}

// putDeferrals writes the deferrals (RetryAfter) of the projection:
// Deferrals, the deferred events since the command was created or last
// requeued (the processor's ceiling check subtracts them from the attempt
// number), and Deferred, whether the last outcome is one. A command that
// never deferred has neither property; once written they are written by
// every later projection update (zeros after a requeue).
func appendDeferrals(props []storage.Prop, st *model.Status) []storage.Prop {
	return append(props, storage.Int32Prop("Deferrals", int32(st.Deferrals)), storage.BoolProp("Deferred", st.Deferred))
}

// projectionUpdate returns the Merge update of rec's command row to
// projection st. Long LastError and Worker texts are cut further when the
// merged row would exceed storage.MaxEntityBytes (parameters near the limit
// leave less room than MaxTextUnits).
func projectionUpdate(rec *Record, st *model.Status, settled int, owner string, seq int64, writeID string, started *model.Event) storage.Entity {
	props := projectionProps(st, settled, owner, seq, writeID, rec.Deferrals > 0 || rec.Deferred, 2)
	if started != nil {
		// The write's started and completed events, held by the row
		// (layout.StartedAtProp).
		props = append(props,
			storage.TimeProp(layout.StartedAtProp, started.Time),
			storage.Int64Prop(layout.StartedSeqProp, started.Seq))
	}
	row := storage.Entity{PartitionKey: rec.ID, RowKey: layout.RowCommand, Props: props}
	if smallRow(rec) {
		return row
	}
	over := storage.EntitySize(fullRow(rec, props)) - storage.MaxEntityBytes
	for _, name := range []string{"LastError", "Worker"} {
		if over <= 0 {
			break
		}
		i := slices.IndexFunc(props, func(p storage.Prop) bool { return p.Name == name })
		s := props[i].Str()
		units := layout.UTF16Units(s)
		keep := max(units-(over+1)/2, layout.UTF16Units(layout.TruncMark))
		props[i] = storage.StringProp(name, layout.Truncate(s, keep))
		over -= 2 * (units - layout.UTF16Units(props[i].Str()))
	}
	return row
}

// smallRow reports whether rec's command row is far below the entity size
// limit with any projection (UTF-8 bytes ≥ UTF-16 units, and the
// projection's texts are at most 2 × MaxTextUnits): its projection texts
// are never cut further.
func smallRow(rec *Record) bool {
	const slack = 64 * 1024
	return 2*(len(rec.Params)+len(rec.Type)+len(rec.CorrelationID)+len(rec.Queue)) < storage.MaxEntityBytes-slack
}

// fullRow is rec's whole command row as it would be with projection
// props: its command's properties (the parameters as stored) and props.
func fullRow(rec *Record, props []storage.Prop) storage.Entity {
	chunks, _ := splitParams(string(rec.Params)) // the stored chunks
	ps := appendCommand(make([]storage.Prop, 0, 9+len(chunks)+len(props)), commandRow{
		Type: rec.Type, ParamsHash: rec.ParamsHash, IssuedAt: rec.IssuedAt, CorrelationID: rec.CorrelationID, Queue: rec.Queue,
		TraceParent: rec.TraceParent, TraceState: rec.TraceState, OrderKey: rec.OrderKey, OrderSeq: rec.OrderSeq,
	}, chunks)
	ps = append(ps, props...)
	if rec.CreatedInRow {
		ps = append(ps, storage.BoolProp(layout.CreatedInRowProp, true))
	}
	return storage.Entity{PartitionKey: rec.ID, RowKey: layout.RowCommand, Props: ps}
}

func eventEntity(id string, e model.Event, writeID string) storage.Entity {
	// Room for a started row's CompletedAt (layout.CompletedAtProp).
	p := make([]storage.Prop, 0, 8)
	p = append(p,
		storage.StringProp("WriteID", writeID),
		storage.StringProp("Kind", string(e.Kind)),
		storage.TimeProp("Time", layout.Millis(e.Time)),
		storage.Int32Prop("Attempt", int32(e.Attempt)))
	put := func(name, v string, units int) {
		if v != "" {
			p = append(p, storage.StringProp(name, layout.Truncate(v, units)))
		}
	}
	put("Worker", eventWho(e), layout.MaxTextUnits)
	if e.Step != 0 {
		p = append(p, storage.Int32Prop("Step", int32(e.Step)))
	}
	put("Note", e.Note, layout.MaxTextUnits)
	put("Error", e.Error, layout.MaxTextUnits)
	put("Reason", e.Reason, layout.MaxTextUnits)
	put("Detail", e.Detail, layout.MaxDetailUnits)
	// A queue message ID is at most a few hundred characters (Azure: a
	// GUID; the embedded store: a UUID).
	put("MessageID", e.MessageID, layout.MaxTextUnits)
	if !e.RunAt.IsZero() {
		p = append(p, storage.TimeProp("RunAt", layout.Millis(e.RunAt)))
	}
	return storage.Entity{PartitionKey: id, RowKey: layout.EventRowKey(e.Seq), Props: p}
}

// completesStarted reports whether e is the plain completion of the
// attempt that started with prev, the event before it in the same append
// (so numbered one more): its row can be prev's
// (layout.CompletedAtProp), as nothing but its time differs.
func completesStarted(prev, e model.Event) bool {
	return prev.Kind == model.EventStarted && e.Kind == model.EventCompleted &&
		e.Attempt == prev.Attempt && e.Worker == prev.Worker && e.By == "" && e.Step == 0 && e.Note == "" &&
		e.Error == "" && e.Reason == "" && e.Detail == "" && e.MessageID == "" && e.RunAt.IsZero()
}

// eventWho is what an event row's Worker property holds: the processor of
// an attempt's event, or who requeued or discarded the command (Event.By):
// the kind tells which (data layout unchanged since Event.By was added).
func eventWho(e model.Event) string {
	if operatorEvent(e.Kind) {
		return e.By
	}
	return e.Worker
}

// operatorEvent reports whether kind is written by an operator, a
// program that cancels, or the reconciler (its row's Worker property is
// Event.By).
func operatorEvent(kind model.EventKind) bool {
	return kind == model.EventRequeued || kind == model.EventDiscarded || kind == model.EventCancelled
}

func validID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty command ID (%w)", model.ErrNotFound, storage.ErrInvalidKey)
	}
	return storage.ValidateKey("command ID", id)
}

func notFound(id string) error {
	return fmt.Errorf("%w: %s (%w)", model.ErrNotFound, id, storage.ErrNotFound)
}

// Load reads a command and its projection with one point read of its
// command row. A missing command gives an error wrapping ErrNotFound.
func (s *Store) Load(ctx context.Context, id string) (*Record, error) {
	e, tb, err := s.getRow(ctx, id)
	if err != nil {
		return nil, err
	}
	rec := decodeRecord(e)
	rec.table = tb
	return rec, nil
}

// getRow reads the command row of id and returns it with the table it is
// in: one point read of the ID's table (its day table, see layout.Names.TableOf);
// when the row is not there (the command was moved, or its day table
// dropped), one more of the base table. A command that is in neither and
// whose day is past retention gives an error wrapping model.ErrExpired
// (and ErrNotFound).
func (s *Store) getRow(ctx context.Context, id string) (storage.Entity, storage.Table, error) {
	if err := validID(id); err != nil {
		return storage.Entity{}, nil, err
	}
	day, hasDay, err := s.tables.ForRead(ctx, id)
	if err != nil {
		return storage.Entity{}, nil, fmt.Errorf("cmdq: load command %s: %w", id, err)
	}
	if day != nil {
		e, err := day.Get(ctx, id, layout.RowCommand)
		if err == nil {
			return e, day, nil
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return storage.Entity{}, nil, fmt.Errorf("cmdq: load command %s: %w", id, err)
		}
	}
	e, err := s.commands.Get(ctx, id, layout.RowCommand)
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			if hasDay {
				return storage.Entity{}, nil, s.goneErr(id)
			}
			return storage.Entity{}, nil, notFound(id)
		}
		return storage.Entity{}, nil, fmt.Errorf("cmdq: load command %s: %w", id, err)
	}
	return e, s.commands, nil
}

// tableOf returns the table rec lives in: the one it was loaded from, else
// its ID's table.
func (s *Store) tableOf(ctx context.Context, rec *Record) (storage.Table, error) {
	if rec.table != nil {
		return rec.table, nil
	}
	tb, _, err := s.tables.ForRead(ctx, rec.ID)
	if err != nil {
		return nil, err
	}
	if tb == nil {
		return s.commands, nil
	}
	return tb, nil
}

// DecodeStatus reads the status (identity and projection) from a command row.
func DecodeStatus(e storage.Entity) model.Status {
	return model.Status{
		ID:            e.PartitionKey,
		Type:          layout.StrProp(e, "Type"),
		State:         model.State(layout.StrProp(e, "Status")),
		Attempts:      int(layout.IntProp(e, "Attempts")),
		Step:          int(layout.IntProp(e, "Step")),
		LastError:     layout.StrProp(e, "LastError"),
		CreatedAt:     layout.TimeProp(e, "CreatedAt"),
		UpdatedAt:     layout.TimeProp(e, "UpdatedAt"),
		Worker:        layout.StrProp(e, "Worker"),
		CorrelationID: layout.StrProp(e, "CorrelationID"),
		Queue:         layout.StrProp(e, "Queue"),
		RunAt:         layout.TimeProp(e, "RunAt"),
		Output:        outputProp(e),
		TraceID:       TraceIDOf(layout.StrProp(e, "TraceParent")),
		OrderKey:      layout.StrProp(e, "OrderKey"),
		Deferrals:     int(layout.IntProp(e, "Deferrals")),
		Deferred:      layout.BoolProp(e, "Deferred"),
	}
}

// TraceIDOf returns the trace ID of a W3C traceparent
// ("00-<32 hex trace ID>-<16 hex span ID>-<flags>"), or "" for anything
// else.
func TraceIDOf(traceParent string) string {
	if len(traceParent) < 55 || traceParent[2] != '-' || traceParent[35] != '-' {
		return ""
	}
	return traceParent[3:35]
}

// outputProp reads the recorded output of a completed command ("" when
// none).
func outputProp(e storage.Entity) model.JSON {
	return model.JSON(layout.StrProp(e, "Output"))
}

// OutputFits returns nil when output fits in rec's command row beside its
// parameters (one entity holds about 1 MiB: parameters near the largest
// leave less room than model.MaxOutputBytes), else an error wrapping
// model.ErrOutputTooLarge that says how much room there is.
func OutputFits(rec *Record, output []byte) error {
	if len(output) == 0 {
		return nil
	}
	st := rec.Status
	st.State, st.Output = model.StateCompleted, model.JSON(output)
	row := fullRow(rec, appendProjection(nil, &st, rec.Settled, rec.Owner, rec.EventSeq+2, "0123456789abcdef"))
	if over := storage.EntitySize(row) - storage.MaxEntityBytes; over > 0 {
		return fmt.Errorf("%w: the output of %d bytes does not fit in command %s's row beside its %d bytes of parameters (%d bytes over what one entity holds); record a smaller output", model.ErrOutputTooLarge, len(output), rec.ID, len(rec.Params), over)
	}
	return nil
}

func decodeRecord(e storage.Entity) *Record {
	var params []byte
	for i := 0; i < layout.MaxParamsChunks; i++ {
		v, ok := e.Properties[layout.ParamsProp(i)].(string)
		if !ok {
			break
		}
		params = append(params, v...)
	}
	return &Record{
		Status:       DecodeStatus(e),
		Params:       params,
		ParamsHash:   layout.StrProp(e, "ParamsHash"),
		IssuedAt:     layout.TimeProp(e, "IssuedAt"),
		ETag:         e.ETag,
		EventSeq:     layout.IntProp(e, "EventSeq"),
		Settled:      settledProp(e),
		Owner:        layout.StrProp(e, "Owner"),
		WriteID:      layout.StrProp(e, "WriteID"),
		TraceParent:  layout.StrProp(e, "TraceParent"),
		TraceState:   layout.StrProp(e, "TraceState"),
		OrderSeq:     layout.IntProp(e, "OrderSeq"),
		StartedAt:    layout.TimeProp(e, layout.StartedAtProp),
		StartedSeq:   layout.IntProp(e, layout.StartedSeqProp),
		CreatedInRow: layout.BoolProp(e, layout.CreatedInRowProp),
		WrittenAt:    e.Timestamp,
	}
}

// implied returns the started and completed events rec's command row holds
// instead of an event row (layout.ImpliedEvents), or ok false.
func (rec *Record) implied() (started, completed model.Event, ok bool) {
	return layout.Implied(&rec.Status, rec.EventSeq, rec.Owner, rec.StartedSeq, rec.StartedAt)
}

// settledProp reads Settled; rows written before it existed derive it from
// the projection (a running attempt has no outcome yet).
func settledProp(e storage.Entity) int {
	if _, ok := e.Properties["Settled"]; ok {
		return int(layout.IntProp(e, "Settled"))
	}
	n := int(layout.IntProp(e, "Attempts"))
	if model.State(layout.StrProp(e, "Status")) == model.StateRunning {
		n--
	}
	return max(n, 0)
}

// Append writes events (1..MaxEventsPerAppend) and the updated projection in
// one batch, conditional on rec.ETag. Events get consecutive sequence numbers
// and, if their Time is zero, the current time. On success rec is updated in
// place (status, ETag, EventSeq); on failure it is unchanged. If the command
// was written since rec was loaded, the error wraps storage.ErrConflict (a
// *ConflictError whose Current is the command now): decide from that. An
// attempt's event on a command whose loaded projection is final is refused
// with an error wrapping ErrFinal, and nothing is written.
//
// Append is idempotent for its own write: each carries a write ID (stored in
// the command row and its events). When the batch fails with a conflict (the
// ETag moved, or the event rows exist) Append reloads the command (only in
// that case: one point read, and a second of the event row this write would
// have started at when later events exist); if its own write is what moved it — a transport
// retry of a batch whose first try landed and whose answer was lost — it
// succeeds with rec updated to the reloaded command, so the events are never
// appended twice. Otherwise the error wraps storage.ErrConflict and is a
// *ConflictError carrying the reloaded command.
func (s *Store) Append(ctx context.Context, rec *Record, events ...model.Event) error {
	ops, res, err := s.appendOps(rec, events)
	if err != nil {
		return err
	}
	tb, err := s.tableOf(ctx, rec)
	if err != nil {
		return fmt.Errorf("cmdq: append to command %s: %w", rec.ID, err)
	}
	etags, err := tb.Batch(ctx, rec.ID, ops)
	return s.appended(ctx, rec, res, etags, err)
}

// ConflictError is the error of an Append (or Poison, AppendAndDelete) that
// lost a race: the command was written by someone else since it was loaded.
// It wraps storage.ErrConflict. Current is the command as reloaded to find
// out (nil if that reload failed): decide from it without loading again.
type ConflictError struct {
	// ID is the command ID.
	ID string
	// Current is the command as it is now, or nil.
	Current *Record
	// Err is the batch's error.
	Err error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("cmdq: append to command %s: %v (%v)", e.ID, storage.ErrConflict, e.Err)
}

// Unwrap returns storage.ErrConflict and the batch's error.
func (e *ConflictError) Unwrap() []error { return []error{storage.ErrConflict, e.Err} }

// AppendAndDelete is Append plus the deletion of the queue message id with
// popReceipt from the storage queue named queue, in one durable write
// through cb (see storage.Combiner): the processor's final batch and message
// delete at the cost of one commit on the embedded store. The append
// decides: when it fails (err, as Append's) nothing is deleted; when it
// succeeds the delete's own failure (storage.ErrLeaseLost, ErrNotFound) is
// returned as deleteErr.
func (s *Store) AppendAndDelete(ctx context.Context, rec *Record, cb storage.Combiner, queue, id, popReceipt string, events ...model.Event) (deleteErr, err error) {
	ops, res, err := s.appendOps(rec, events)
	if err != nil {
		return nil, err
	}
	tb, err := s.tableOf(ctx, rec)
	if err != nil {
		return nil, fmt.Errorf("cmdq: append to command %s: %w", rec.ID, err)
	}
	etags, deleteErr, err := cb.BatchDelete(ctx, tb.Name(), rec.ID, ops, queue, id, popReceipt)
	return deleteErr, s.appended(ctx, rec, res, etags, err)
}

// appendResult is what an append makes of a record when it lands.
type appendResult struct {
	st      model.Status
	settled int
	owner   string
	seq     int64
	wid     string
	events  []model.Event // as written: numbered and timed
	// startedAt and startedSeq: the command row holds the write's
	// started and completed events (zero: it does not).
	startedAt  time.Time
	startedSeq int64
}

// appendOps builds the batch of an append: the events and the Merge update
// of the command row's projection, conditional on rec's ETag. It returns the
// new projection, event number and the write's ID.
func (s *Store) appendOps(rec *Record, events []model.Event) ([]storage.BatchOp, appendResult, error) {
	if rec == nil || rec.ID == "" {
		return nil, appendResult{}, fmt.Errorf("%w: Append needs a loaded record", storage.ErrInvalidArgument)
	}
	if len(events) == 0 || len(events) > layout.MaxEventsPerAppend {
		return nil, appendResult{}, fmt.Errorf("%w: Append takes 1-%d events, got %d", storage.ErrInvalidArgument, layout.MaxEventsPerAppend, len(events))
	}
	for _, e := range events {
		if !e.Kind.Valid() {
			return nil, appendResult{}, fmt.Errorf("%w: unknown event kind %q", storage.ErrInvalidArgument, e.Kind)
		}
	}
	if err := checkFinal(rec, events); err != nil {
		return nil, appendResult{}, err
	}
	wid := newWriteID()
	st := rec.Status
	settled, owner := rec.Settled, rec.Owner
	seq := rec.EventSeq
	ops := make([]storage.BatchOp, 0, len(events)+1)
	written := make([]model.Event, 0, len(events))
	now := s.nowUTC()
	// The event rows are appended under the command row's ETag: every
	// write that adds an event moves it, so while it matches no row
	// after EventSeq exists, and the driver need not read them to prove
	// it (storage.BatchOp.AssumeAbsent; the batch fails as a whole with
	// ErrConflict when the ETag moved). Without an ETag (IfMatchAny) the
	// driver checks.
	guarded := rec.ETag != ""
	if s0, c0, ok := rec.implied(); ok {
		// The command row holds its completing attempt's events
		// (layout.StartedAtProp) only while they are its last two: write
		// their row (the write's own ID) before anything follows them.
		if len(events) > layout.MaxEventsPerAppend-1 {
			return nil, appendResult{}, fmt.Errorf("%w: Append on command %s takes 1-%d events, got %d", storage.ErrInvalidArgument, rec.ID, layout.MaxEventsPerAppend-1, len(events))
		}
		row := eventEntity(rec.ID, s0, rec.WriteID)
		row.Props = append(row.Props, storage.TimeProp(layout.CompletedAtProp, c0.Time))
		ops = append(ops, storage.BatchOp{Kind: storage.OpInsert, Entity: row, AssumeAbsent: guarded})
	}
	for _, e := range events {
		seq++
		e.Seq = seq
		if e.Time.IsZero() {
			e.Time = now
		}
		e.Time = layout.Millis(e.Time)
		// The history reads in order: no event is older than the one
		// before it (clocks of different workers may disagree).
		if e.Time.Before(st.UpdatedAt) {
			e.Time = st.UpdatedAt
		}
		layout.Apply(&st, e)
		settled = layout.Settle(settled, e)
		owner = layout.Own(owner, e)
		if n := len(written); n > 0 && completesStarted(written[n-1], e) {
			// One row for both (layout.CompletedAtProp).
			row := &ops[len(ops)-1].Entity
			row.Props = append(row.Props, storage.TimeProp(layout.CompletedAtProp, e.Time))
		} else {
			ops = append(ops, storage.BatchOp{Kind: storage.OpInsert, Entity: eventEntity(rec.ID, e, wid), AssumeAbsent: guarded})
		}
		written = append(written, e)
	}
	var started *model.Event
	if len(ops) == 1 && impliable(rec, &st, owner, seq, written) {
		// A start and its completion: the command row holds both
		// (layout.StartedAtProp), no event row.
		started = &written[0]
		ops = ops[:0]
	}
	// Merge: the command's own properties (params, …) are neither resent
	// nor dropped; every projection property is written.
	ops = append(ops, storage.BatchOp{Kind: storage.OpUpdate, Entity: projectionUpdate(rec, &st, settled, owner, seq, wid, started), Mode: storage.Merge, IfMatch: etagOrAny(rec.ETag)})
	res := appendResult{st: st, settled: settled, owner: owner, seq: seq, wid: wid, events: written}
	if started != nil {
		res.startedAt, res.startedSeq = started.Time, started.Seq
	}
	return ops, res, nil
}

// impliable reports whether written, the events of one append that leaves
// the projection st, owner and last event number seq, are a started event
// and its plain completion that the command row can hold instead of an
// event row (layout.Implied gives them back exactly as written).
func impliable(rec *Record, st *model.Status, owner string, seq int64, written []model.Event) bool {
	if len(written) != 2 || !smallRow(rec) {
		return false
	}
	s, c := written[0], written[1]
	s0, c0, ok := layout.Implied(st, seq, owner, s.Seq, s.Time)
	return ok && sameEvent(s, s0) && sameEvent(c, c0) &&
		layout.Truncate(s.Worker, layout.MaxTextUnits) == s.Worker &&
		layout.Truncate(s.MessageID, layout.MaxTextUnits) == s.MessageID
}

// sameEvent reports whether a and b are the same event.
func sameEvent(a, b model.Event) bool {
	return a.Seq == b.Seq && a.Kind == b.Kind && a.Time.Equal(b.Time) && a.Attempt == b.Attempt &&
		a.Worker == b.Worker && a.By == b.By && a.Step == b.Step && a.Note == b.Note && a.Error == b.Error &&
		a.Reason == b.Reason && a.Detail == b.Detail && a.MessageID == b.MessageID && a.RunAt.Equal(b.RunAt)
}

// checkFinal refuses events that would be written on top of a final
// command (see ErrFinal). Each event is checked against the projection as
// the events before it in the same append leave it.
func checkFinal(rec *Record, events []model.Event) error {
	st := rec.Status
	for _, e := range events {
		if st.State.Final() && !allowedOnFinal(&st, e) {
			return fmt.Errorf("%w: command %s is %s; a %s event (attempt %d, worker %q) is not written on top of it: the attempt that wants to write it is over (a processor deletes its message; an operator reloads the command)",
				ErrFinal, rec.ID, st.State, e.Kind, e.Attempt, e.Worker)
		}
		layout.Apply(&st, e)
	}
	return nil
}

// allowedOnFinal reports whether e may follow the final projection st: an
// operator's requeued or discarded on a poisoned command, or the lease_lost
// of the attempt that completed it (written by its own worker).
func allowedOnFinal(st *model.Status, e model.Event) bool {
	switch e.Kind {
	case model.EventRequeued, model.EventDiscarded:
		return st.State == model.StatePoisoned
	case model.EventLeaseLost:
		return st.State == model.StateCompleted && e.Attempt == st.Attempts && e.Worker == st.Worker
	}
	return false
}

// appended finishes an append (res): on success it updates rec in
// place. On a conflict it finds out whether the write landed after all.
func (s *Store) appended(ctx context.Context, rec *Record, res appendResult, etags []string, err error) error {
	wid := res.wid
	if err == nil {
		rec.Status = res.st
		rec.Settled = res.settled
		rec.Owner = res.owner
		rec.EventSeq = res.seq
		rec.ETag = etags[len(etags)-1]
		rec.WriteID = wid
		if res.startedSeq > 0 {
			rec.StartedAt, rec.StartedSeq = res.startedAt, res.startedSeq
		}
		s.notify(rec.Status, res.events)
		return nil
	}
	if !errors.Is(err, storage.ErrConflict) && !errors.Is(err, storage.ErrExists) &&
		!(errors.Is(err, storage.ErrNotFound) && s.tables.Routed()) {
		return fmt.Errorf("cmdq: append to command %s: %w", rec.ID, err)
	}
	// (With day tables, a command row gone from its table was moved to the
	// base table by retention: the reload finds it there.)
	// The ETag moved or the event rows exist: someone wrote — maybe this
	// very write, whose answer was lost and whose retry met its effect.
	cur, lerr := s.Load(ctx, rec.ID)
	if lerr != nil {
		return &ConflictError{ID: rec.ID, Err: err}
	}
	if s.landed(ctx, cur, wid, rec.EventSeq+1) {
		*rec = *cur
		s.notify(rec.Status, nil)
		return nil
	}
	return &ConflictError{ID: rec.ID, Current: cur, Err: err}
}

// landed reports whether write wid, whose first event is number first, is in
// the command cur: it is the last write (cur's WriteID), or a later write
// followed it (one point read of event first).
func (s *Store) landed(ctx context.Context, cur *Record, wid string, first int64) bool {
	if cur.WriteID == wid {
		return true
	}
	if cur.EventSeq < first {
		return false
	}
	tb, err := s.tableOf(ctx, cur)
	if err != nil {
		return false
	}
	e, err := tb.Get(ctx, cur.ID, layout.EventRowKey(first))
	return err == nil && layout.StrProp(e, "WriteID") == wid
}

// notify passes a landed write to Options.Changed.
func (s *Store) notify(st model.Status, events []model.Event) {
	if s.changed != nil {
		s.changed(st, events)
	}
}

func etagOrAny(etag string) string {
	if etag == "" {
		return storage.IfMatchAny
	}
	return etag
}

// PoisonEntity returns the poison table's entry p (one row per command,
// PartitionKey the command ID, RowKey "").
func PoisonEntity(p model.PoisonEntry) storage.Entity {
	return storage.Entity{PartitionKey: p.CommandID, RowKey: "", Properties: map[string]any{
		"CommandID":     p.CommandID,
		"Type":          p.Type,
		"DequeueCount":  p.DequeueCount,
		"Reason":        layout.Truncate(p.Reason, layout.MaxTextUnits),
		"LastError":     layout.Truncate(p.LastError, layout.MaxTextUnits),
		"PoisonedAt":    layout.Millis(p.PoisonedAt),
		"Queue":         p.Queue,
		"Worker":        layout.Truncate(p.Worker, layout.MaxTextUnits),
		"Attempts":      int32(p.Attempts),
		"ParamsPreview": p.ParamsPreview,
	}}
}

// paramsPreview returns the start of compact JSON params, at most
// model.PoisonParamsPreview bytes, cut at a character boundary (with
// "…" when cut).
func paramsPreview(params []byte) string {
	if len(params) <= model.PoisonParamsPreview {
		return strings.ToValidUTF8(string(params), "")
	}
	cut := params[:model.PoisonParamsPreview-len("…")]
	for len(cut) > 0 && !utf8.Valid(cut) {
		cut = cut[:len(cut)-1]
	}
	return string(cut) + "…"
}

// DecodePoison reads a poison table entry (PoisonEntity).
func DecodePoison(e storage.Entity) model.PoisonEntry {
	id := layout.StrProp(e, "CommandID")
	if id == "" {
		id = e.PartitionKey
	}
	return model.PoisonEntry{
		CommandID:     id,
		Type:          layout.StrProp(e, "Type"),
		DequeueCount:  layout.IntProp(e, "DequeueCount"),
		Reason:        layout.StrProp(e, "Reason"),
		LastError:     layout.StrProp(e, "LastError"),
		PoisonedAt:    layout.TimeProp(e, "PoisonedAt"),
		Queue:         layout.StrProp(e, "Queue"),
		Worker:        layout.StrProp(e, "Worker"),
		Attempts:      int(layout.IntProp(e, "Attempts")),
		ParamsPreview: layout.StrProp(e, "ParamsPreview"),
	}
}

// Poison records a poisoned command: it upserts the poison-table entry, then
// appends events (e.g. a pending started and a failed event) followed by the
// poisoned event (built from entry) in one conditional batch. Missing entry
// fields (CommandID, Type, Queue, PoisonedAt) are filled from rec and the
// clock. If the batch fails, the entry is removed again unless the command
// was poisoned by someone else meanwhile. Cost: 1 upsert + 1 batch.
//
// A record whose projection is final is refused (ErrFinal) before anything
// is written. The entry is written first so that a poisoned command is never missing
// from the poison table (operators find it); a leftover entry of a command
// that is not poisoned is cleaned up by Requeue or Discard.
func (s *Store) Poison(ctx context.Context, rec *Record, entry model.PoisonEntry, events ...model.Event) error {
	if rec == nil || rec.ID == "" {
		return fmt.Errorf("%w: Poison needs a loaded record", storage.ErrInvalidArgument)
	}
	entry.CommandID = rec.ID
	if entry.Type == "" {
		entry.Type = rec.Type
	}
	if entry.Queue == "" {
		entry.Queue = rec.Queue
	}
	if entry.PoisonedAt.IsZero() {
		entry.PoisonedAt = s.nowUTC()
	}
	entry.PoisonedAt = layout.Millis(entry.PoisonedAt)
	if err := checkFinal(rec, append(append([]model.Event(nil), events...), model.Event{Kind: model.EventPoisoned, Attempt: int(entry.DequeueCount), Worker: entry.Worker})); err != nil {
		return err // before the entry is written: a final command gets none
	}
	// The attempts as the command will say once poisoned, and the start of
	// its parameters: what the poison list shows without reading the
	// commands.
	proj := rec.Status
	for _, e := range events {
		layout.Apply(&proj, e)
	}
	entry.Attempts = proj.Attempts
	if entry.ParamsPreview == "" {
		entry.ParamsPreview = paramsPreview(rec.Params)
	}
	if entry.LastError == "" {
		for _, e := range events {
			if e.Error != "" {
				entry.LastError = e.Error
			}
		}
		if entry.LastError == "" {
			entry.LastError = rec.LastError
		}
	}
	if _, err := s.poison.Upsert(ctx, PoisonEntity(entry), storage.Replace); err != nil {
		return fmt.Errorf("cmdq: write poison entry for command %s: %w", rec.ID, err)
	}
	evs := make([]model.Event, 0, len(events)+1)
	for _, e := range events {
		if e.Time.IsZero() {
			e.Time = entry.PoisonedAt
		}
		evs = append(evs, e)
	}
	evs = append(evs, model.Event{
		Kind: model.EventPoisoned, Time: entry.PoisonedAt, Attempt: int(entry.DequeueCount),
		Worker: entry.Worker, Reason: entry.Reason, Error: entry.LastError,
	})
	if err := s.Append(ctx, rec, evs...); err != nil {
		var ce *ConflictError
		cur := (*Record)(nil)
		if errors.As(err, &ce) && ce.Current != nil {
			cur = ce.Current
		} else if c, lerr := s.Load(ctx, rec.ID); lerr == nil {
			cur = c
		}
		if cur != nil && cur.Status.State != model.StatePoisoned {
			_ = s.poison.Delete(ctx, rec.ID, "", storage.IfMatchAny)
		}
		return err
	}
	return nil
}

// MarkUnqueued records that the command id was stored but its enqueue failed
// (an upsert into partition UnqueuedPartition, property Queue); the
// reconciler re-enqueues it. Over several accounts the marker goes to the
// command's account, or the next one that answers (package shared).
func (s *Store) MarkUnqueued(ctx context.Context, id, queue string) error {
	if err := validID(id); err != nil {
		return err
	}
	e := storage.Entity{PartitionKey: layout.UnqueuedPartition, RowKey: id, Properties: map[string]any{
		"Queue":    queue,
		"MarkedAt": s.nowUTC(),
	}}
	var err error
	if reps := s.Replicas(); reps != nil {
		err = shared.ToOne(reps, storage.ReplicaOf(s.commands, id), func(tb storage.Table) error {
			_, err := tb.Upsert(ctx, e, storage.Replace)
			return err
		})
	} else {
		_, err = s.commands.Upsert(ctx, e, storage.Replace)
	}
	if err != nil {
		return fmt.Errorf("cmdq: mark command %s unqueued: %w", id, err)
	}
	return nil
}

// ClearUnqueued removes the reconciler marker of command id (one delete,
// one per account over several; a missing marker is not an error): its
// message was enqueued after all.
func (s *Store) ClearUnqueued(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	if reps := s.Replicas(); reps != nil {
		if err := shared.DeleteAll(ctx, reps, layout.UnqueuedPartition, id); err != nil {
			return fmt.Errorf("cmdq: clear unqueued marker of command %s: %w", id, err)
		}
		return nil
	}
	if err := s.commands.Delete(ctx, layout.UnqueuedPartition, id, storage.IfMatchAny); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("cmdq: clear unqueued marker of command %s: %w", id, err)
	}
	return nil
}

// FirstRecord builds the record of a command as its issue left it (pending,
// attempts 0, step 0, event sequence 1, the ETag) from the issue's
// own message env (env.First.Usable()): what Load would return before
// anyone else wrote the command. Every write on it is conditional on that
// ETag, so a command written since makes the write conflict and the writer
// decide from the command as it is.
func FirstRecord(env layout.Envelope) *Record {
	f := env.First
	issued := layout.Millis(f.IssuedAt)
	st := model.Status{ID: env.ID, Type: env.Type, CorrelationID: f.CorrelationID, Queue: f.Queue, TraceID: TraceIDOf(f.TraceParent), OrderKey: f.OrderKey}
	created := layout.CreatedEvent(issued)
	created.RunAt = f.RunAt
	layout.Apply(&st, created)
	params := append([]byte(nil), f.Params...)
	// CreatedInRow stays false: the message does not say which version
	// issued it, and the property matters only to the size check of a
	// row near the entity limit, which a command whose parameters ride in
	// its message (at most MaxFirstParamsBytes) never is.
	return &Record{Status: st, Params: params, ParamsHash: HashParams(params), IssuedAt: issued, ETag: f.ETag, EventSeq: 1,
		TraceParent: f.TraceParent, TraceState: f.TraceState, OrderSeq: f.OrderSeq}
}
