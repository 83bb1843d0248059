package multi_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/embedded"
	"github.com/cmdq-dev/cmdq/storage/multi"
	"github.com/cmdq-dev/cmdq/storage/storagetest"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

func openEmbedded(t testing.TB, n int) []multi.Member {
	t.Helper()
	var ms []multi.Member
	for i := range n {
		st, err := embedded.Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, multi.Member{Name: fmt.Sprintf("embedded %d", i), Store: st})
	}
	return ms
}

func newMulti(t testing.TB, ms []multi.Member, opts multi.Options) *multi.Store {
	t.Helper()
	s, err := multi.New(ms, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func openAzure(t testing.TB, conn string) storage.Store {
	t.Helper()
	st, err := azure.Open(context.Background(), azure.Config{ConnectionString: conn,
		Retry: policy.RetryOptions{MaxRetries: 2, RetryDelay: 50 * time.Millisecond, TryTimeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestConformanceEmbedded runs the storage contract's suite on a store
// spread over three embedded stores.
func TestConformanceEmbedded(t *testing.T) {
	s := newMulti(t, openEmbedded(t, 3), multi.Options{})
	storagetest.Run(t, func(t *testing.T) storage.Store { return s })
}

// TestConformanceAzurite runs it on two Azurite instances (two accounts).
func TestConformanceAzurite(t *testing.T) {
	conns := azurite.ConnectionStrings(t, 2)
	s := newMulti(t, []multi.Member{{Name: "a0", Store: openAzure(t, conns[0])}, {Name: "a1", Store: openAzure(t, conns[1])}}, multi.Options{})
	storagetest.Run(t, func(t *testing.T) storage.Store { return s })
}

// dayID is a UUIDv8 in cmdq's layout carrying day d (days since 1970).
func dayID(d int) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	binary.BigEndian.PutUint16(b[2:4], uint16(d))
	b[6] = b[6]&0x0f | 0x80
	b[8] = b[8]&0x3f | 0x80
	return uuid(b)
}

func v4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return uuid(b)
}

func v7(t time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(b[0:6], ms[2:])
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return uuid(b)
}

func uuid(b [16]byte) string {
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

const dayMs = 24 * 60 * 60 * 1000

// TestMemberOfStableWhenAdding: adding a member with a From moves no key
// of an earlier time, nor any key without a time; keys from From on
// spread over every member about evenly; shared (non-UUID) keys stay home.
func TestMemberOfStableWhenAdding(t *testing.T) {
	ms := openEmbedded(t, 3)
	two := newMulti(t, ms[:2], multi.Options{})
	today := int(time.Now().UnixMilli() / dayMs)
	from := time.UnixMilli(int64(today+3) * dayMs).UTC()
	three := newMulti(t, []multi.Member{ms[0], ms[1], {Name: "new", Store: ms[2].Store, From: from}}, multi.Options{})
	const n = 6000
	counts2, counts3 := make([]int, 2), make([]int, 3)
	for i := range n {
		var keys []string
		switch i % 3 {
		case 0:
			keys = []string{dayID(today - 1 + i%4), v4()} // before From (today+2 is the issue window's end)
		case 1:
			keys = []string{v7(time.Now().Add(time.Duration(i) * time.Second))}
		default:
			keys = []string{v4()}
		}
		for _, k := range keys {
			a, b := two.MemberOf(k), three.MemberOf(k)
			if a != b {
				t.Fatalf("key %s moved from member %d to %d when a member was added from %s", k, a, b, from)
			}
			counts2[a]++
		}
		k := dayID(today + 3 + i%5)
		counts3[three.MemberOf(k)]++
	}
	for i, c := range counts3 {
		if c < n/3*9/10 || c > n/3*11/10 {
			t.Errorf("keys from the new member's From: member %d holds %d of %d, want a third ±10%%: %v", i, c, n, counts3)
		}
	}
	if counts2[0] < counts2[1]*9/10 || counts2[1] < counts2[0]*9/10 {
		t.Errorf("two members hold %v of the keys: want them even ±10%%", counts2)
	}
	for _, k := range []string{"~queues", "~unqueued", "~days", "1:abc"} {
		if m := three.MemberOf(k); m != 0 {
			t.Errorf("shared key %q goes to member %d, want the home (0)", k, m)
		}
	}
	if _, err := multi.New([]multi.Member{{Store: ms[0].Store, From: from}}, multi.Options{}); !errors.Is(err, multi.ErrConfig) {
		t.Errorf("a first member with a From: err %v, want ErrConfig", err)
	}
}

// TestMergedQuery: a whole-table query over three members, read in small
// pages, returns every entity once, in key order, as one store would;
// partition queries and point reads go to the partition's member only.
func TestMergedQuery(t *testing.T) {
	ms := openEmbedded(t, 3)
	s := newMulti(t, ms, multi.Options{})
	ctx := context.Background()
	tb, err := s.Table(ctx, "merged")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 200 {
		pk := v4()
		if i%10 == 0 {
			pk = fmt.Sprintf("~shared%03d", i)
		}
		for r := range 1 + i%3 {
			rk := fmt.Sprintf("r%d", r)
			if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: pk, RowKey: rk, Properties: map[string]any{"I": int64(i)}}); err != nil {
				t.Fatal(err)
			}
			want = append(want, pk+"/"+rk)
		}
	}
	sort.Strings(want)
	// Every member holds some, and each partition is in exactly one.
	held := 0
	for i, m := range ms {
		mt, err := m.Store.Table(ctx, "merged")
		if err != nil {
			t.Fatal(err)
		}
		p, err := mt.Query(ctx, storage.Query{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Entities) == 0 {
			t.Errorf("member %d holds no entity", i)
		}
		for _, e := range p.Entities {
			if got := s.MemberOf(e.PartitionKey); got != i {
				t.Errorf("entity %s/%s is in member %d, MemberOf says %d", e.PartitionKey, e.RowKey, i, got)
			}
		}
		held += len(p.Entities)
	}
	if held != len(want) {
		t.Errorf("members hold %d entities, want %d", held, len(want))
	}
	for _, top := range []int{1, 7, 50, 0} {
		var got []string
		q := storage.Query{Top: top}
		for pages := 0; ; pages++ {
			if pages > 2*len(want)+10 {
				t.Fatalf("top %d: no end after %d pages", top, pages)
			}
			p, err := tb.Query(ctx, q)
			if err != nil {
				t.Fatalf("top %d: %v", top, err)
			}
			if top > 0 && len(p.Entities) > top {
				t.Fatalf("top %d: a page of %d", top, len(p.Entities))
			}
			for _, e := range p.Entities {
				got = append(got, e.PartitionKey+"/"+e.RowKey)
			}
			if p.Continuation == "" {
				break
			}
			q.Continuation = p.Continuation
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("top %d: merged query returned %d entities (sorted: %v), want %d in key order", top, len(got), sort.StringsAreSorted(got), len(want))
		}
	}
}

// TestMemberDown: with one of two accounts refusing connections (a real
// TCP refusal in front of a real Azurite), messages and entities of the
// other keep flowing without waiting on the lost one; the lost one's
// calls fail with ErrUnavailable naming it, Members says which member is
// failing, and once it answers again its messages are there and it is
// healthy.
func TestMemberDown(t *testing.T) {
	conns := azurite.ConnectionStrings(t, 2)
	px := faultproxy.NewNet(t, conns[1])
	s := newMulti(t, []multi.Member{{Name: "a0", Store: openAzure(t, conns[0])}, {Name: "a1", Store: openAzure(t, px.ConnectionString)}},
		multi.Options{ProbeInterval: 200 * time.Millisecond, MaxProbeInterval: 400 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := fmt.Sprintf("down%d", time.Now().UnixNano()%1e9)
	q, err := s.Queue(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := s.Table(ctx, "t"+name)
	if err != nil {
		t.Fatal(err)
	}
	// Keys of each member.
	var keys [2][]string
	for len(keys[0]) < 5 || len(keys[1]) < 5 {
		k := v4()
		i := s.MemberOf(k)
		keys[i] = append(keys[i], k)
	}
	for _, k := range keys[1][:5] {
		if _, err := q.Enqueue(storage.WithRoutingKey(ctx, k), k, 0, storage.NoExpiry); err != nil {
			t.Fatal(err)
		}
	}
	px.Refuse(t)
	// The first call to the lost member meets the refusal (after the
	// driver's retries) and marks it unhealthy.
	if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: keys[1][0], RowKey: "r"}); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("insert on the lost member: %v, want ErrUnavailable", err)
	}
	st := s.Members()
	if !st[0].Healthy || st[1].Healthy || st[1].Name != "a1" || st[1].LastError == "" {
		t.Fatalf("Members = %+v, want a0 healthy and a1 failing with its error", st)
	}
	// The healthy member's work: none of these waits on the lost one
	// (its calls fail at once between probes).
	for round := range 20 {
		k := keys[0][round%5]
		if _, err := tb.Upsert(ctx, storage.Entity{PartitionKey: k, RowKey: fmt.Sprint(round)}, storage.Replace); err != nil {
			t.Fatalf("upsert on the healthy member: %v", err)
		}
		if _, err := q.Enqueue(storage.WithRoutingKey(ctx, k), k, 0, storage.NoExpiry); err != nil {
			t.Fatalf("enqueue on the healthy member: %v", err)
		}
		ms, err := q.Dequeue(ctx, 32, time.Minute)
		if err != nil {
			t.Fatalf("dequeue with one member down: %v", err)
		}
		for _, m := range ms {
			if m.Text != k {
				t.Fatalf("dequeued %q from the lost member while it was down", m.Text)
			}
			if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := tb.Get(ctx, keys[1][1], "r"); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("read on the lost member: %v, want ErrUnavailable", err)
	}
	// Listings leave the lost member out: the queue and table exist in
	// every member, so the healthy one lists them.
	if qs, err := s.Queues(ctx, name); err != nil || len(qs) != 1 || qs[0] != name {
		t.Fatalf("Queues with a member down: %v %v, want [%s]", qs, err, name)
	}
	if ts, err := s.Tables(ctx, "t"+name); err != nil || len(ts) != 1 || ts[0] != "t"+name {
		t.Fatalf("Tables with a member down: %v %v, want [t%s]", ts, err, name)
	}
	px.Restore(t)
	// Back: its five messages are found (a probe brings it back).
	got := map[string]bool{}
	deadline := time.Now().Add(time.Minute)
	for len(got) < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("after the member came back, found %d of its 5 messages; Members %+v", len(got), s.Members())
		}
		ms, err := q.Dequeue(ctx, 32, time.Minute)
		if err != nil {
			continue
		}
		for _, m := range ms {
			got[m.Text] = true
		}
	}
	for _, k := range keys[1][:5] {
		if !got[k] {
			t.Errorf("message %s of the lost member not found after its return", k)
		}
	}
	if st := s.Members(); !st[1].Healthy {
		t.Errorf("Members after the return: %+v, want a1 healthy", st)
	}
}

// TestTableCreatedOnReturn: a table created while a member was down is
// created there on its first use after it returns.
func TestTableCreatedOnReturn(t *testing.T) {
	conns := azurite.ConnectionStrings(t, 2)
	px := faultproxy.NewNet(t, conns[1])
	s := newMulti(t, []multi.Member{{Name: "a0", Store: openAzure(t, conns[0])}, {Name: "a1", Store: openAzure(t, px.ConnectionString)}},
		multi.Options{ProbeInterval: 100 * time.Millisecond})
	ctx := context.Background()
	px.Refuse(t)
	name := fmt.Sprintf("late%d", time.Now().UnixNano()%1e9)
	tb, err := s.Table(ctx, name)
	if err != nil {
		t.Fatalf("Table with one member down: %v (want the handle; the member gets it on first use)", err)
	}
	px.Restore(t)
	var k string
	for k = v4(); s.MemberOf(k) != 1; k = v4() {
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := tb.Insert(ctx, storage.Entity{PartitionKey: k, RowKey: "r"})
		if err == nil {
			break
		}
		if !errors.Is(err, storage.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("insert after the member returned: %v", err)
		}
	}
	if _, err := tb.Get(ctx, k, "r"); err != nil {
		t.Fatal(err)
	}
}

// TestReplicas: a table's replicas reach one member each whatever the
// key (a shared partition written through all three is in all three), and
// a whole-table query returns a row kept in several members once, at
// every page size, with the rows of one member only in between.
func TestReplicas(t *testing.T) {
	ms := openEmbedded(t, 3)
	s := newMulti(t, ms, multi.Options{})
	ctx := context.Background()
	tb, err := s.Table(ctx, "replicas")
	if err != nil {
		t.Fatal(err)
	}
	reps := storage.ReplicasOf(tb)
	if len(reps) != 3 {
		t.Fatalf("ReplicasOf: %d replicas, want 3", len(reps))
	}
	var want []string
	for i := range 30 {
		pk := fmt.Sprintf("~shared%02d", i)
		for j, r := range reps {
			if j == i%3 && i%2 == 0 {
				continue // some rows in two members only
			}
			if _, err := r.Upsert(ctx, storage.Entity{PartitionKey: pk, RowKey: "r", Properties: map[string]any{"M": int64(j)}}, storage.Replace); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, pk+"/r")
		k := v4()
		if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: k, RowKey: "r"}); err != nil {
			t.Fatal(err)
		}
		want = append(want, k+"/r")
	}
	sort.Strings(want)
	for i, m := range ms {
		mt, err := m.Store.Table(ctx, "replicas")
		if err != nil {
			t.Fatal(err)
		}
		e, err := mt.Get(ctx, "~shared01", "r")
		if err != nil || e.Properties["M"] != int64(i) {
			t.Fatalf("member %d's copy of ~shared01: %v, %v; want the one its replica wrote", i, e.Properties, err)
		}
		if got := storage.ReplicaOf(tb, "~shared01"); got != s.MemberOf("~shared01") {
			t.Fatalf("ReplicaOf = %d, MemberOf = %d", got, s.MemberOf("~shared01"))
		}
	}
	for _, top := range []int{1, 2, 7, 0} {
		var got []string
		q := storage.Query{Top: top}
		for pages := 0; ; pages++ {
			if pages > 4*len(want) {
				t.Fatalf("top %d: no end after %d pages", top, pages)
			}
			p, err := tb.Query(ctx, q)
			if err != nil {
				t.Fatalf("top %d: %v", top, err)
			}
			for _, e := range p.Entities {
				got = append(got, e.PartitionKey+"/"+e.RowKey)
			}
			if p.Continuation == "" {
				break
			}
			q.Continuation = p.Continuation
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("top %d: merged query returned %d rows, want %d, each once, in key order:\n got %v\nwant %v", top, len(got), len(want), got, want)
		}
	}
	// A replica's partition query reads its member only.
	p, err := reps[2].Query(ctx, storage.Query{PartitionKey: "~shared00"})
	if err != nil || len(p.Entities) != 1 || p.Entities[0].Properties["M"] != int64(2) {
		t.Fatalf("replica 2's query of ~shared00: %+v, %v", p.Entities, err)
	}
	if _, err := reps[0].Get(ctx, "~shared00", "r"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("replica 0's read of a row it was not given: %v, want ErrNotFound", err)
	}
}

// TestReplicaOfLostMemberNeverProbes: a replica of an unhealthy member
// fails at once with ErrUnavailable naming it, and does not probe it:
// after the member answers again its replica keeps failing until one of
// the store's other calls probes the member back.
func TestReplicaOfLostMemberNeverProbes(t *testing.T) {
	conns := azurite.ConnectionStrings(t, 2)
	px := faultproxy.NewNet(t, conns[1])
	s := newMulti(t, []multi.Member{{Name: "a0", Store: openAzure(t, conns[0])}, {Name: "a1", Store: openAzure(t, px.ConnectionString)}},
		multi.Options{ProbeInterval: 100 * time.Millisecond, MaxProbeInterval: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tb, err := s.Table(ctx, fmt.Sprintf("rep%d", time.Now().UnixNano()%1e9))
	if err != nil {
		t.Fatal(err)
	}
	reps := storage.ReplicasOf(tb)
	px.Refuse(t)
	if _, err := reps[1].Upsert(ctx, storage.Entity{PartitionKey: "~s", RowKey: "r"}, storage.Replace); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("replica write to the lost member: %v, want ErrUnavailable", err)
	}
	if _, err := reps[0].Upsert(ctx, storage.Entity{PartitionKey: "~s", RowKey: "r"}, storage.Replace); err != nil {
		t.Fatalf("replica write to the member that answers: %v", err)
	}
	px.Restore(t)
	var k string
	for k = v4(); s.MemberOf(k) != 1; k = v4() {
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := reps[1].Get(ctx, "~s", "r")
		if !errors.Is(err, storage.ErrUnavailable) || !strings.Contains(err.Error(), "a1") {
			t.Fatalf("replica read of the member marked down, back but not probed: %v, want ErrUnavailable naming a1", err)
		}
		// A call of the store's own probes it once its probe is due.
		if _, err := tb.Get(ctx, k, "r"); errors.Is(err, storage.ErrNotFound) {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the member never came back")
		}
	}
	if _, err := reps[1].Get(ctx, "~s", "r"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("replica read after the probe brought the member back: %v, want ErrNotFound (it never got the row)", err)
	}
}
