package cmdq_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// apiCall is a command type the tests rate-limit across processes.
type apiCall struct {
	N int `json:"n"`
}

func (apiCall) CommandType() string { return "partner.call" }

// startLog records handler start times across every Client of a test.
type startLog struct {
	mu sync.Mutex
	at []time.Time
}

func (l *startLog) add() {
	l.mu.Lock()
	l.at = append(l.at, time.Now())
	l.mu.Unlock()
}

func (l *startLog) sorted() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]time.Time(nil), l.at...)
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// rateRun is one command's token and start in a rate test.
type rateRun struct {
	stamp, start time.Time // its grant's stamp (tuning.Switches.RateToken); its handler's start
}

// mostInWindow returns the most of the runs' times (at) in any window
// [t, t+w) among those counted, and the window's start.
func mostInWindow(runs []rateRun, w time.Duration, at func(rateRun) time.Time, counted func(rateRun) bool) (most int, from time.Time) {
	var ts []time.Time
	for _, r := range runs {
		if counted(r) {
			ts = append(ts, at(r))
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	j := 0
	for i := range ts {
		for j < len(ts) && ts[j].Before(ts[i].Add(w)) {
			j++
		}
		if j-i > most {
			most, from = j-i, ts[i]
		}
	}
	return most, from
}

// TestRateLimit: a type limited to 10 starts per second across three
// Clients that meet only through storage (three processes, for the
// ledger), over 50 commands:
//
//   - no window of 1.1 s (Per and its start allowance of 100 ms) holds
//     more than 10 grants (by their stamps);
//   - no window of 1 s holds more than 10 handler starts among those that
//     began within the allowance of their grant's stamp (all of them,
//     unless the machine is starved: a late start only delays, and may
//     then add to a later window, as the docs say), by the handlers'
//     clocks and by the started events;
//   - the last start is at least 4 s after the first grant (a lower
//     bound: load only delays starts);
//   - every command completes with one started event and no failed or
//     lease_lost one (a wait for a token spends no attempt).
func TestRateLimit(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		rate := cmdq.Rate{Limit: 10, Per: time.Second}
		const allowance = 100 * time.Millisecond // Per/10, at most 100 ms
		var mu sync.Mutex
		runs := map[string]*rateRun{}
		run := func(id string) *rateRun {
			if runs[id] == nil {
				runs[id] = &rateRun{}
			}
			return runs[id]
		}
		var clients []*cmdq.Client
		for i := range 3 {
			st := s.st
			if i > 0 {
				st = otherProcess(t, s)
			}
			cfg := fast()
			cfg.Worker = "w" + string(rune('1'+i))
			cfg.Concurrency = 8
			c := newTuned(t, st, s.prefix, cfg, tuning.Switches{RateToken: func(_, id string, stamp time.Time) {
				mu.Lock()
				run(id).stamp = stamp
				mu.Unlock()
			}})
			if err := cmdq.RegisterWith(c, func(_ context.Context, _ apiCall, a *cmdq.Attempt) error {
				now := time.Now()
				mu.Lock()
				run(a.ID()).start = now
				mu.Unlock()
				return nil
			}, cmdq.HandlerOptions{Rate: rate}); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		ids := make([]string, 50)
		for i := range ids {
			res, err := clients[i%3].Issue(ctx, apiCall{N: i})
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = res.ID
		}
		evStart := completedStartedOnce(ctx, t, clients[0], ids, "waiting for a token")
		mu.Lock()
		defer mu.Unlock()
		var all, byEvent []rateRun
		first, last := time.Time{}, time.Time{}
		for _, id := range ids {
			r := runs[id]
			if r == nil || r.stamp.IsZero() || r.start.IsZero() {
				t.Fatalf("command %s: token and start %+v, want both", id, r)
			}
			all = append(all, *r)
			byEvent = append(byEvent, rateRun{stamp: r.stamp, start: evStart[id]})
			if first.IsZero() || r.stamp.Before(first) {
				first = r.stamp
			}
			if r.start.After(last) {
				last = r.start
			}
		}
		stampOf := func(r rateRun) time.Time { return r.stamp }
		startOf := func(r rateRun) time.Time { return r.start }
		every := func(rateRun) bool { return true }
		onTime := func(r rateRun) bool { return r.start.Before(r.stamp.Add(allowance)) }
		if most, from := mostInWindow(all, rate.Per+allowance, stampOf, every); most > rate.Limit {
			t.Errorf("%d grants in the %s from %s, limit %d", most, rate.Per+allowance, from.Format("15:04:05.000"), rate.Limit)
		}
		if most, from := mostInWindow(all, rate.Per, startOf, onTime); most > rate.Limit {
			t.Errorf("%d handler starts in the second from %s, limit %d: %+v", most, from.Format("15:04:05.000"), rate.Limit, all)
		}
		if most, from := mostInWindow(byEvent, rate.Per, startOf, onTime); most > rate.Limit {
			t.Errorf("%d started events in the second from %s, limit %d", most, from.Format("15:04:05.000"), rate.Limit)
		}
		late := 0
		for _, r := range all {
			if !onTime(r) {
				late++
			}
		}
		most, _ := mostInWindow(all, rate.Per, startOf, every)
		// 50 tokens with at most 10 in any window of 1.1 s: the 41st grant
		// is stamped at least 4 × 1.1 s after the first (the bound on
		// grants, exact whatever the load), and the last start comes at
		// least 4 s after the first grant (the bound on starts).
		stamps := make([]time.Time, 0, len(all))
		for _, r := range all {
			stamps = append(stamps, r.stamp)
		}
		sort.Slice(stamps, func(i, j int) bool { return stamps[i].Before(stamps[j]) })
		if span := stamps[len(stamps)-1].Sub(stamps[0]); span < 4*(rate.Per+allowance)-time.Millisecond {
			t.Errorf("the last of 50 grants was stamped %s after the first, want at least 4.4s at 10 per second", span)
		}
		if span := last.Sub(first); span < 4*time.Second {
			t.Errorf("the last of 50 starts came %s after the first grant, want at least 4s at 10 per second", span)
		}
		t.Logf("50 starts in %s after the first grant; at most %d in a second; %d started later than the allowance after their grant", last.Sub(first), most, late)
		ls, err := clients[2].Limits(ctx)
		if err != nil || len(ls) != 1 || ls[0].Type != "partner.call" || ls[0].Limit != 0 || ls[0].Rate == nil ||
			ls[0].Rate.Limit != 10 || ls[0].Rate.PerMS != 1000 || ls[0].Rate.Used > 10 || ls[0].Permits == nil {
			t.Fatalf("Limits after the run: %+v %v", ls, err)
		}
	})
}

// TestRateWaitHoldsNoSlot: messages of a type whose one token per hour is
// spent wait for the next holding no handler slot: with 2 slots and 5
// such messages waiting, another type's command completes, and Limits
// says the token is used until an hour after its grant and that messages
// wait here.
func TestRateWaitHoldsNoSlot(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		cfg := fast()
		cfg.Concurrency = 2
		cfg.Rates = map[string]cmdq.Rate{"partner.call": {Limit: 1, Per: time.Hour}} // the operator's override
		c := newClient(t, s, cfg)
		var log startLog
		if err := cmdq.RegisterWith(c, func(context.Context, apiCall, *cmdq.Attempt) error {
			log.add()
			return nil
		}, cmdq.HandlerOptions{Rate: cmdq.Rate{Limit: 100, Per: time.Second}}); err != nil {
			t.Fatal(err)
		}
		if err := cmdq.Register(c, func(context.Context, greet, *cmdq.Attempt) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			if _, err := c.Issue(ctx, apiCall{N: i}); err != nil {
				t.Fatal(err)
			}
		}
		var ls []cmdq.LimitInfo
		waitUntil(t, time.Minute, "one start and five messages waiting for the next token", func() bool {
			var err error
			ls, err = c.Limits(ctx)
			return err == nil && len(ls) == 1 && ls[0].Rate != nil && ls[0].Rate.Waiting == 5 && len(log.sorted()) == 1
		})
		first := log.sorted()[0]
		if r := ls[0].Rate; r.Limit != 1 || r.PerMS != time.Hour.Milliseconds() || r.Used != 1 ||
			r.NextFree.Before(first.Add(time.Hour-time.Second)) || r.NextFree.After(first.Add(time.Hour+time.Second)) {
			t.Fatalf("Limits with the token spent: %+v (started %s)", *r, first)
		}
		res, err := c.Issue(ctx, greet{Name: "through"})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.Wait(ctx, res.ID); err != nil || st.State != cmdq.StateCompleted {
			t.Fatalf("another type while five messages wait for a token: %+v %v", st, err)
		}
		if n := len(log.sorted()); n != 1 {
			t.Fatalf("%d starts of a type limited to 1 per hour", n)
		}
	})
}

// TestRateBadInput: a rate with a limit below 1 or an interval of 0 or
// less, in the options or the Client's overrides, is refused with an
// error that says what to do, and changes nothing; an override for a
// type without a handler stops Start.
func TestRateBadInput(t *testing.T) {
	t.Parallel()
	s := openStore(t, "embedded")
	c := newClient(t, s, fast())
	for _, bad := range []cmdq.Rate{{Limit: 0, Per: time.Second}, {Limit: -1, Per: time.Second}, {Limit: 10}, {Limit: 10, Per: -time.Second}} {
		err := cmdq.RegisterWith(c, func(context.Context, apiCall, *cmdq.Attempt) error { return nil }, cmdq.HandlerOptions{Rate: bad})
		if !errors.Is(err, cmdq.ErrInvalidOptions) || !strings.Contains(err.Error(), "Rate") {
			t.Errorf("Rate %+v: %v", bad, err)
		}
		if _, ok := c.Lookup("partner.call"); ok {
			t.Fatalf("a refused registration (Rate %+v) registered the type", bad)
		}
	}
	for _, bad := range []map[string]cmdq.Rate{{"partner.call": {}}, {"partner.call": {Limit: 0, Per: time.Second}}, {"partner.call": {Limit: 5, Per: 0}},
		{"partner.call": {Limit: 5, Per: -time.Minute}}, {"": {Limit: 5, Per: time.Second}}} {
		cfg := fast()
		cfg.Rates = bad
		if err := cfg.Validate(); !errors.Is(err, cmdq.ErrInvalidConfig) || !strings.Contains(err.Error(), "Rates") {
			t.Errorf("Config.Rates %v: %v", bad, err)
		}
		cfg.Prefix = s.prefix
		if _, err := cmdq.New(s.st, cfg); !errors.Is(err, cmdq.ErrInvalidConfig) {
			t.Errorf("New with Config.Rates %v: %v", bad, err)
		}
	}
	cfg := fast()
	cfg.Rates = map[string]cmdq.Rate{"no.such.type": {Limit: 2, Per: time.Second}}
	c2 := newClient(t, s, cfg)
	if err := cmdq.Register(c2, func(context.Context, greet, *cmdq.Attempt) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c2.Start(ctxT(t)); err == nil || !strings.Contains(err.Error(), "no.such.type") {
		t.Fatalf("Start with a rate for a type without a handler: %v", err)
	}
}

// TestRateCalls: a command of a rated type whose tokens are free costs one
// storage call more than a plain one (the ledger's conditional write; the
// first grant's read and insert are spread over the 40), measured as
// TestFlowControlCalls measures the other limits: 40 commands issued one
// at a time in process, both stores behind the counting wrapper.
func TestRateCalls(t *testing.T) {
	t.Parallel()
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		ctx := ctxT(t)
		m := newCallsMeter(t, env)
		c := m.c
		if err := cmdq.Register(c, func(context.Context, greet, *cmdq.Attempt) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := cmdq.RegisterWith(c, func(context.Context, apiCall, *cmdq.Attempt) error { return nil },
			cmdq.HandlerOptions{Rate: cmdq.Rate{Limit: 1000, Per: time.Second}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		plain := m.perCommand(t, func(i int) error { _, err := c.Issue(ctx, greet{Name: fmt.Sprint(i)}); return err })
		rated := m.perCommand(t, func(i int) error { _, err := c.Issue(ctx, apiCall{N: i}); return err })
		t.Logf("storage calls per command: plain %.2f, rate %.2f (+%.2f)", plain, rated, rated-plain)
		if d := rated - plain; d < 0.75 || d > 1.4 {
			t.Errorf("a command of a rated type costs %.2f calls more than a plain one, want 1 (the ledger's write)", d)
		}
	})
}
