package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/multi"
)

// accounts opens the run's storage directly (not through the fault
// proxies): Azurite, or, with several accounts, a store spread over them
// as the processes spread theirs (storage/multi, the same order).
func (w *world) accounts(ctx context.Context) (storage.Store, error) {
	conns := []string{w.az.connString()}
	for _, a := range w.extra {
		conns = append(conns, a.connString())
	}
	var ms []multi.Member
	for i, cs := range conns {
		st, err := azure.Open(ctx, azure.Config{ConnectionString: cs})
		if err != nil {
			for _, m := range ms {
				_ = m.Store.Close()
			}
			return nil, err
		}
		ms = append(ms, multi.Member{Name: fmt.Sprintf("account %d", i), Store: st})
	}
	if len(ms) == 1 {
		return ms[0].Store, nil
	}
	return multi.New(ms, multi.Options{})
}

// downProbes is how many commands accountDown issues on the accounts that
// stay up while one is down.
const downProbes = 12

// accountOutages runs the scenario's account outages one after the
// other: the last account's (AccountDown), then, once it is over, the
// first account's (FirstAccountDown: the account behind the fault
// proxies, which held the shared rows before they were kept in every
// account), each starting no earlier than its time into the chaos. The
// first failed check is kept in w.downErr.
func (w *world) accountOutages(ctx context.Context, cl *clients) {
	if len(w.extra) == 0 {
		return
	}
	start := time.Now()
	type outage struct {
		acct int
		at   [2]time.Duration
		ctl  *azuriteCtl
	}
	var outs []outage
	if w.sc.AccountDown[1] > 0 {
		outs = append(outs, outage{len(w.extra), w.sc.AccountDown, w.extra[len(w.extra)-1]})
	}
	if w.sc.FirstAccountDown[1] > 0 {
		outs = append(outs, outage{0, w.sc.FirstAccountDown, w.az})
	}
	for k, o := range outs {
		// An outage that comes after a long one (a loaded machine) runs
		// even when the chaos is over: the run waits for it.
		if k == 0 && !waitCtx(ctx, time.Until(start.Add(o.at[0]))) {
			return
		}
		waitCtx(context.Background(), time.Until(start.Add(o.at[0])))
		if err := w.accountDown(cl, o.acct, o.ctl, o.at[1], uint64(99+k)); err != nil && w.downErr == nil {
			w.downErr = err
		}
	}
}

// accountDown stops account acct's Azurite (ctl) and checks what the
// issue asks of one account down: while it is down, commands whose account
// answers are accepted and completed (downProbes demo.echo commands on
// those accounts, issued once it is down, must all complete before it
// returns), and /healthz names the failing account. The account stays
// down for d, and longer until both are seen (at most Settle), so that
// the check does not depend on the machine's speed. The probes join the
// run's commands (w.downProbes): every invariant holds for them too, and
// for the commands on the lost account, which complete once it is back.
func (w *world) accountDown(cl *clients, acct int, ctl *azuriteCtl, d time.Duration, stream uint64) (failed error) {
	route, err := w.accounts(context.Background())
	if err != nil {
		return err
	}
	defer route.Close()
	w.tl.logf("account %d down: stopping its Azurite for %s", acct, d)
	if err := ctl.stop(); err != nil {
		w.tl.logf("azurite stop: %v", err)
	}
	downAt := time.Now()
	back := downAt.Add(d)
	limit := downAt.Add(w.sc.Settle)
	defer func() {
		w.tl.logf("account %d back: starting its Azurite", acct)
		if err := ctl.start(); err != nil && failed == nil {
			failed = fmt.Errorf("account %d would not start again: %w", acct, err)
		}
	}()
	m := route.(*multi.Store)
	rng := rand.New(rand.NewPCG(w.sc.Seed, stream))
	var probes []*command
	for len(probes) < downProbes {
		c := &command{ID: newID(rng), Type: "demo.echo", Params: `{"case":"account-down"}`}
		c.body, _ = json.Marshal(map[string]any{"id": c.ID, "type": c.Type, "params": json.RawMessage(c.Params)})
		if m.MemberOf(c.ID) != acct {
			probes = append(probes, c)
		}
	}
	w.mu.Lock()
	w.downProbes = append(w.downProbes, probes...)
	w.mu.Unlock()
	ictx, cancel := context.WithDeadline(context.Background(), limit)
	defer cancel()
	for _, c := range probes {
		cl.issue(ictx, c, limit, rng)
	}
	completed, failing := 0, false
	for time.Now().Before(limit) && (completed < len(probes) || !failing) {
		completed = 0
		for _, c := range probes {
			if s, err := cl.status(ictx, c.ID); err == nil && s == "completed" {
				completed++
			}
		}
		failing = failing || w.healthNamesFailing(ictx, acct)
		waitCtx(ictx, 200*time.Millisecond)
	}
	summary := fmt.Sprintf("account %d down: %d of %d commands on the other accounts completed within %s; /healthz named it failing: %v",
		acct, completed, len(probes), time.Since(downAt).Round(time.Millisecond), failing)
	w.tl.logf("%s", summary)
	w.mu.Lock()
	w.outages = append(w.outages, summary)
	w.mu.Unlock()
	switch {
	case completed < len(probes):
		failed = fmt.Errorf("with account %d down, only %d of %d commands on the accounts that answer completed within %s (they must keep flowing)", acct, completed, len(probes), w.sc.Settle)
	case !failing:
		failed = fmt.Errorf("with account %d down for %s, /healthz never named it failing", acct, time.Since(downAt).Round(time.Millisecond))
	}
	waitCtx(context.Background(), time.Until(back))
	return failed
}

// healthNamesFailing reports whether serve's /healthz detail says account
// i is unhealthy.
func (w *world) healthNamesFailing(ctx context.Context, i int) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.addr+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct {
		Detail struct {
			Accounts []struct {
				Name    string `json:"name"`
				Healthy bool   `json:"healthy"`
			} `json:"accounts"`
		} `json:"detail"`
	}
	if json.NewDecoder(resp.Body).Decode(&h) != nil || len(h.Detail.Accounts) <= i {
		return false
	}
	return !h.Detail.Accounts[i].Healthy
}
