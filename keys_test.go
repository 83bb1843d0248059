package cmdq_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
)

// tenantJob is a command type limited per tenant (its limit key).
type tenantJob struct {
	Tenant string `json:"tenant"`
	N      int    `json:"n"`
}

func (tenantJob) CommandType() string { return "tenant.job" }

func (j tenantJob) LimitKey() string { return j.Tenant }

// TestGlobalConcurrencyPerKey: a type limited to 1 per tenant across two
// Clients that meet only through storage runs the two tenants' commands
// side by side (a handler of tenant a waits until one of tenant b runs)
// and never two of one tenant at once; commands without a tenant are not
// held back by the waiting ones (which hold no handler slot, and past the
// park bound are put back on the queue); Limits lists the permits by key;
// every command completes with one started event and no failure, and no
// permit is left.
func TestGlobalConcurrencyPerKey(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		var mu sync.Mutex
		running := map[string]int{}
		peak := map[string]int{}
		both := make(chan struct{}) // closed when a and b run at once
		release := make(chan struct{})
		var clients []*cmdq.Client
		for i := range 2 {
			st := s.st
			if i > 0 {
				st = otherProcess(t, s)
			}
			cfg := fast()
			cfg.Worker = "w" + string(rune('1'+i))
			cfg.Concurrency = 2 // park bound 4: the 18 waiting ones overflow it
			cfg.Prefix = s.prefix
			c := newClient(t, store{driver: s.driver, st: st, prefix: s.prefix}, cfg)
			if err := cmdq.RegisterWith(c, func(ctx context.Context, j tenantJob, _ *cmdq.Attempt) error {
				if j.Tenant == "" {
					return nil
				}
				mu.Lock()
				running[j.Tenant]++
				peak[j.Tenant] = max(peak[j.Tenant], running[j.Tenant])
				if running["a"] > 0 && running["b"] > 0 {
					select {
					case <-both:
					default:
						close(both)
					}
				}
				mu.Unlock()
				defer func() {
					mu.Lock()
					running[j.Tenant]--
					mu.Unlock()
				}()
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}, cmdq.HandlerOptions{GlobalConcurrencyPerKey: 1}); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		var ids []string
		for i := range 10 {
			for _, tenant := range []string{"a", "b"} {
				res, err := clients[i%2].Issue(ctx, tenantJob{Tenant: tenant, N: i})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, res.ID)
			}
		}
		select {
		case <-both:
		case <-time.After(time.Minute):
			t.Fatal("no handler of tenant b ran while one of tenant a did: the limit is not per key")
		}
		// One of each tenant holds its key; the other 18 wait. Commands
		// without a tenant still run on both Clients.
		for _, c := range clients {
			res, err := c.Issue(ctx, tenantJob{N: -1})
			if err != nil {
				t.Fatal(err)
			}
			if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StateCompleted {
				t.Fatalf("a command without a limit key while the keys are held: %+v %v", st, err)
			}
		}
		limits, err := clients[0].Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(limits) != 1 || limits[0].Type != "tenant.job" || limits[0].KeyLimit != 1 || limits[0].Limit != 0 || limits[0].InUse != 0 {
			t.Fatalf("Limits while both keys are held: %+v", limits)
		}
		keys := limits[0].Keys
		if len(keys) != 2 || keys[0].Key != "a" || keys[0].InUse != 1 || keys[1].Key != "b" || keys[1].InUse != 1 || len(limits[0].Permits) != 2 {
			t.Fatalf("Limits while both keys are held: keys %+v, permits %+v; want a and b with one permit each", keys, limits[0].Permits)
		}
		// A waiting command's status says it waits for its key's permit.
		waiting := 0
		for _, id := range ids {
			st, err := clients[1].Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if w := st.Waiting; w != nil && w.Reason == cmdq.WaitPermit {
				if w.Held != 1 || w.Limit != 1 || len(w.HeldBy) != 1 || (w.Key != "a" && w.Key != "b") {
					t.Fatalf("waiting for a key's permit: %+v, want 1 of 1 held for key a or b", w)
				}
				waiting++
			}
		}
		if waiting != 18 {
			t.Fatalf("%d statuses say they wait for their key's permit while 2 run, want 18", waiting)
		}
		close(release)
		completedStartedOnce(ctx, t, clients[0], ids, "waiting for a key's permit")
		mu.Lock()
		if peak["a"] != 1 || peak["b"] != 1 {
			t.Errorf("peaks per tenant %v, want 1 each (limit 1 per key)", peak)
		}
		mu.Unlock()
		waitUntil(t, 30*time.Second, "every permit given back", func() bool {
			ls, err := clients[1].Limits(ctx)
			return err == nil && len(ls) == 1 && len(ls[0].Keys) == 0 && len(ls[0].Permits) == 0
		})
	})
}

// TestRatePerKey: a type rated 3 per second per tenant, over two Clients:
// no tenant's grants put more than 3 starts in any second (the tokens'
// stamps, which is what the bound is about), each tenant has its own
// ledger (Limits lists both keys), and every command completes once.
func TestRatePerKey(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		rate := cmdq.Rate{Limit: 3, Per: time.Second}
		var mu sync.Mutex
		tenantOf := map[string]string{}
		stamps := map[string][]time.Time{}
		var clients []*cmdq.Client
		for i := range 2 {
			st := s.st
			if i > 0 {
				st = otherProcess(t, s)
			}
			cfg := fast()
			cfg.Worker = "w" + string(rune('1'+i))
			cfg.Concurrency = 4
			c := newTuned(t, st, s.prefix, cfg, tuning.Switches{RateToken: func(_, id string, stamp time.Time) {
				mu.Lock()
				stamps[id] = append(stamps[id], stamp)
				mu.Unlock()
			}})
			if err := cmdq.RegisterWith(c, func(context.Context, tenantJob, *cmdq.Attempt) error { return nil },
				cmdq.HandlerOptions{RatePerKey: rate}); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		var ids []string
		for i := range 8 {
			for _, tenant := range []string{"a", "b"} {
				res, err := clients[i%2].Issue(ctx, tenantJob{Tenant: tenant, N: i})
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				tenantOf[res.ID] = tenant
				mu.Unlock()
				ids = append(ids, res.ID)
			}
		}
		for _, id := range ids {
			st, err := clients[0].Wait(ctx, id)
			if err != nil || st.State != cmdq.StateCompleted {
				t.Fatalf("command %s: %+v %v", id, st, err)
			}
		}
		limits, err := clients[1].Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(limits) != 1 || limits[0].KeyRate == nil || limits[0].KeyRate.Limit != 3 || limits[0].Rate != nil {
			t.Fatalf("Limits: %+v, want tenant.job with a key rate of 3", limits)
		}
		mu.Lock()
		defer mu.Unlock()
		by := map[string][]time.Time{}
		for id, ss := range stamps {
			if len(ss) != 1 {
				t.Errorf("command %s took %d tokens, want 1", id, len(ss))
			}
			by[tenantOf[id]] = append(by[tenantOf[id]], ss...)
		}
		for _, tenant := range []string{"a", "b"} {
			ss := by[tenant]
			if len(ss) != 8 {
				t.Fatalf("tenant %s: %d tokens for 8 commands", tenant, len(ss))
			}
			sort.Slice(ss, func(i, j int) bool { return ss[i].Before(ss[j]) })
			for i := 3; i < len(ss); i++ {
				if d := ss[i].Sub(ss[i-3]); d < rate.Per {
					t.Errorf("tenant %s: tokens %d and %d stamped %s apart: 4 starts within %s", tenant, i-3, i, d, rate.Per)
				}
			}
		}
	})
}

// TestPerKeyLimitNeedsAKey: per-key options on a type without a
// LimitKey method are refused at registration, saying what to add.
func TestPerKeyLimitNeedsAKey(t *testing.T) {
	t.Parallel()
	c := newClient(t, openStore(t, "embedded"), fast())
	for _, o := range []cmdq.HandlerOptions{{GlobalConcurrencyPerKey: 2}, {RatePerKey: cmdq.Rate{Limit: 1, Per: time.Second}}} {
		err := cmdq.RegisterWith(c, func(context.Context, greet, *cmdq.Attempt) error { return nil }, o)
		if !errors.Is(err, cmdq.ErrInvalidOptions) || !strings.Contains(err.Error(), "LimitKey() string") {
			t.Fatalf("RegisterWith %+v on a type without LimitKey: %v", o, err)
		}
	}
	for _, o := range []cmdq.HandlerOptions{{GlobalConcurrencyPerKey: -1}, {GlobalConcurrencyPerKey: 1001}, {RatePerKey: cmdq.Rate{Limit: 1}}} {
		err := cmdq.RegisterWith(c, func(context.Context, tenantJob, *cmdq.Attempt) error { return nil }, o)
		if !errors.Is(err, cmdq.ErrInvalidOptions) {
			t.Fatalf("RegisterWith %+v: %v, want ErrInvalidOptions", o, err)
		}
	}
}
