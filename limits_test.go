package cmdq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// charge is a command type the tests limit across processes.
type charge struct {
	N int `json:"n"`
}

func (charge) CommandType() string { return "payments.charge" }

// peakGauge counts the handlers running at once, across every Client of a
// test, and its peak.
type peakGauge struct {
	mu            sync.Mutex
	running, peak int
	reached       chan struct{} // closed when running first reaches want
	want          int
}

func newPeakGauge(want int) *peakGauge { return &peakGauge{reached: make(chan struct{}), want: want} }

func (g *peakGauge) enter() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running++
	g.peak = max(g.peak, g.running)
	if g.running == g.want {
		select {
		case <-g.reached:
		default:
			close(g.reached)
		}
	}
}

func (g *peakGauge) leave() {
	g.mu.Lock()
	g.running--
	g.mu.Unlock()
}

func (g *peakGauge) get() (running, peak int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running, g.peak
}

// TestGlobalConcurrency: a type limited to 2 across three Clients that
// meet only through storage (three processes, for the permits) never runs
// more than 2 handlers at once over 30 commands of 300 ms, and reaches 2;
// while the permits are held, the waiting messages hold no handler slot
// (another type completes on every Client) and spend no attempt (every
// command completes with one started event and no failure); at the end no
// permit is left.
func TestGlobalConcurrency(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		gauge := newPeakGauge(2)
		hold := make(chan struct{}) // the first handlers hold their permits until closed
		var clients []*cmdq.Client
		for i := range 3 {
			st := s.st
			if i > 0 {
				st = otherProcess(t, s)
			}
			cfg := fast()
			cfg.Worker = "w" + string(rune('1'+i))
			cfg.Concurrency = 4
			cfg.Prefix = s.prefix
			c := newClient(t, store{driver: s.driver, st: st, prefix: s.prefix}, cfg)
			if err := cmdq.RegisterWith(c, func(ctx context.Context, ch charge, _ *cmdq.Attempt) error {
				gauge.enter()
				defer gauge.leave()
				select {
				case <-hold:
				case <-ctx.Done():
					return ctx.Err()
				}
				t := time.NewTimer(300 * time.Millisecond) // the work
				defer t.Stop()
				select {
				case <-t.C:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}, cmdq.HandlerOptions{GlobalConcurrency: 2}); err != nil {
				t.Fatal(err)
			}
			if err := cmdq.Register(c, func(context.Context, greet, *cmdq.Attempt) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		ids := make([]string, 30)
		for i := range ids {
			res, err := clients[i%3].Issue(ctx, charge{N: i})
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = res.ID
		}
		select {
		case <-gauge.reached:
		case <-time.After(time.Minute):
			t.Fatal("two handlers of the limited type never ran at once")
		}
		// Two hold the permits; the other 28 wait, holding no handler
		// slot: another type completes on every Client meanwhile.
		for _, c := range clients {
			res, err := c.Issue(ctx, greet{Name: "through"})
			if err != nil {
				t.Fatal(err)
			}
			if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StateCompleted {
				t.Fatalf("another type while the permits are held: %+v %v", st, err)
			}
		}
		limits, err := clients[0].Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(limits) != 1 || limits[0].Type != "payments.charge" || limits[0].Limit != 2 || limits[0].InUse != 2 || len(limits[0].Permits) != 2 {
			t.Fatalf("Limits while both permits are held: %+v", limits)
		}
		if r, p := gauge.get(); r != 2 || p != 2 {
			t.Fatalf("%d handlers running (peak %d) while the permits are held, want 2", r, p)
		}
		// A waiting command's status says why, and who holds the permits.
		waiting := 0
		for _, id := range ids {
			st, err := clients[2].Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if w := st.Waiting; w != nil && w.Reason == cmdq.WaitPermit {
				if w.Held != 2 || w.Limit != 2 || len(w.HeldBy) != 2 {
					t.Fatalf("waiting for a permit: %+v, want 2 of 2 held, by two processors", w)
				}
				waiting++
			}
		}
		if waiting != 28 {
			t.Fatalf("%d statuses say they wait for a permit while 2 run, want 28", waiting)
		}
		close(hold)
		completedStartedOnce(ctx, t, clients[0], ids, "waiting for a permit")
		if _, p := gauge.get(); p != 2 {
			t.Fatalf("peak %d handlers of a type limited to 2", p)
		}
		waitUntil(t, 30*time.Second, "every permit given back", func() bool {
			ls, err := clients[1].Limits(ctx)
			return err == nil && len(ls) == 1 && ls[0].InUse == 0 && len(ls[0].Permits) == 0
		})
	})
}

// TestGlobalConcurrencyPermitOfAGoneProcess: the permit row a killed
// process leaves (its holder never renews or gives it back) frees itself
// when it expires: on Azure, a command of a type limited to 1 waits for
// it, starts after its expiry (plus the 2 s allowed for clock skew), and
// completes. The embedded store has one process at a time: the next one
// gives such permits back when it opens the store.
func TestGlobalConcurrencyPermitOfAGoneProcess(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		tb, err := s.st.Table(ctx, s.prefix+"commands")
		if err != nil {
			t.Fatal(err)
		}
		parts := shared.New(tb, time.Now)
		expires := time.Now().Add(time.Second).Truncate(time.Millisecond)
		if _, err := parts.TakePermit(ctx, shared.Permit{Type: "payments.charge", Slot: 0, Holder: "pgone", Worker: "killed", Command: "c-of-the-dead", Expires: expires}); err != nil {
			t.Fatal(err)
		}
		cfg := fast()
		cfg.GlobalConcurrency = map[string]int{"payments.charge": 1} // the operator's override
		c := newClient(t, s, cfg)
		if err := cmdq.Register(c, func(context.Context, charge, *cmdq.Attempt) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		ls, err := c.Limits(ctx)
		want := 1 // Azure: the gone process's permit, until it expires
		if s.driver == "embedded" {
			want = 0 // given back when the processor opened the store
		}
		if err != nil || len(ls) != 1 || ls[0].Limit != 1 || len(ls[0].Permits) != want || want == 1 && ls[0].Permits[0].Worker != "killed" {
			t.Fatalf("Limits with the gone process's permit: %+v %v", ls, err)
		}
		res, err := c.Issue(ctx, charge{N: 1})
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Wait(ctx, res.ID)
		if err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("status %+v %v, want completed once the gone process's permit expired", st, err)
		}
		evs, err := c.Events(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if want == 1 && e.Kind == cmdq.EventStarted && e.Time.Before(expires.Add(2*time.Second)) {
				t.Fatalf("started at %s, before the gone holder's permit expired (%s + 2s)", e.Time, expires)
			}
		}
		waitUntil(t, 30*time.Second, "the permit given back", func() bool {
			ps, err := parts.ReadPermits(ctx, "payments.charge")
			return err == nil && len(ps) == 0
		})
	})
}

// TestGlobalConcurrencyBadInput: a limit out of range or for a type
// without a handler is refused with an error that says what to do, and
// changes nothing.
func TestGlobalConcurrencyBadInput(t *testing.T) {
	t.Parallel()
	s := openStore(t, "embedded")
	c := newClient(t, s, fast())
	err := cmdq.RegisterWith(c, func(context.Context, charge, *cmdq.Attempt) error { return nil }, cmdq.HandlerOptions{GlobalConcurrency: -1})
	if !errors.Is(err, cmdq.ErrInvalidOptions) || !strings.Contains(err.Error(), "GlobalConcurrency") {
		t.Fatalf("GlobalConcurrency -1: %v", err)
	}
	if _, ok := c.Lookup("payments.charge"); ok {
		t.Fatal("a refused registration registered the type")
	}
	for _, bad := range []map[string]int{{"payments.charge": 1001}, {"payments.charge": -2}, {"": 2}} {
		cfg := fast()
		cfg.GlobalConcurrency = bad
		if err := cfg.Validate(); !errors.Is(err, cmdq.ErrInvalidConfig) || !strings.Contains(err.Error(), "GlobalConcurrency") {
			t.Errorf("Config.GlobalConcurrency %v: %v", bad, err)
		}
	}
	cfg := fast()
	cfg.GlobalConcurrency = map[string]int{"no.such.type": 2}
	c2 := newClient(t, s, cfg)
	if err := cmdq.Register(c2, func(context.Context, greet, *cmdq.Attempt) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c2.Start(ctxT(t)); err == nil || !strings.Contains(err.Error(), "no.such.type") {
		t.Fatalf("Start with a limit for a type without a handler: %v", err)
	}
}

// deposit and withdraw are two command types of one aggregate (an
// account), ordered by the account's ID (Key).
type deposit struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

func (deposit) CommandType() string { return "acct.deposit" }

type withdraw struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

func (withdraw) CommandType() string { return "acct.withdraw" }

// orderLog records the handler runs of ordered commands, across Clients.
type orderLog struct {
	mu      sync.Mutex
	running map[string]int   // by key
	overlap []string         // runs that started while another of their key ran
	starts  map[string][]int // by key: the seq of each start, in start order
}

func newOrderLog() *orderLog {
	return &orderLog{running: map[string]int{}, starts: map[string][]int{}}
}

func (l *orderLog) run(ctx context.Context, key string, seq int, work time.Duration) error {
	l.mu.Lock()
	l.running[key]++
	if l.running[key] > 1 {
		l.overlap = append(l.overlap, fmt.Sprintf("%s: seq %d started while another ran", key, seq))
	}
	l.starts[key] = append(l.starts[key], seq)
	l.mu.Unlock()
	t := time.NewTimer(work) // the work
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	l.mu.Lock()
	l.running[key]--
	l.mu.Unlock()
	return ctx.Err()
}

// TestOrderKey: 12 commands of two types on one order key, issued in turn
// by two Clients that meet only through storage (two processes), run one
// at a time in issue order, each once, while another key's 12 run the
// same way beside them; a command of the key routed to another queue is
// refused with ErrOrderKeyQueue, and bad keys with ErrInvalidOrderKey,
// storing nothing.
func TestOrderKey(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		log := newOrderLog()
		var clients []*cmdq.Client
		for i := range 2 {
			st := s.st
			if i > 0 {
				st = otherProcess(t, s)
			}
			cfg := fast()
			cfg.Worker = fmt.Sprintf("w%d", i+1)
			cfg.Concurrency = 8
			c := newClient(t, store{driver: s.driver, st: st, prefix: s.prefix}, cfg)
			// An hour's lease: the cancelled scheduled head below hands
			// its key on at once (it cannot be running), not a lease
			// after the cancel, the wait for a head that may be.
			if err := cmdq.RegisterWith(c, func(ctx context.Context, d deposit, _ *cmdq.Attempt) error {
				return log.run(ctx, d.Key, d.Seq, 30*time.Millisecond)
			}, cmdq.HandlerOptions{Lease: time.Hour}); err != nil {
				t.Fatal(err)
			}
			if err := cmdq.Register(c, func(ctx context.Context, w withdraw, _ *cmdq.Attempt) error {
				return log.run(ctx, w.Key, w.Seq, 30*time.Millisecond)
			}); err != nil {
				t.Fatal(err)
			}
			if err := cmdq.Register(c, func(context.Context, resize, *cmdq.Attempt) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if err := cmdq.Register(c, func(context.Context, greet, *cmdq.Attempt) error {
				return cmdq.Permanent(errors.New("refused"))
			}); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		keys := []string{"account/ÄÖ #1?", "account-2"} // any bytes make a key
		var ids []string
		for i := range 12 {
			for _, key := range keys {
				var cmd cmdq.Command = deposit{Key: key, Seq: i}
				if i%3 == 2 {
					cmd = withdraw{Key: key, Seq: i}
				}
				res, err := clients[i%2].Issue(ctx, cmd, cmdq.OrderKey(key))
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, res.ID)
			}
		}
		for _, id := range ids {
			st, err := clients[0].Wait(ctx, id)
			if err != nil || st.State != cmdq.StateCompleted || st.OrderKey == "" {
				t.Fatalf("command %s: %+v %v", id, st, err)
			}
			if st.Attempts != 1 {
				t.Errorf("command %s: %d attempts, want 1 (a wait for its turn spends none)", id, st.Attempts)
			}
		}
		log.mu.Lock()
		if len(log.overlap) > 0 {
			t.Errorf("commands of one key ran at once: %v", log.overlap)
		}
		for _, key := range keys {
			got := log.starts[key]
			if len(got) != 12 {
				t.Errorf("key %q: %d starts %v, want 12 (each once)", key, len(got), got)
				continue
			}
			for i, seq := range got {
				if seq != i {
					t.Errorf("key %q started %v, want issue order 0..11", key, got)
					break
				}
			}
		}
		log.mu.Unlock()

		// The key's commands are on queue "commands"; resize is routed
		// to "images": refused while the key has commands not yet final.
		blocker, err := clients[0].Issue(ctx, deposit{Key: "k3", Seq: 0}, cmdq.OrderKey("k3"), cmdq.After(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := clients[1].Issue(ctx, resize{URL: "x"}, cmdq.OrderKey("k3")); !errors.Is(err, cmdq.ErrOrderKeyQueue) {
			t.Fatalf("an order key's command on another queue: %v, want ErrOrderKeyQueue", err)
		}
		if _, err := clients[0].Issue(ctx, deposit{}, cmdq.OrderKey(strings.Repeat("k", cmdq.MaxOrderKeyLength+1))); !errors.Is(err, cmdq.ErrInvalidOrderKey) {
			t.Errorf("an order key over %d bytes: %v, want ErrInvalidOrderKey", cmdq.MaxOrderKeyLength, err)
		}
		// A cancelled head that had not come due hands the key to the
		// next; so does a poisoned one (its retries would have held it).
		next, err := clients[1].Issue(ctx, deposit{Key: "k3", Seq: 1}, cmdq.OrderKey("k3"))
		if err != nil {
			t.Fatal(err)
		}
		if st, err := clients[1].Get(ctx, next.ID); err != nil || st.Waiting == nil || st.Waiting.Reason != cmdq.WaitOrder ||
			st.Waiting.Command != blocker.ID || st.Waiting.Key != "k3" {
			t.Fatalf("status of a command behind a scheduled head: %+v %v, want waiting for %s on k3", st, err, blocker.ID)
		}
		if _, err := clients[0].Cancel(ctx, blocker.ID, "test"); err != nil {
			t.Fatal(err)
		}
		bad, err := clients[0].Issue(ctx, greet{Name: "poison"}, cmdq.OrderKey("k4"))
		if err != nil {
			t.Fatal(err)
		}
		after, err := clients[1].Issue(ctx, deposit{Key: "k4", Seq: 1}, cmdq.OrderKey("k4"))
		if err != nil {
			t.Fatal(err)
		}
		for id, want := range map[string]cmdq.State{next.ID: cmdq.StateCompleted, bad.ID: cmdq.StatePoisoned, after.ID: cmdq.StateCompleted} {
			if st, err := clients[0].Wait(ctx, id); err != nil || st.State != want {
				t.Fatalf("command %s: %+v %v, want %s", id, st, err, want)
			}
		}
	})
}

// TestFlowControlCalls measures what flow control costs in storage calls
// per command, issued one at a time without contention: a plain command,
// one of a type with a global limit (a permit taken and given back: 2
// calls more; the last give-back may come after the count), and one with
// an order key of its own (the key's tail read and batch at the issue,
// the point read of a delivery without the fast path, the head query and
// the leave batch: 5 more, and one dequeue: the counting store hides the
// embedded store's combined writes, so the Client's own processor gets
// the message by a dequeue instead of the in-process hand-off, as on
// Azure). The figures are in docs/performance.md ("Flow control").
func TestFlowControlCalls(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := ctxT(t)
		m := newCallsMeter(t, env)
		c := m.c
		if err := cmdq.Register(c, func(context.Context, greet, *cmdq.Attempt) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := cmdq.RegisterWith(c, func(context.Context, charge, *cmdq.Attempt) error { return nil }, cmdq.HandlerOptions{GlobalConcurrency: 100}); err != nil {
			t.Fatal(err)
		}
		if err := cmdq.Register(c, func(context.Context, deposit, *cmdq.Attempt) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := cmdq.RegisterWith(c, func(context.Context, tenantJob, *cmdq.Attempt) error { return nil }, cmdq.HandlerOptions{GlobalConcurrencyPerKey: 100}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		plain := m.perCommand(t, func(i int) error { _, err := c.Issue(ctx, greet{Name: fmt.Sprint(i)}); return err })
		limited := m.perCommand(t, func(i int) error { _, err := c.Issue(ctx, charge{N: i}); return err })
		ordered := m.perCommand(t, func(i int) error {
			_, err := c.Issue(ctx, deposit{Seq: i}, cmdq.OrderKey(fmt.Sprintf("acct-%d", i)))
			return err
		})
		perKey := m.perCommand(t, func(i int) error { _, err := c.Issue(ctx, tenantJob{Tenant: fmt.Sprint(i % 7), N: i}); return err })
		t.Logf("storage calls per command: plain %.2f, global limit %.2f (+%.2f), order key %.2f (+%.2f), per-key limit %.2f (+%.2f)",
			plain, limited, limited-plain, ordered, ordered-plain, perKey, perKey-plain)
		if d := perKey - plain; d < 1.7 || d > 2.4 {
			t.Errorf("a command of a type limited per key costs %.2f calls more than a plain one, want 2 (take and give back; its message carries its key's parameters)", d)
		}
		if d := limited - plain; d < 1.7 || d > 2.4 {
			t.Errorf("a command of a limited type costs %.2f calls more than a plain one, want 2 (take and give back)", d)
		}
		if d := ordered - plain; d < 3.6 || d > 4.4 {
			t.Errorf("a command with an order key costs %.2f calls more than a plain one, want 4 (tail read and join batch at the issue, head query, leave batch)", d)
		}
	})
}
