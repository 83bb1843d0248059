// Package storage defines the queue and table contract that every cmdq storage
// driver implements, and the errors callers branch on.
//
// The semantics are Azure Storage's (Queue service and Table service). The
// embedded driver (storage/embedded) reproduces them in a local data directory and
// the Azure driver (storage/azure) maps them onto azqueue and aztables; both run
// the conformance suite in storage/storagetest, so everything above this package
// is written once.
//
// A driver never knows about commands: it stores opaque message text and
// entities with typed properties.
package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors. Drivers wrap them with %w and add detail (the service's error
// code, the limit that was exceeded); callers test with errors.Is.
var (
	// ErrNotFound: the queue message, entity, queue or table does not exist.
	ErrNotFound = errors.New("storage: not found")
	// ErrLeaseLost: the pop receipt is stale — the message was dequeued or
	// updated again since, or its visibility timeout expired and someone else
	// took it. The caller no longer owns the message.
	ErrLeaseLost = errors.New("storage: lease lost (stale pop receipt)")
	// ErrExists: an insert found an entity with the same PartitionKey and RowKey.
	ErrExists = errors.New("storage: entity already exists")
	// ErrConflict: a conditional update or delete found a different ETag.
	ErrConflict = errors.New("storage: etag mismatch (entity changed)")
	// ErrInvalidKey: a PartitionKey or RowKey breaks Azure Table's key rules.
	ErrInvalidKey = errors.New("storage: invalid key")
	// ErrInvalidName: a queue or table name breaks Azure Storage's naming rules.
	ErrInvalidName = errors.New("storage: invalid name")
	// ErrTooLarge: a message, property, entity or batch exceeds a service limit.
	ErrTooLarge = errors.New("storage: too large")
	// ErrInvalidArgument: any other argument the service would refuse (a batch
	// size out of 1..32, a negative visibility, a batch spanning partitions,
	// an unsupported property type).
	ErrInvalidArgument = errors.New("storage: invalid argument")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("storage: store closed")
	// ErrUnavailable: the storage service could not be reached or did not
	// answer in time (connection refused or reset, a try that timed out,
	// throttling or a 5xx answer), after the driver's retries. Retrying
	// later may succeed; nothing says whether a write was applied.
	ErrUnavailable = errors.New("storage: service unavailable")
	// ErrFull: the store refused a write because the disk under it is
	// (nearly) full: its free space is below the store's reserve (the
	// embedded driver; see Space). Nothing was written. Reads go on, and
	// writes are accepted again by themselves once space is freed;
	// retrying later may succeed.
	ErrFull = errors.New("storage: disk full")
)

// Store hands out queues and tables by name. Queue and Table create the
// resource on first use; calling them again with the same name is cheap and
// idempotent. DeleteQueue, DeleteTable, Queues and Tables manage them by
// name (a prefix's cleanup, retention). A Store is safe for concurrent use.
type Store interface {
	// Queue returns the named queue, creating it if it does not exist.
	// Names follow Azure's queue rules (see ValidateQueueName).
	Queue(ctx context.Context, name string) (Queue, error)
	// Table returns the named table, creating it if it does not exist.
	// Names follow Azure's table rules (see ValidateTableName).
	Table(ctx context.Context, name string) (Table, error)
	// DeleteQueue deletes the named queue and every message on it. A queue
	// that does not exist gives ErrNotFound. Queue handles obtained before
	// fail with ErrNotFound afterwards; Queue(name) creates a new, empty
	// queue (Azure may refuse that for about 30 seconds after a delete,
	// with an error wrapping ErrUnavailable: retry later).
	DeleteQueue(ctx context.Context, name string) error
	// DeleteTable deletes the named table and every entity in it. A table
	// that does not exist gives ErrNotFound. Table handles obtained before
	// fail with ErrNotFound afterwards; Table(name) creates a new, empty
	// table (Azure may refuse that for about 30 seconds after a delete, with
	// an error wrapping ErrUnavailable: retry later).
	DeleteTable(ctx context.Context, name string) error
	// Queues lists the names of the existing queues that start with prefix
	// ("" lists every queue), sorted.
	Queues(ctx context.Context, prefix string) ([]string, error)
	// Tables lists the names of the existing tables that start with prefix
	// ("" lists every table), sorted. Names are compared as created (table
	// names are case-insensitive otherwise).
	Tables(ctx context.Context, prefix string) ([]string, error)
	// Close releases the store. Queues and tables obtained from it fail with
	// ErrClosed afterwards.
	Close() error
}

// TableOpener is an optional interface of a Store that can hand out a
// table without creating it (both drivers implement it; callers fall back
// to Store.Tables to check existence). cmdq reads commands of old days
// through it, so that a read never recreates a day table that retention
// dropped.
type TableOpener interface {
	// OpenTable returns the named table if it may exist, without creating
	// it. A driver that knows the table does not exist returns an error
	// wrapping ErrNotFound; otherwise calls on the handle give ErrNotFound
	// while the table does not exist. Names as in Store.Table.
	OpenTable(ctx context.Context, name string) (Table, error)
}

// Exclusive is an optional interface of a Store that no other process can
// use while this one has it open (the embedded driver: its data directory
// is locked). cmdq skips what only matters when processors of other
// processes share the store, such as a cancel's wait for them (see
// IsExclusive). Wrappers of a store should implement it and answer for
// the store they wrap.
type Exclusive interface {
	// Exclusive reports whether only this process uses the store.
	Exclusive() bool
}

// IsExclusive reports whether st implements Exclusive and says that only
// this process uses it; false for every other store.
func IsExclusive(st Store) bool {
	e, ok := st.(Exclusive)
	return ok && e.Exclusive()
}

// Secret is an optional interface of a Store whose credentials every
// process that uses it holds alike (an Azure Storage account's shared
// key): a secret derived from them lets those processes authenticate
// what they send each other (cmdq's wake-ups between processes) with no
// setting of its own. Wrappers of a store should implement it and answer
// for the store they wrap.
type Secret interface {
	// SharedSecret returns a secret derived (one way) from the store's
	// credentials, the same in every process that has them; nil when
	// the credentials hold no shared key (Microsoft Entra ID tokens).
	SharedSecret() []byte
}

// ServerClock is an optional interface of a Store whose service keeps a
// clock of its own that every process sharing it sees (Azure Storage: the
// Date header of each response): cmdq runs on the service's time, so that
// processes whose clocks disagree agree on run-at times, leases and
// permits. Wrappers of a store should implement it and answer for the
// store they wrap.
type ServerClock interface {
	// ClockOffset estimates how far the service's clock is ahead of this
	// machine's (negative: behind), from the responses seen so far, and
	// how far off the estimate may be (the Date header has whole
	// seconds). ok is false before the first response.
	ClockOffset() (offset, uncertainty time.Duration, ok bool)
}

// ClockOffset returns st's ServerClock estimate (ok false for a store
// without one, or before its first response).
func ClockOffset(st Store) (offset, uncertainty time.Duration, ok bool) {
	if c, is := st.(ServerClock); is {
		return c.ClockOffset()
	}
	return 0, 0, false
}

// SharedSecret returns st's shared secret (Secret), nil when it has none.
func SharedSecret(st Store) []byte {
	if s, ok := st.(Secret); ok {
		return s.SharedSecret()
	}
	return nil
}

// Space is an optional interface of a Store that keeps its data on a local
// disk (the embedded driver): it refuses every write, with an error
// wrapping ErrFull, while the free space of that disk is below its
// reserve, so that the engine never meets a full disk. Wrappers of a store
// should implement it and answer for the store they wrap.
type Space interface {
	// Space reports the store's free space as last probed. It makes no
	// storage call: the driver probes the disk (a statfs) at most every
	// second, and every 100 ms while it is short of space.
	Space() SpaceStatus
}

// SpaceStatus is the free space of a store's disk (Space).
type SpaceStatus struct {
	// Dir is the store's data directory; empty when the store keeps no
	// data on a local disk (a wrapper of such a store).
	Dir string
	// Free is the space, in bytes, that the store's process may still
	// write on Dir's volume.
	Free uint64
	// Reserve is the free space, in bytes, below which the store refuses
	// writes (0: it never refuses).
	Reserve uint64
	// Err is a failed probe (writes are not refused for it), nil
	// otherwise.
	Err error
}

// SpaceOf returns st's space (Space); ok is false when st does not keep
// its data on a local disk (nothing to check).
func SpaceOf(st Store) (status SpaceStatus, ok bool) {
	if s, is := st.(Space); is {
		sp := s.Space()
		return sp, sp.Dir != ""
	}
	return SpaceStatus{}, false
}

// CheckSpace returns nil while st accepts writes with headroom bytes to
// spare above its reserve, and otherwise an error wrapping ErrFull that
// names the directory, its free space and the space needed. A store
// without Space (Azure) always has room.
func CheckSpace(st Store, headroom uint64) error {
	sp, ok := SpaceOf(st)
	if !ok || sp.Reserve == 0 && headroom == 0 || sp.Err != nil {
		return nil
	}
	need := sp.Reserve + headroom
	if sp.Free >= need {
		return nil
	}
	return FullError(sp.Dir, sp.Free, need)
}

// FullError is the error (wrapping ErrFull) of a write refused because
// dir has free bytes free and the write needs need.
func FullError(dir string, free, need uint64) error {
	return fmt.Errorf("%w: %s has %s free, below the %s it needs to accept writes; free space on that volume (delete files, grow it) and writes resume by themselves within a second",
		ErrFull, dir, FormatBytes(free), FormatBytes(need))
}

// FormatBytes writes n bytes in binary units: 512 B, 3.2 MiB, 1.5 GiB.
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	// Cut, not rounded: a byte short of 256 MiB reads 255.9 MiB.
	v := math.Floor(float64(n)/float64(div)*10) / 10
	s := strconv.FormatFloat(v, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + " " + string("KMGTP"[exp]) + "iB"
}

// Limits shared by every driver: Azure Storage's service limits.
const (
	// MaxMessageBytes is the largest queue message text, in bytes (64 KiB).
	MaxMessageBytes = 64 * 1024
	// MaxDequeue is the most messages one Dequeue or Peek returns (32).
	MaxDequeue = 32
	// MaxVisibility is the longest visibility timeout or delay (7 days).
	MaxVisibility = 7 * 24 * time.Hour
	// DefaultTTL is the message time-to-live used when Enqueue gets ttl == 0 (7 days).
	DefaultTTL = 7 * 24 * time.Hour
	// NoExpiry passed as ttl makes a message never expire.
	NoExpiry time.Duration = -1

	// MaxKeyBytes is the largest PartitionKey or RowKey, in UTF-16 bytes as
	// Azure counts them (1 KiB: 512 UTF-16 code units).
	MaxKeyBytes = 1024
	// MaxEntityBytes is the largest entity, keys and property names included (1 MiB).
	MaxEntityBytes = 1024 * 1024
	// MaxProperties is the most custom properties on one entity (252; Azure
	// adds PartitionKey, RowKey and Timestamp for 255).
	MaxProperties = 252
	// MaxPropertyNameBytes is the longest property name (255 characters).
	MaxPropertyNameBytes = 255
	// MaxPropertyBytes is the largest string or binary property value (64 KiB).
	MaxPropertyBytes = 64 * 1024
	// MaxBatchOps is the most operations in one table batch (100).
	MaxBatchOps = 100
	// MaxBatchBytes is the largest table batch payload (4 MiB).
	MaxBatchBytes = 4 * 1024 * 1024
)

// Message is a queue message as returned by Enqueue, Dequeue and Peek.
type Message struct {
	// ID identifies the message within its queue.
	ID string
	// PopReceipt proves ownership of a dequeued message; it changes on every
	// dequeue and every UpdateVisibility. Empty for peeked messages.
	PopReceipt string
	// Text is the message body as enqueued. Empty in the result of Enqueue.
	Text string
	// DequeueCount counts how many times the message was dequeued, this
	// dequeue included. 0 for a message never dequeued.
	DequeueCount int64
	// InsertedAt is when the message was enqueued.
	InsertedAt time.Time
	// ExpiresAt is when the message expires; the zero Time if it never does.
	ExpiresAt time.Time
	// NextVisibleAt is when the message becomes visible to Dequeue again.
	// Zero for peeked messages. Enqueue and UpdateVisibility return a time
	// that is not early (a wake-up then finds the message visible): a
	// service that counts whole seconds and cuts its answer to the second
	// may make it later by up to a second and the answer's way back.
	NextVisibleAt time.Time
}

// Queue is an Azure-style storage queue. Safe for concurrent use.
type Queue interface {
	// Name returns the queue's name.
	Name() string
	// Enqueue adds a message. text is at most MaxMessageBytes. The message is
	// invisible for visibilityDelay (0 = visible at once, at most
	// MaxVisibility, less than ttl) and expires after ttl (0 = DefaultTTL,
	// NoExpiry = never). The result carries ID, PopReceipt, InsertedAt,
	// ExpiresAt and NextVisibleAt.
	Enqueue(ctx context.Context, text string, visibilityDelay, ttl time.Duration) (Message, error)
	// Dequeue takes up to max visible messages (1..MaxDequeue), makes them
	// invisible for visibility (0..MaxVisibility), increments their dequeue
	// count and gives each a new pop receipt. It returns an empty slice, not
	// an error, when no message is visible.
	Dequeue(ctx context.Context, max int, visibility time.Duration) ([]Message, error)
	// UpdateVisibility makes a dequeued message invisible for visibility from
	// now (0 = visible at once) and returns its new pop receipt and next
	// visible time (not early; see Message.NextVisibleAt). The message text is unchanged. A stale receipt gives
	// ErrLeaseLost.
	UpdateVisibility(ctx context.Context, id, popReceipt string, visibility time.Duration) (newPopReceipt string, nextVisibleAt time.Time, err error)
	// Delete removes a dequeued message. A stale receipt gives ErrLeaseLost;
	// a message that no longer exists gives ErrNotFound (Azure cannot always
	// tell these apart; see the driver's notes).
	Delete(ctx context.Context, id, popReceipt string) error
	// Peek returns up to max visible messages (1..MaxDequeue) without
	// changing their visibility, dequeue count or receipts.
	Peek(ctx context.Context, max int) ([]Message, error)
	// ApproximateCount returns the number of messages in the queue, visible or
	// not, expired ones possibly included.
	ApproximateCount(ctx context.Context) (int, error)
}

// Entity is a table entity. Property values must be one of: string, []byte,
// bool, int32, int64, float64, time.Time (UTC, stored with at least
// millisecond precision). Drivers return exactly those types (int32 stays
// int32, int64 stays int64).
type Entity struct {
	PartitionKey string
	RowKey       string
	// ETag is the entity's version, set by the driver on read and write.
	ETag string
	// Timestamp is the time of the entity's last write, set by the driver.
	Timestamp time.Time
	// Properties holds the custom properties (at most MaxProperties). Names
	// PartitionKey, RowKey, Timestamp and ETag are reserved.
	Properties map[string]any
	// Props, when not nil, holds the custom properties of a write instead
	// of Properties (which must then be nil), in typed form: no map and
	// no boxed values to build, and a driver may encode them as they are
	// (the embedded store does). Names must be distinct; the same rules
	// and limits apply. Drivers never fill Props on a read: reads return
	// Properties.
	Props []Prop
}

// UpdateMode says how an update combines with the stored entity.
type UpdateMode int

const (
	// Merge keeps stored properties that the update does not mention.
	Merge UpdateMode = iota
	// Replace drops stored properties that the update does not mention.
	Replace
)

// IfMatchAny passed as ifMatch matches any existing entity (ETag "*").
const IfMatchAny = "*"

// Query selects entities. The zero Query lists the whole table.
type Query struct {
	// PartitionKey, when set, restricts the query to one partition.
	PartitionKey string
	// RowKeyPrefix, when set, restricts the query to row keys with this prefix.
	RowKeyPrefix string
	// Top is the most entities in one page (0 = driver default, at most 1000).
	Top int
	// Continuation resumes a query from the token a previous page returned.
	Continuation string
}

// Page is one page of query results, in (PartitionKey, RowKey) order.
type Page struct {
	Entities []Entity
	// Continuation is empty on the last page; otherwise pass it in
	// Query.Continuation for the next page. A page may be empty and still
	// carry a continuation token.
	Continuation string
}

// Table is an Azure-style storage table. Safe for concurrent use.
type Table interface {
	// Name returns the table's name.
	Name() string
	// Insert adds an entity and returns its ETag; an existing key gives ErrExists.
	Insert(ctx context.Context, e Entity) (etag string, err error)
	// Get reads one entity; a missing one gives ErrNotFound.
	Get(ctx context.Context, partitionKey, rowKey string) (Entity, error)
	// Update changes an existing entity and returns its new ETag. ifMatch ""
	// or IfMatchAny updates whatever is stored; any other value must equal the
	// stored ETag or the update fails with ErrConflict. A missing entity gives
	// ErrNotFound.
	Update(ctx context.Context, e Entity, mode UpdateMode, ifMatch string) (etag string, err error)
	// Upsert inserts the entity or updates it in the given mode.
	Upsert(ctx context.Context, e Entity, mode UpdateMode) (etag string, err error)
	// Delete removes an entity. ifMatch as in Update. A missing entity gives
	// ErrNotFound.
	Delete(ctx context.Context, partitionKey, rowKey, ifMatch string) error
	// Query returns one page of the entities that q selects.
	Query(ctx context.Context, q Query) (Page, error)
	// Batch applies up to MaxBatchOps operations on one partition atomically:
	// all succeed or none is applied. Every operation's PartitionKey must equal
	// partitionKey and no row key may appear twice. On failure the error is a
	// *BatchError naming the failing operation and wrapping its sentinel. On
	// success it returns the new ETag of each operation ("" for deletes).
	Batch(ctx context.Context, partitionKey string, ops []BatchOp) (etags []string, err error)
}

// BatchOpKind is the kind of one operation in a table batch.
type BatchOpKind int

const (
	// OpInsert inserts; an existing entity fails the batch with ErrExists.
	OpInsert BatchOpKind = iota
	// OpUpdate updates an existing entity (Mode, IfMatch as in Table.Update).
	OpUpdate
	// OpUpsert inserts or updates (Mode as in Table.Upsert).
	OpUpsert
	// OpDelete deletes (IfMatch as in Table.Delete).
	OpDelete
)

func (k BatchOpKind) String() string {
	switch k {
	case OpInsert:
		return "insert"
	case OpUpdate:
		return "update"
	case OpUpsert:
		return "upsert"
	case OpDelete:
		return "delete"
	}
	return "unknown"
}

// BatchOp is one operation of a table batch. For OpDelete only the entity's
// keys are used.
type BatchOp struct {
	Kind    BatchOpKind
	Entity  Entity
	Mode    UpdateMode
	IfMatch string
	// AssumeAbsent, on an OpInsert, says that the caller knows the row is
	// absent whenever the batch's condition holds: the batch also holds an
	// OpUpdate or OpDelete of another row with a specific IfMatch ETag,
	// and every write that creates rows like this one changes that row
	// (cmdq appends a command's event rows under its command row's ETag).
	// A driver may then skip reading the row to prove it absent; the
	// batch still fails as a whole, with ErrConflict, when the ETag moved.
	// Without such a condition in the batch it is ignored, and a driver
	// may always check (Azure does: the insert then fails with ErrExists
	// as usual). Default false: the driver checks.
	AssumeAbsent bool
}

// BatchError reports the operation that failed a batch. It wraps the
// operation's sentinel error (ErrExists, ErrConflict, ErrNotFound, …).
type BatchError struct {
	// Index is the failing operation's position in the batch.
	Index int
	Err   error
}

func (e *BatchError) Error() string {
	return "storage: batch operation " + strconv.Itoa(e.Index) + " failed: " + e.Err.Error()
}

// Unwrap returns the operation's error.
func (e *BatchError) Unwrap() error { return e.Err }

// Combiner is an optional interface of a Store whose driver can apply a table
// batch together with a queue write in one durable write (the embedded
// driver: one transaction and one fsync instead of two). Callers detect it
// with a type assertion and fall back to Table.Batch then the queue call. A
// combined call still counts as two storage operations.
type Combiner interface {
	// BatchEnqueue applies ops to partitionKey of the named table (as
	// Table.Batch) and enqueues text on the named queue (as Queue.Enqueue),
	// all or nothing: when the batch fails (a *BatchError) nothing is
	// enqueued, and when the enqueue fails nothing is written. Table and
	// queue are created on first use, as Store.Table and Store.Queue do.
	BatchEnqueue(ctx context.Context, table, partitionKey string, ops []BatchOp, queue, text string, visibilityDelay, ttl time.Duration) (etags []string, msg Message, err error)
	// BatchEnqueueMany is BatchEnqueue for many items at once, all in one
	// durable write: for each item, its ops on its partition of the named
	// table and an enqueue of its text on the named queue, all or nothing
	// for the item. An item whose batch fails (or that is invalid, or names
	// a partition an earlier item named) writes and enqueues nothing and
	// gets its error in its result; the other items are applied. results[i]
	// is items[i]'s outcome. err fails the whole call: nothing is written.
	BatchEnqueueMany(ctx context.Context, table, queue string, items []CombinedItem, visibilityDelay, ttl time.Duration) (results []CombinedResult, err error)
	// BatchDelete applies ops to partitionKey of the named table (as
	// Table.Batch) and deletes the message id with popReceipt from the named
	// queue (as Queue.Delete) in one durable write. The batch decides: when
	// it fails (err) nothing is deleted; when it succeeds it is applied even
	// if the delete fails, whose error (ErrLeaseLost, ErrNotFound) is
	// returned as deleteErr.
	BatchDelete(ctx context.Context, table, partitionKey string, ops []BatchOp, queue, id, popReceipt string) (etags []string, deleteErr, err error)
}

// GroupCombiner is an optional interface of a Store whose driver can
// apply the table batches and message deletes of many completions in one
// durable write (the embedded driver: one engine batch and one log sync
// for a group of commands, as River's batch completer writes many job
// completions in one statement). cmdq's processor groups the completions
// that are ready together through it; without it (Azure) each completion
// stays a batch and a delete (or one Combiner.BatchDelete). Each item still
// counts as the two storage operations it stands for (a table batch and a
// message delete).
type GroupCombiner interface {
	Combiner
	// BatchDeleteMany applies, for each item, its table batch and the
	// delete of its message, all in one durable write; every item is
	// decided on its own, as one Combiner.BatchDelete: an item whose batch
	// fails (its Err: a *BatchError, a validation error) writes and
	// deletes nothing; an item whose batch applies is written even when
	// its delete fails (DeleteErr: ErrLeaseLost, ErrNotFound). results[i]
	// is items[i]'s outcome. Items must name distinct partitions of a
	// table and distinct messages (a repeated one fails as invalid). err
	// fails the whole call: nothing is written. Tables and queues are
	// created on first use.
	BatchDeleteMany(ctx context.Context, items []DeleteItem) (results []DeleteResult, err error)
}

// DeleteItem is one item of GroupCombiner.BatchDeleteMany: a table batch
// on one partition and the delete of one dequeued message.
type DeleteItem struct {
	// Table and PartitionKey name the partition every op's entity is in.
	Table, PartitionKey string
	// Ops are the item's table batch (as Table.Batch).
	Ops []BatchOp
	// Queue, ID and PopReceipt name the message to delete (as Queue.Delete).
	Queue, ID, PopReceipt string
}

// DeleteResult is the outcome of one DeleteItem.
type DeleteResult struct {
	// ETags are the new ETags of the item's ops ("" for deletes), when Err
	// is nil.
	ETags []string
	// DeleteErr is the delete's failure (ErrLeaseLost, ErrNotFound) when
	// the batch applied.
	DeleteErr error
	// Err is the batch's failure: nothing of the item was written.
	Err error
}

// CombinedItem is one item of Combiner.BatchEnqueueMany: a table batch on
// one partition and the text of one message.
type CombinedItem struct {
	// PartitionKey is the partition every op's entity is in.
	PartitionKey string
	// Ops are the item's table batch (as Table.Batch).
	Ops []BatchOp
	// Text is the message enqueued with it (as Queue.Enqueue).
	Text string
	// TextFunc, when set, makes the message text from the ETags the item's
	// ops will have (as CombinedResult.ETags), in place of Text: the
	// Issuer's message carries its command row's ETag. It is called once,
	// before anything is written, and must not block. Default nil (Text).
	TextFunc func(etags []string) string
}

// CombinedResult is the outcome of one CombinedItem.
type CombinedResult struct {
	// ETags are the new ETags of the item's ops ("" for deletes), when Err
	// is nil.
	ETags []string
	// Message is the enqueued message (as Queue.Enqueue returns it), when
	// Err is nil.
	Message Message
	// Err is the item's own failure (a *BatchError, a validation error);
	// nothing of the item was written.
	Err error
}

// OpenExisting returns the named table without creating it: through
// TableOpener when s implements it, else by listing s's tables (one call)
// and opening the table only when it is there. A table that does not exist
// gives an error wrapping ErrNotFound.
func OpenExisting(ctx context.Context, s Store, name string) (Table, error) {
	if o, ok := s.(TableOpener); ok {
		return o.OpenTable(ctx, name)
	}
	names, err := s.Tables(ctx, name)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if equalFoldASCII(n, name) {
			return s.Table(ctx, name)
		}
	}
	return nil, fmt.Errorf("%w: table %q does not exist", ErrNotFound, name)
}
