package multi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/cmdq-dev/cmdq/storage"
)

// table is one table name in every member: each partition in the member
// of its key (Store.MemberOf).
type table struct {
	s      *Store
	name   string
	create bool // opened with Store.Table: a member without it creates it on first use

	mu      sync.Mutex
	subs    []storage.Table
	missing []bool // OpenTable: the member said the table does not exist
}

func (t *table) Name() string { return t.name }

// sub runs f on member i's table, opening it first if needed.
func (t *table) sub(ctx context.Context, i int, f func(storage.Table) error) error {
	return t.subCall(ctx, i, true, f)
}

// subCall is sub; an unhealthy member is tried only when mayProbe and its
// probe is due.
func (t *table) subCall(ctx context.Context, i int, mayProbe bool, f func(storage.Table) error) error {
	return t.s.wrap(i, t.s.call(i, mayProbe, func(st storage.Store) error {
		t.mu.Lock()
		tb := t.subs[i]
		t.mu.Unlock()
		if tb == nil {
			var err error
			if t.create {
				tb, err = st.Table(ctx, t.name)
			} else {
				tb, err = storage.OpenExisting(ctx, st, t.name)
			}
			if err != nil {
				return err
			}
			t.mu.Lock()
			t.subs[i] = tb
			t.mu.Unlock()
		}
		return f(tb)
	}))
}

// part runs f on the member of partitionKey.
func (t *table) part(ctx context.Context, partitionKey string, f func(storage.Table) error) error {
	if err := storage.ValidateKey("PartitionKey", partitionKey); err != nil {
		return err
	}
	return t.sub(ctx, t.s.MemberOf(partitionKey), f)
}

func (t *table) Insert(ctx context.Context, e storage.Entity) (etag string, err error) {
	err = t.part(ctx, e.PartitionKey, func(tb storage.Table) error { etag, err = tb.Insert(ctx, e); return err })
	return etag, err
}

func (t *table) Get(ctx context.Context, partitionKey, rowKey string) (e storage.Entity, err error) {
	err = t.part(ctx, partitionKey, func(tb storage.Table) error { e, err = tb.Get(ctx, partitionKey, rowKey); return err })
	return e, err
}

func (t *table) Update(ctx context.Context, e storage.Entity, mode storage.UpdateMode, ifMatch string) (etag string, err error) {
	err = t.part(ctx, e.PartitionKey, func(tb storage.Table) error { etag, err = tb.Update(ctx, e, mode, ifMatch); return err })
	return etag, err
}

func (t *table) Upsert(ctx context.Context, e storage.Entity, mode storage.UpdateMode) (etag string, err error) {
	err = t.part(ctx, e.PartitionKey, func(tb storage.Table) error { etag, err = tb.Upsert(ctx, e, mode); return err })
	return etag, err
}

func (t *table) Delete(ctx context.Context, partitionKey, rowKey, ifMatch string) error {
	return t.part(ctx, partitionKey, func(tb storage.Table) error { return tb.Delete(ctx, partitionKey, rowKey, ifMatch) })
}

func (t *table) Batch(ctx context.Context, partitionKey string, ops []storage.BatchOp) (etags []string, err error) {
	if err := storage.ValidateBatch(partitionKey, ops); err != nil {
		return nil, err
	}
	err = t.part(ctx, partitionKey, func(tb storage.Table) error { etags, err = tb.Batch(ctx, partitionKey, ops); return err })
	return etags, err
}

// cursor is a merged query's continuation: per member, the continuation
// of the page being read (T, "" at the start), how far into that page
// the merge got (A: the last key returned from it, "" for none), and
// whether the member is finished (D).
type cursor struct {
	T []string `json:"t"`
	A []string `json:"a"`
	D []bool   `json:"d"`
}

func entityKey(e storage.Entity) string { return e.PartitionKey + "\x00" + e.RowKey }

// Query returns one page: a query of one partition goes to its member; a
// query of the whole table (or of a row-key prefix over it) merges the
// members' pages in (PartitionKey, RowKey) order, one call per member not
// yet finished per page.
func (t *table) Query(ctx context.Context, q storage.Query) (storage.Page, error) {
	if q.PartitionKey != "" {
		var p storage.Page
		err := t.part(ctx, q.PartitionKey, func(tb storage.Table) (err error) { p, err = tb.Query(ctx, q); return err })
		return p, err
	}
	n := len(t.s.members)
	c := cursor{T: make([]string, n), A: make([]string, n), D: make([]bool, n)}
	if q.Continuation != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.Continuation)
		if err == nil {
			err = json.Unmarshal(b, &c)
		}
		if err != nil || len(c.T) != n || len(c.A) != n || len(c.D) != n {
			return storage.Page{}, fmt.Errorf("%w: continuation token %q is not one of this store's", storage.ErrInvalidArgument, q.Continuation)
		}
	}
	top := q.Top
	if top <= 0 || top > 1000 {
		top = 1000
	}
	pages := make([]storage.Page, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		t.mu.Lock()
		skip := c.D[i] || t.missing != nil && t.missing[i]
		t.mu.Unlock()
		if skip {
			c.D[i] = true
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			mq := q
			mq.Continuation = c.T[i]
			errs[i] = t.sub(ctx, i, func(tb storage.Table) (err error) { pages[i], err = tb.Query(ctx, mq); return err })
		}()
	}
	wg.Wait()
	notFound := 0
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, storage.ErrNotFound):
			notFound++
			c.D[i], pages[i] = true, storage.Page{}
		default:
			return storage.Page{}, err
		}
	}
	if notFound > 0 && notFound == n {
		return storage.Page{}, errs[0]
	}
	// The merge may return a member's entities up to the smallest last key
	// of the pages that have more after them: beyond it, such a member may
	// still hold smaller keys.
	bound, bounded := "", false
	type item struct {
		e storage.Entity
		i int
		k string
	}
	var items []item
	for i := range n {
		if c.D[i] && pages[i].Entities == nil && pages[i].Continuation == "" {
			continue
		}
		p := pages[i]
		for _, e := range p.Entities {
			k := entityKey(e)
			if c.A[i] != "" && k <= c.A[i] {
				continue
			}
			items = append(items, item{e, i, k})
		}
		if p.Continuation != "" {
			last := c.A[i] // an empty page: nothing of it may pass what was returned
			if len(p.Entities) > 0 {
				last = entityKey(p.Entities[len(p.Entities)-1])
			}
			if !bounded || last < bound {
				bound, bounded = last, true
			}
		}
	}
	sort.SliceStable(items, func(a, b int) bool { return items[a].k < items[b].k })
	var out []storage.Entity
	taken := make([]int, n)
	lastOf := make([]string, n)
	last := ""
	for _, it := range items {
		if bounded && it.k > bound {
			break
		}
		if len(out) > 0 && it.k == last {
			// A row kept in several members (a replicated partition, see
			// Replicas): returned once, the first member's copy; the
			// others are consumed with it, so that no later page
			// returns them.
			taken[it.i]++
			lastOf[it.i] = it.k
			continue
		}
		if len(out) == top {
			break
		}
		out = append(out, it.e)
		taken[it.i]++
		lastOf[it.i] = it.k
		last = it.k
	}
	// Advance each member: past its page when the merge took all of it,
	// else remember how far it got in the page (read again next time).
	more := false
	for i := range n {
		if c.D[i] {
			continue
		}
		p := pages[i]
		left := 0
		for _, e := range p.Entities {
			if k := entityKey(e); c.A[i] == "" || k > c.A[i] {
				left++
			}
		}
		if taken[i] == left {
			c.T[i], c.A[i] = p.Continuation, ""
			c.D[i] = p.Continuation == ""
		} else if taken[i] > 0 {
			c.A[i] = lastOf[i]
		}
		more = more || !c.D[i]
	}
	page := storage.Page{Entities: out}
	if page.Entities == nil {
		page.Entities = []storage.Entity{}
	}
	if more {
		b, _ := json.Marshal(c)
		page.Continuation = base64.RawURLEncoding.EncodeToString(b)
	}
	return page, nil
}

// Replicas returns the table in each member (storage.Replicated): for the
// partitions a caller keeps in several members itself. A replica's calls
// go to its member whatever the key, and fail at once while the member is
// unhealthy (they never probe it: the store's other calls do).
func (t *table) Replicas() []storage.Table {
	out := make([]storage.Table, len(t.s.members))
	for i := range out {
		out[i] = &replica{t: t, i: i}
	}
	return out
}

// ReplicaOf returns the member that holds partitionKey
// (storage.Replicated).
func (t *table) ReplicaOf(partitionKey string) int { return t.s.MemberOf(partitionKey) }

// replica is a table in one member: every call goes there.
type replica struct {
	t *table
	i int
}

var _ storage.Replicated = (*table)(nil)

func (r *replica) Name() string { return r.t.name }

func (r *replica) call(ctx context.Context, partitionKey string, f func(storage.Table) error) error {
	if err := storage.ValidateKey("PartitionKey", partitionKey); err != nil {
		return err
	}
	return r.t.subCall(ctx, r.i, false, f)
}

func (r *replica) Insert(ctx context.Context, e storage.Entity) (etag string, err error) {
	err = r.call(ctx, e.PartitionKey, func(tb storage.Table) error { etag, err = tb.Insert(ctx, e); return err })
	return etag, err
}

func (r *replica) Get(ctx context.Context, partitionKey, rowKey string) (e storage.Entity, err error) {
	err = r.call(ctx, partitionKey, func(tb storage.Table) error { e, err = tb.Get(ctx, partitionKey, rowKey); return err })
	return e, err
}

func (r *replica) Update(ctx context.Context, e storage.Entity, mode storage.UpdateMode, ifMatch string) (etag string, err error) {
	err = r.call(ctx, e.PartitionKey, func(tb storage.Table) error { etag, err = tb.Update(ctx, e, mode, ifMatch); return err })
	return etag, err
}

func (r *replica) Upsert(ctx context.Context, e storage.Entity, mode storage.UpdateMode) (etag string, err error) {
	err = r.call(ctx, e.PartitionKey, func(tb storage.Table) error { etag, err = tb.Upsert(ctx, e, mode); return err })
	return etag, err
}

func (r *replica) Delete(ctx context.Context, partitionKey, rowKey, ifMatch string) error {
	return r.call(ctx, partitionKey, func(tb storage.Table) error { return tb.Delete(ctx, partitionKey, rowKey, ifMatch) })
}

func (r *replica) Batch(ctx context.Context, partitionKey string, ops []storage.BatchOp) (etags []string, err error) {
	if err := storage.ValidateBatch(partitionKey, ops); err != nil {
		return nil, err
	}
	err = r.call(ctx, partitionKey, func(tb storage.Table) error { etags, err = tb.Batch(ctx, partitionKey, ops); return err })
	return etags, err
}

func (r *replica) Query(ctx context.Context, q storage.Query) (p storage.Page, err error) {
	if q.PartitionKey != "" {
		if err := storage.ValidateKey("PartitionKey", q.PartitionKey); err != nil {
			return storage.Page{}, err
		}
	}
	err = r.t.subCall(ctx, r.i, false, func(tb storage.Table) error { p, err = tb.Query(ctx, q); return err })
	return p, err
}
