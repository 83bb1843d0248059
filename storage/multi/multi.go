// Package multi is a storage driver that spreads one cmdq deployment over
// several stores (members: Azure Storage accounts), behind the one storage
// contract, so that nothing above storage knows how many there are.
//
// Placement is a pure function of a key, the same in every process that
// has the same members:
//
//   - a table entity lives in the member of its PartitionKey;
//   - a queue message lives in the member of the routing key its enqueue
//     carries (storage.WithRoutingKey: cmdq passes the command ID, so a
//     command's message lives with its rows); without one, messages go
//     round robin;
//   - a key that is a UUID goes to one of the members that hold keys of its
//     time (Member.From), chosen by a hash of the key; every other key
//     lives in the first member.
//
// A caller that keeps partitions in several members itself (cmdq keeps
// its shared partitions, such as "~queues", in every member, so that any
// member that answers serves them) reaches each member's table through
// the table's replicas (storage.Replicated): a replica's calls go to its
// member whatever the key, and a whole-table query returns a row kept in
// several members once (the first member's copy).
//
// A key's time is the time a UUIDv7 carries, or the day a UUIDv8 in cmdq's
// layout carries (bytes 2-3, days since 1970); other UUIDs (a UUIDv4) carry
// none and live in the members without a From. Adding a member with a From
// in the future therefore moves no key: keys issued before From keep their
// member, and reads go to exactly one member, with no fan-out and no probe.
//
// A queue or a table is the union of its members' queues or tables:
// Dequeue and Peek take from the members in turn (starting at a rotating
// member, so that none is favoured), ApproximateCount adds theirs up, a
// query of one partition goes to its member, and a query of a whole table
// merges the members' pages in key order (one call per member per page).
// Queue and Table create the resource in every member; Queues and Tables
// list the union (of the members that answer, while one is unavailable);
// DeleteQueue and DeleteTable delete it everywhere.
//
// A member whose call fails with storage.ErrUnavailable is marked
// unhealthy: its calls then fail at once (wrapping storage.ErrUnavailable)
// while the others go on, except one call at a time every ProbeInterval
// (doubling up to MaxProbeInterval while it keeps failing), which brings it
// back when it answers. Dequeue and Peek skip an unhealthy member (they
// fail only when no member answers), so the messages of healthy members
// keep flowing; a replica's calls never probe (the store's other calls
// do), so that a replicated read or write never waits on a lost member;
// a queue or table that could not
// be created in a member while it was down is created on its first use
// there. Store.Members reports each member's state (storage.Members).
package multi

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
)

// Member is one store of a multi store.
type Member struct {
	// Name identifies the member in errors and health reports (an account
	// name and endpoint). Defaults to "member <i>".
	Name string
	// Store is the member's store. The multi store owns it: Close closes
	// it.
	Store storage.Store
	// From, when set, is the first key time this member holds: keys whose
	// time (see the package comment) is before From, and keys without a
	// time, never go to it. Set it for a member added to a deployment, at
	// least two days after every process has the member (cmdq accepts IDs
	// that carry tomorrow's date), so that no key issued before moves.
	// The zero value: the member holds keys of every time, and keys
	// without one. The first member must have none.
	From time.Time
}

// Options tune a multi store. The zero value is the defaults.
type Options struct {
	// ProbeInterval is how long an unhealthy member's calls fail at once
	// before one call tries it again; it doubles while the member keeps
	// failing, up to MaxProbeInterval. Defaults to 1 s.
	ProbeInterval time.Duration
	// MaxProbeInterval caps ProbeInterval's doubling. Defaults to 8 s.
	MaxProbeInterval time.Duration
}

// ErrConfig is wrapped by New's errors.
var ErrConfig = errors.New("multi: invalid members")

// Store is a storage.Store spread over several members. It implements
// storage.Store, storage.TableOpener and storage.Members.
type Store struct {
	members []*member
	opts    Options
	rr      atomic.Uint64 // round robin: enqueues without a key, the member a Dequeue starts at
}

type member struct {
	Member
	i  int
	mu sync.Mutex
	// health
	healthy bool
	since   time.Time
	lastErr error
	retryAt time.Time
	backoff time.Duration
	probing bool
	closed  bool
}

// New returns a store over members (at least one; the first holds the
// keys that are not UUIDs and must have no From). It does no I/O.
func New(members []Member, opts Options) (*Store, error) {
	if len(members) == 0 {
		return nil, fmt.Errorf("%w: give at least one member", ErrConfig)
	}
	if !members[0].From.IsZero() {
		return nil, fmt.Errorf("%w: the first member holds the keys that are not UUIDs and those without a time: it cannot have a From", ErrConfig)
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = time.Second
	}
	if opts.MaxProbeInterval <= 0 {
		opts.MaxProbeInterval = 8 * time.Second
	}
	opts.MaxProbeInterval = max(opts.MaxProbeInterval, opts.ProbeInterval)
	s := &Store{opts: opts}
	var errs []error
	for i, m := range members {
		if m.Store == nil {
			errs = append(errs, fmt.Errorf("%w: member %d has no store", ErrConfig, i))
			continue
		}
		if m.Name == "" {
			m.Name = fmt.Sprintf("member %d", i)
		}
		s.members = append(s.members, &member{Member: m, i: i, healthy: true})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// ClockOffset answers for the first member (storage.ServerClock): the
// account that holds the permits and the ledgers.
func (s *Store) ClockOffset() (offset, uncertainty time.Duration, ok bool) {
	return storage.ClockOffset(s.members[0].Store)
}

// SharedSecret returns the first member's shared secret (storage.Secret):
// every process of a deployment has the same members in the same order.
func (s *Store) SharedSecret() []byte { return storage.SharedSecret(s.members[0].Store) }

// Len returns the number of members.
func (s *Store) Len() int { return len(s.members) }

// Members reports each member's state (storage.Members).
func (s *Store) Members() []storage.MemberState {
	out := make([]storage.MemberState, len(s.members))
	for i, m := range s.members {
		m.mu.Lock()
		out[i] = storage.MemberState{Name: m.Name, Healthy: m.healthy, Since: m.since}
		if !m.healthy && m.lastErr != nil {
			out[i].LastError = m.lastErr.Error()
		}
		m.mu.Unlock()
	}
	return out
}

// MemberOf returns the index of the member that holds key (a PartitionKey
// or a routing key): see the package comment.
func (s *Store) MemberOf(key string) int {
	if len(s.members) == 1 {
		return 0
	}
	t, isUUID, hasTime := keyTime(key)
	if !isUUID {
		return 0
	}
	var set [64]int
	n := 0
	for i, m := range s.members {
		if m.From.IsZero() || hasTime && !t.Before(m.From) {
			if n < len(set) {
				set[n] = i
				n++
			}
		}
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(strings.ToLower(key)))
	return set[h.Sum64()%uint64(n)]
}

// keyTime returns the time key carries: a UUIDv7's millisecond timestamp,
// or the start of the day (UTC) a UUIDv8 in cmdq's layout carries in bytes
// 2-3; isUUID reports a canonical UUID.
func keyTime(key string) (t time.Time, isUUID, hasTime bool) {
	if len(key) != 36 || key[8] != '-' || key[13] != '-' || key[18] != '-' || key[23] != '-' {
		return time.Time{}, false, false
	}
	var b [16]byte
	h := key[0:8] + key[9:13] + key[14:18] + key[19:23] + key[24:]
	if _, err := hex.Decode(b[:], []byte(h)); err != nil {
		return time.Time{}, false, false
	}
	if b[8]&0xc0 != 0x80 {
		return time.Time{}, true, false
	}
	switch b[6] >> 4 {
	case 7:
		var ms [8]byte
		copy(ms[2:], b[0:6])
		return time.UnixMilli(int64(binary.BigEndian.Uint64(ms[:]))).UTC(), true, true
	case 8:
		day := int64(binary.BigEndian.Uint16(b[2:4]))
		return time.UnixMilli(day * 24 * 60 * 60 * 1000).UTC(), true, true
	}
	return time.Time{}, true, false
}

// downError is the error of a call to an unhealthy member that was not
// tried.
type downError struct {
	name  string
	since time.Time
	last  error
}

func (e *downError) Error() string {
	return fmt.Sprintf("storage: %s unavailable since %s (%v); its calls resume when it answers again", e.name, e.since.UTC().Format(time.RFC3339), e.last)
}

func (e *downError) Unwrap() error { return storage.ErrUnavailable }

// enter admits a call to m: nil (and probe true for the one call that
// tries an unhealthy member again, unless mayProbe is false), or a
// downError.
func (m *member) enter(mayProbe bool) (probe bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false, fmt.Errorf("%w: %s", storage.ErrClosed, m.Name)
	}
	if m.healthy {
		return false, nil
	}
	if mayProbe && !m.probing && !time.Now().Before(m.retryAt) {
		m.probing = true
		return true, nil
	}
	return false, &downError{name: m.Name, since: m.since, last: m.lastErr}
}

// leave records the outcome of an admitted call.
func (m *member) leave(probe bool, err error, opts Options) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if probe {
		m.probing = false
	}
	if errors.Is(err, storage.ErrUnavailable) {
		now := time.Now()
		if m.healthy {
			m.healthy, m.since, m.backoff = false, now, opts.ProbeInterval
		} else if probe {
			m.backoff = min(2*m.backoff, opts.MaxProbeInterval)
		}
		m.lastErr = err
		m.retryAt = now.Add(m.backoff)
		return
	}
	if !m.healthy && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		m.healthy, m.since, m.lastErr = true, time.Now(), nil
	}
}

// do runs f as one call to member i.
func (s *Store) do(i int, f func(st storage.Store) error) error {
	return s.call(i, true, f)
}

// call runs f as one call to member i; an unhealthy member is tried only
// when mayProbe and its probe is due.
func (s *Store) call(i int, mayProbe bool, f func(st storage.Store) error) error {
	m := s.members[i]
	probe, err := m.enter(mayProbe)
	if err != nil {
		return err
	}
	err = f(m.Store)
	m.leave(probe, err, s.opts)
	return err
}

// each runs f on every member at once and returns the errors by member.
func (s *Store) each(f func(i int, st storage.Store) error) []error {
	errs := make([]error, len(s.members))
	var wg sync.WaitGroup
	for i := range s.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.do(i, func(st storage.Store) error { return f(i, st) })
		}()
	}
	wg.Wait()
	return errs
}

// wrap names the member in err.
func (s *Store) wrap(i int, err error) error {
	if err == nil {
		return nil
	}
	var de *downError
	if errors.As(err, &de) {
		return err
	}
	return fmt.Errorf("%s: %w", s.members[i].Name, err)
}

// Queue returns the named queue, created in every member that answers (a
// member that is unavailable gets it on first use).
func (s *Store) Queue(ctx context.Context, name string) (storage.Queue, error) {
	if err := storage.ValidateQueueName(name); err != nil {
		return nil, err
	}
	q := &queue{s: s, name: name, subs: make([]storage.Queue, len(s.members))}
	errs := s.each(func(i int, st storage.Store) error {
		sq, err := st.Queue(ctx, name)
		if err == nil {
			q.subs[i] = sq
		}
		return err
	})
	if err := s.openErr(errs); err != nil {
		return nil, err
	}
	return q, nil
}

// Table returns the named table, created in every member that answers (a
// member that is unavailable gets it on first use).
func (s *Store) Table(ctx context.Context, name string) (storage.Table, error) {
	if err := storage.ValidateTableName(name); err != nil {
		return nil, err
	}
	t := &table{s: s, name: name, create: true, subs: make([]storage.Table, len(s.members))}
	errs := s.each(func(i int, st storage.Store) error {
		tb, err := st.Table(ctx, name)
		if err == nil {
			t.subs[i] = tb
		}
		return err
	})
	if err := s.openErr(errs); err != nil {
		return nil, err
	}
	return t, nil
}

// OpenTable returns the named table without creating it
// (storage.TableOpener): ErrNotFound when no member has it.
func (s *Store) OpenTable(ctx context.Context, name string) (storage.Table, error) {
	if err := storage.ValidateTableName(name); err != nil {
		return nil, err
	}
	t := &table{s: s, name: name, subs: make([]storage.Table, len(s.members)), missing: make([]bool, len(s.members))}
	errs := s.each(func(i int, st storage.Store) error {
		tb, err := storage.OpenExisting(ctx, st, name)
		switch {
		case err == nil:
			t.subs[i] = tb
		case errors.Is(err, storage.ErrNotFound):
			t.missing[i] = true
			return nil
		}
		return err
	})
	if err := s.openErr(errs); err != nil {
		return nil, err
	}
	all := true
	for i := range s.members {
		all = all && t.missing[i]
	}
	if all {
		return nil, fmt.Errorf("%w: table %q does not exist", storage.ErrNotFound, name)
	}
	return t, nil
}

// openErr is the error of opening a resource in every member: an error
// other than unavailability, or every member unavailable.
func (s *Store) openErr(errs []error) error {
	var unavailable []error
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, storage.ErrUnavailable):
			unavailable = append(unavailable, s.wrap(i, err))
		default:
			return s.wrap(i, err)
		}
	}
	if len(unavailable) == len(errs) {
		return errors.Join(unavailable...)
	}
	return nil
}

// DeleteQueue deletes the named queue in every member: ErrNotFound when
// no member had it.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	return s.deleteAll(s.each(func(_ int, st storage.Store) error { return st.DeleteQueue(ctx, name) }), "queue", name)
}

// DeleteTable deletes the named table in every member: ErrNotFound when
// no member had it.
func (s *Store) DeleteTable(ctx context.Context, name string) error {
	return s.deleteAll(s.each(func(_ int, st storage.Store) error { return st.DeleteTable(ctx, name) }), "table", name)
}

func (s *Store) deleteAll(errs []error, what, name string) error {
	var out []error
	missing := 0
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, storage.ErrNotFound):
			missing++
		default:
			out = append(out, s.wrap(i, err))
		}
	}
	if len(out) > 0 {
		return errors.Join(out...)
	}
	if missing == len(errs) {
		return fmt.Errorf("%w: %s %q", storage.ErrNotFound, what, name)
	}
	return nil
}

// Queues lists the queues of every member (the union, sorted). A member
// that is unavailable is left out while another answers (a queue is
// created in every member, so the others list it too); any other error of
// a member, or every member unavailable, fails it.
func (s *Store) Queues(ctx context.Context, prefix string) ([]string, error) {
	return s.union(func(st storage.Store) ([]string, error) { return st.Queues(ctx, prefix) })
}

// Tables lists the tables of every member (the union, sorted), leaving out
// an unavailable member as Queues does.
func (s *Store) Tables(ctx context.Context, prefix string) ([]string, error) {
	return s.union(func(st storage.Store) ([]string, error) { return st.Tables(ctx, prefix) })
}

func (s *Store) union(list func(storage.Store) ([]string, error)) ([]string, error) {
	lists := make([][]string, len(s.members))
	errs := s.each(func(i int, st storage.Store) error {
		l, err := list(st)
		lists[i] = l
		return err
	})
	if err := s.openErr(errs); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	names := []string{}
	for _, l := range lists {
		for _, n := range l {
			k := strings.ToLower(n)
			if !seen[k] {
				seen[k] = true
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

// Close closes every member.
func (s *Store) Close() error {
	var errs []error
	for _, m := range s.members {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		if err := m.Store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
		}
	}
	return errors.Join(errs...)
}
