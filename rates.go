package cmdq

import (
	"context"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/read"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
)

// Rate is a rate limit of a command type (CommandOptions.Rate,
// HandlerOptions.Rate, Config.Rates): at most Limit handler starts of the
// type in any window of Per, across every process on every machine that
// shares the store and Config.Prefix. Each start takes a token from a
// ledger row the processes share; a message that finds none free waits
// for the next, holding its message but no handler slot and spending no
// attempt. The zero Rate is no rate limit. See docs/processor.md, "Rate
// limits", for the bound it keeps and what it costs.
type Rate struct {
	// Limit is the most starts in any window of Per: at least 1.
	Limit int
	// Per is the window, MinRatePer (1 ms) to MaxRatePer (366 days), such
	// as time.Second.
	Per time.Duration
}

// Limits of Rate.
const (
	// MinRatePer is the shortest Rate.Per: 1 ms.
	MinRatePer = model.MinRatePer
	// MaxRatePer is the longest Rate.Per: 366 days.
	MaxRatePer = model.MaxRatePer
)

// IsZero reports whether r is the zero Rate: no rate limit.
func (r Rate) IsZero() bool { return r == Rate{} }

// String returns r as `cmdq serve --rate` takes it: "10/1s".
func (r Rate) String() string { return model.Rate(r).String() }

// RateInfo is one rated command type's rate and how much of it is used
// (LimitInfo.Rate).
type RateInfo struct {
	// Limit and PerMS are the rate as this Client applies it
	// (Config.Rates over HandlerOptions.Rate), Per in milliseconds; for a
	// type this Client does not rate, the rate of the process that last
	// took tokens.
	Limit int   `json:"limit"`
	PerMS int64 `json:"perMs"`
	// Used counts the tokens taken that still count against the limit:
	// those of the last Per and its start allowance (Per/10, at most
	// 100 ms).
	Used int `json:"used"`
	// NextFree is the earliest time a start is free (UTC): the time of
	// the read when fewer than Limit are used.
	NextFree time.Time `json:"nextFree"`
	// Waiting counts the type's messages waiting for a token in this
	// Client's processor (other processes' waits are not stored).
	Waiting int `json:"waitingHere"`
}

// rateOf returns the rate this Client applies to cmdType (zero: none).
func (c *Client) rateOf(cmdType string) (Rate, string) {
	def, ok := c.reg.Lookup(cmdType)
	if !ok {
		return Rate{}, ""
	}
	r := Rate(def.Rate)
	if o, ok := c.cfg.Rates[cmdType]; ok {
		r = o
	}
	return r, def.Queue
}

// addRates adds the rate of every type this Client rates, and of every
// type whose ledger has tokens that still count, to by: one query.
func (c *Client) addRates(ctx context.Context, r *read.Reader, by map[string]*LimitInfo) error {
	ledgers, err := r.ReadRates(ctx)
	if err != nil {
		return err
	}
	info := func(t string) *LimitInfo {
		li := by[t]
		if li == nil {
			li = &LimitInfo{Type: t, Permits: []PermitInfo{}}
			by[t] = li
		}
		return li
	}
	now := time.Now()
	for _, t := range c.reg.Types() {
		if rt, q := c.rateOf(t); !rt.IsZero() {
			li := info(t)
			li.Queue = q
			li.Rate = &RateInfo{Limit: rt.Limit, PerMS: rt.Per.Milliseconds(), NextFree: now.UTC()}
		}
		if def, ok := c.reg.Lookup(t); ok && !def.RatePerKey.IsZero() {
			li := info(t)
			li.Queue = def.Queue
			li.KeyRate = &RateInfo{Limit: def.RatePerKey.Limit, PerMS: def.RatePerKey.Per.Milliseconds()}
		}
	}
	if p := c.procLive.Load(); p != nil {
		for _, s := range p.Rates() {
			if li := by[s.Type]; li != nil && li.Rate != nil {
				li.Rate.Waiting = s.Waiting
			}
		}
	}
	for _, l := range ledgers {
		rt := shared.Rate{Limit: l.Rate.Limit, Per: l.Rate.Per}
		if l.Key != "" {
			if li := by[l.Type]; li != nil && li.KeyRate != nil {
				rt = shared.Rate{Limit: li.KeyRate.Limit, Per: time.Duration(li.KeyRate.PerMS) * time.Millisecond}
			}
			if rt.Limit < 1 || rt.Per <= 0 {
				continue
			}
			if used := l.Used(now, rt); used > 0 {
				ki := keyInfo(info(l.Type), l.Key)
				ki.RateUsed, ki.RateNextFree = used, l.NextFree(now, rt).UTC()
			}
			continue
		}
		if li := by[l.Type]; li != nil && li.Rate != nil {
			rt = shared.Rate{Limit: li.Rate.Limit, Per: time.Duration(li.Rate.PerMS) * time.Millisecond}
		}
		if rt.Limit < 1 || rt.Per <= 0 {
			continue
		}
		used := l.Used(now, rt)
		if used == 0 && (by[l.Type] == nil || by[l.Type].Rate == nil) {
			continue // a ledger of a type nobody rated lately
		}
		li := info(l.Type)
		if li.Rate == nil {
			li.Rate = &RateInfo{Limit: rt.Limit, PerMS: rt.Per.Milliseconds()}
		}
		li.Rate.Used = used
		li.Rate.NextFree = l.NextFree(now, rt).UTC()
	}
	return nil
}

// engineRates returns Config.Rates as the processor takes them.
func engineRates(rs map[string]Rate) map[string]model.Rate {
	if rs == nil {
		return nil
	}
	out := make(map[string]model.Rate, len(rs))
	for t, r := range rs {
		out[t] = model.Rate(r)
	}
	return out
}
