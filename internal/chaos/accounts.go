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

// accountDown stops the last account's Azurite AccountDown[0] into the
// chaos (commands keep being issued on every account) and checks what the
// issue asks of one account down: while it is down, commands whose account
// answers are accepted and completed (downProbes demo.echo commands on
// those accounts, issued once it is down, must all complete before it
// returns), and /healthz names the failing account. The account stays
// down for AccountDown[1], and longer until both are seen (at most
// Settle), so that the check does not depend on the machine's speed.
// The probes join the run's commands (w.downProbes): every invariant holds
// for them too, and for the commands on the lost account, which complete
// once it is back. A failed check is kept in w.downErr.
func (w *world) accountDown(ctx context.Context, cl *clients) {
	if len(w.extra) == 0 || !waitCtx(ctx, w.sc.AccountDown[0]) {
		return
	}
	route, err := w.accounts(context.Background())
	if err != nil {
		w.downErr = err
		return
	}
	defer route.Close()
	lost, lostIdx := w.extra[len(w.extra)-1], len(w.extra)
	w.tl.logf("account %d down: stopping its Azurite for %s", lostIdx, w.sc.AccountDown[1])
	if err := lost.stop(); err != nil {
		w.tl.logf("azurite stop: %v", err)
	}
	downAt := time.Now()
	back := downAt.Add(w.sc.AccountDown[1])
	limit := downAt.Add(w.sc.Settle)
	defer func() {
		w.tl.logf("account %d back: starting its Azurite", lostIdx)
		if err := lost.start(); err != nil {
			w.downErr = fmt.Errorf("account %d would not start again: %w", lostIdx, err)
		}
	}()
	m := route.(*multi.Store)
	rng := rand.New(rand.NewPCG(w.sc.Seed, 99))
	var probes []*command
	for len(probes) < downProbes {
		c := &command{ID: newID(rng), Type: "demo.echo", Params: `{"case":"account-down"}`}
		c.body, _ = json.Marshal(map[string]any{"id": c.ID, "type": c.Type, "params": json.RawMessage(c.Params)})
		if m.MemberOf(c.ID) != lostIdx {
			probes = append(probes, c)
		}
	}
	w.downProbes = probes
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
		failing = failing || w.healthNamesFailing(ictx, lostIdx)
		waitCtx(ictx, 200*time.Millisecond)
	}
	w.tl.logf("account %d down: %d of %d commands on the other accounts completed within %s; /healthz named it failing: %v",
		lostIdx, completed, len(probes), time.Since(downAt).Round(time.Millisecond), failing)
	switch {
	case completed < len(probes):
		w.downErr = fmt.Errorf("with account %d down, only %d of %d commands on the accounts that answer completed within %s (they must keep flowing)", lostIdx, completed, len(probes), w.sc.Settle)
	case !failing:
		w.downErr = fmt.Errorf("with account %d down for %s, /healthz never named it failing", lostIdx, time.Since(downAt).Round(time.Millisecond))
	}
	waitCtx(context.Background(), time.Until(back))
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
