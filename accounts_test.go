package cmdq_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/multi"
)

// accountStores opens the stores of n Azurite instances (n accounts).
func accountStores(t *testing.T, n int) []storage.Store {
	t.Helper()
	var out []storage.Store
	for _, cs := range azurite.ConnectionStrings(t, n) {
		st, err := azure.Open(context.Background(), azure.Config{ConnectionString: cs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		out = append(out, st)
	}
	return out
}

// unclosed lends a store to a multi store without letting it close it
// (the test closes the accounts itself, after both multi stores).
type unclosed struct{ storage.Store }

func (unclosed) Close() error { return nil }

func spread(t *testing.T, sts []storage.Store, from ...time.Time) *multi.Store {
	t.Helper()
	var ms []multi.Member
	for i, st := range sts {
		m := multi.Member{Name: fmt.Sprintf("account %d", i), Store: unclosed{st}}
		if i < len(from) {
			m.From = from[i]
		}
		ms = append(ms, m)
	}
	s, err := multi.New(ms, multi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dayIDOf is an ID in cmdq's UUIDv8 layout carrying t's day.
func dayIDOf(t time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	binary.BigEndian.PutUint16(b[2:4], uint16(t.UnixMilli()/(24*60*60*1000)))
	b[6] = b[6]&0x0f | 0x80
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// TestAccountAddedWithCommandsInFlight: a deployment on two accounts
// (Azurite instances) issues 30 commands with nobody processing them,
// restarts with a third account that takes commands from tomorrow
// (multi.Member.From), and its processor runs all 30 (their rows and
// messages stayed where they were) and every command issued after, of
// which those carrying tomorrow's date spread over all three accounts,
// the new one included; /readyz's Health names each account.
func TestAccountAddedWithCommandsInFlight(t *testing.T) {
	sts := accountStores(t, 3)
	ctx := ctxT(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "acc" + hex.EncodeToString(b[:])
	cfg := fast()
	cfg.Prefix = prefix
	cfg.Shards = map[string]int{cmdq.DefaultQueue: 2}

	before := spread(t, sts[:2])
	old, err := cmdq.New(before, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var inFlight []string
	for i := range 30 {
		res, err := old.Issue(ctx, shardJob{N: i})
		if err != nil {
			t.Fatal(err)
		}
		inFlight = append(inFlight, res.ID)
	}
	perAccount := map[int]int{}
	for _, id := range inFlight {
		perAccount[before.MemberOf(id)]++
	}
	if perAccount[0] == 0 || perAccount[1] == 0 {
		t.Fatalf("30 commands on two accounts: %v per account, want both used", perAccount)
	}

	tomorrow := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	after := spread(t, sts, time.Time{}, time.Time{}, tomorrow)
	c, err := cmdq.New(after, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	o := newOrder(30 + 30 + 10)
	if err := cmdq.Register(c, o.handler); err != nil {
		t.Fatal(err)
	}
	for _, id := range inFlight {
		if after.MemberOf(id) != before.MemberOf(id) {
			t.Fatalf("command %s moved from account %d to %d when an account was added", id, before.MemberOf(id), after.MemberOf(id))
		}
		st, err := c.Get(ctx, id)
		if err != nil || st.State != cmdq.StatePending {
			t.Fatalf("Get %s after the account was added: %+v, %v", id, st, err)
		}
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	newAccount := 0
	var later []string
	for i := range 30 {
		res, err := c.Issue(ctx, shardJob{N: 100 + i}, cmdq.WithID(dayIDOf(tomorrow)))
		if err != nil {
			t.Fatal(err)
		}
		later = append(later, res.ID)
		if after.MemberOf(res.ID) == 2 {
			newAccount++
		}
	}
	for i := range 10 {
		res, err := c.Issue(ctx, shardJob{N: 200 + i})
		if err != nil {
			t.Fatal(err)
		}
		if m := after.MemberOf(res.ID); m == 2 {
			t.Fatalf("a command of today went to the account added from tomorrow (%s)", res.ID)
		}
		later = append(later, res.ID)
	}
	if newAccount == 0 {
		t.Fatal("none of 30 commands dated from the new account's day went to it")
	}
	o.wait(t, ctx)
	for _, id := range append(inFlight, later...) {
		st, err := c.Wait(ctx, id)
		if err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("command %s: %+v, %v; want completed", id, st, err)
		}
	}
	h := c.Health()
	if len(h.Accounts) != 3 || !h.Accounts[0].Healthy || !h.Accounts[2].Healthy || h.Accounts[2].Name != "account 2" {
		t.Fatalf("Health().Accounts = %+v, want 3 healthy accounts", h.Accounts)
	}
}
